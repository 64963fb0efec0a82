package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/internal/testprocs"
)

// The group seen from any instance, on the real broker (issue #27, item 5):
// two instances advertise their URLs; a live query sent to the one that
// does not own the key is forwarded to the owner and answers with the
// owner's value; KeyOwner names the owner's URL from the group view; and
// when an instance stops without leaving the group, the other's /status
// shows the member holding its partitions until its session times out,
// then the rebalance that gave them away, with its duration.
//
// It needs kafka.Session's group view in the root's session adapter.

type viewInstance struct {
	id   string
	app  *kstate.App[string, string, string]
	srv  *httptest.Server
	stop func() error
}

func startViewInstances(t *testing.T, e specEnv, ids ...string) []*viewInstance {
	var out []*viewInstance
	for _, id := range ids {
		in := &viewInstance{id: id}
		mux := http.NewServeMux()
		in.srv = httptest.NewServer(mux)
		t.Cleanup(in.srv.Close)
		cfg := e.config(t, testprocs.NewCounter)
		cfg.InstanceID = id
		cfg.Batching.Pipelines = 1                 // one member per instance: one partition each
		cfg.Kafka.SessionTimeout = 6 * time.Second // the broker's minimum
		cfg.Group.AdvertisedURL = in.srv.URL
		in.app = newSpecApp(t, cfg)
		mux.Handle("/state/", in.app.QueryHandler())
		mux.Handle("/", in.app.Handler())
		in.stop = testprocs.Start(t, in.app)
		out = append(out, in)
	}
	testprocs.Eventually(t, waitOut, "one partition each, running, with the group view", func() bool {
		time.Sleep(50 * time.Millisecond)
		for _, in := range out {
			st := in.app.Status()
			if in.app.State() != kstate.Running || len(st.Partitions) != 1 || st.Group == nil || len(st.Group.Members) != len(out) {
				return false
			}
		}
		return true
	})
	return out
}

func httpGet(t *testing.T, u string) (*http.Response, string) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

func TestGroupViewForwardRealBroker(t *testing.T) {
	t.Parallel()
	e := newSpecEnv(t, 2)
	ins := startViewInstances(t, e, "i1", "i2")
	testprocs.Produce(t, e.brokers, e.in, "a=1", "b=1", "c=1", "d=1", "a=2", "b=2", "c=2", "d=2")
	testprocs.WaitOutputs(t, e.brokers, e.out, 8, waitOut)
	byID := map[string]*viewInstance{"i1": ins[0], "i2": ins[1]}
	asked := 0
	for _, key := range []string{"a", "b", "c", "d"} {
		o, err := ins[0].app.KeyOwner(context.Background(), key)
		if err != nil || !o.Assigned {
			t.Fatalf("KeyOwner(%q): %+v, %v", key, o, err)
		}
		owner := byID[o.Process]
		if owner == nil || o.URL != owner.srv.URL {
			t.Fatalf("KeyOwner(%q) = %+v: want the owner's advertised URL", key, o)
		}
		other := ins[0]
		if owner == ins[0] {
			other = ins[1]
		}
		// The committed state may trail the outputs by a store write.
		testprocs.Eventually(t, 10*time.Second, "the count of "+key+" through "+other.id, func() bool {
			resp, body := httpGet(t, other.srv.URL+"/state/count/"+url.PathEscape(key))
			var res kstate.QueryResult
			if resp.StatusCode != 200 {
				t.Logf("GET /state/count/%s on %s: %d %s", key, other.id, resp.StatusCode, body)
				time.Sleep(100 * time.Millisecond)
				return false
			}
			if resp.Header.Get("Kstate-Answered-By") != owner.id {
				t.Fatalf("answered by %q, want the owner %s", resp.Header.Get("Kstate-Answered-By"), owner.id)
			}
			return json.Unmarshal([]byte(body), &res) == nil && len(res.Entries) == 1 && string(res.Entries[0].Value) == "2"
		})
		resp, body := httpGet(t, other.srv.URL+"/state/count/"+url.PathEscape(key)+"?forward=0")
		if resp.StatusCode != 421 {
			t.Fatalf("?forward=0 on %s: %d %s, want 421", other.id, resp.StatusCode, body)
		}
		asked++
	}
	if asked != 4 {
		t.Fatalf("asked %d keys", asked)
	}
}

func TestGroupViewStopWithoutLeavingRealBroker(t *testing.T) {
	longTest(t) // the session timeout: ~20 s
	t.Parallel()
	e := newSpecEnv(t, 2)
	ins := startViewInstances(t, e, "i1", "i2")
	g0 := ins[0].app.Status().Group
	if g0 == nil || len(g0.Rebalances) == 0 || g0.Rebalances[0].Duration <= 0 {
		t.Fatalf("i1's group view after the start: %+v, want its rebalances with their durations", g0)
	}
	p2 := ins[1].app.Status().Partitions[0].Partition
	// i2 stops without leaving (a static member: LeaveGroupOnShutdown is
	// off): the group keeps its partition on it until its session times
	// out, then a rebalance gives it to i1.
	if err := ins[1].stop(); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	st := ins[0].app.Status()
	if o, ok := ownerOf(st.Group, p2); !ok || o != "i2" {
		t.Fatalf("right after i2 stopped, i1's view: partition %d owned by %q (%v), want still i2 (its session has not timed out)", p2, o, ok)
	}
	testprocs.Eventually(t, waitOut, "the rebalance after i2's session timed out", func() bool {
		time.Sleep(100 * time.Millisecond)
		st = ins[0].app.Status()
		return st.Group != nil && st.Group.Generation > g0.Generation && len(st.Group.Members) == 1
	})
	t.Logf("i1 saw the rebalance %v after i2 stopped: %+v", time.Since(stopped).Round(time.Millisecond), st.Group.Rebalances[0])
	r := st.Group.Rebalances[0]
	if r.Generation != st.Group.Generation || r.Duration <= 0 || !slices.Contains(r.Assigned, p2) {
		t.Fatalf("i1's last rebalance %+v, want generation %d gaining partition %d", r, st.Group.Generation, p2)
	}
	if o, ok := ownerOf(st.Group, p2); !ok || o != "i1" || len(st.Group.Unowned) != 0 {
		t.Fatalf("after the rebalance: partition %d owned by %q, unowned %v", p2, o, st.Group.Unowned)
	}
	_, body := httpGet(t, ins[0].srv.URL+"/status")
	var js struct {
		Group struct {
			Rebalances []json.RawMessage
		}
	}
	if err := json.Unmarshal([]byte(body), &js); err != nil || len(js.Group.Rebalances) < 2 {
		t.Fatalf("/status: %v %s", err, body)
	}
}

func ownerOf(g *kstate.GroupStatus, p int32) (string, bool) {
	if g == nil {
		return "", false
	}
	for _, m := range g.Members {
		if slices.Contains(m.Active, p) {
			return m.InstanceID, true
		}
	}
	return fmt.Sprint(g.Unowned), false
}
