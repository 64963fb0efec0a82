package kstate_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/internal/engine"
	"github.com/kstate/kstate/internal/engine/enginetest"
	"github.com/kstate/kstate/internal/group"
	"github.com/kstate/kstate/internal/kv"
	"github.com/kstate/kstate/internal/murmur2"
	"github.com/kstate/kstate/internal/runtime"
	"github.com/kstate/kstate/internal/testprocs"
)

// viewCluster runs Apps on the in-memory broker of package enginetest,
// members of an enginetest.Group that sends them the group view (as
// kstate's balancer does), each serving Handler and QueryHandler on an
// httptest server whose URL it advertises.
type viewCluster struct {
	t     *testing.T
	b     *enginetest.Broker
	g     *enginetest.Group
	n     int
	nodes map[string]*viewNode
}

type viewNode struct {
	app *kstate.App[string, string, string]
	gm  *enginetest.GroupMember
	srv *httptest.Server
	// seen records the requests the node's server received.
	mu   sync.Mutex
	seen []*http.Request
}

func (n *viewNode) requests() []*http.Request {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]*http.Request(nil), n.seen...)
}

func newViewCluster(t *testing.T, partitions int) *viewCluster {
	b := enginetest.NewBroker("app", "in", map[string]int{"in": partitions, "out": partitions})
	return &viewCluster{t: t, b: b, g: enginetest.NewGroup(b, nil), n: partitions, nodes: map[string]*viewNode{}}
}

// start runs an App as instance id, advertising its server's URL.
func (c *viewCluster) start(id string) *viewNode {
	t := c.t
	n := &viewNode{}
	mux := http.NewServeMux()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.mu.Lock()
		n.seen = append(n.seen, r.Clone(context.Background()))
		n.mu.Unlock()
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	cfg := config([]string{"unused:9092"}, t.TempDir(), testprocs.NewCounter)
	cfg.InstanceID = id
	cfg.Group.AdvertisedURL = srv.URL
	app := newApp(t, cfg)
	mux.Handle("/state/", app.QueryHandler())
	mux.Handle("/", app.Handler())
	n.app, n.srv = app, srv
	n.gm = c.g.Join(enginetest.NewMember(c.b, id, func(string, ...any) {}), id, srv.URL)
	var smu sync.Mutex
	stores := map[int32]kv.Store{}
	ports := runtime.Ports{
		Admin:     enginetest.Admin{B: c.b},
		Changelog: enginetest.Changelog{B: c.b},
		Clock:     enginetest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)),
		NewSession: func(string, func() bool, time.Duration) (engine.Session, error) {
			return n.gm, nil
		},
		Backend: func(p int32) kv.Store {
			smu.Lock()
			defer smu.Unlock()
			if stores[p] == nil {
				stores[p] = kv.NewMemory()
			}
			return stores[p]
		},
		Test: true,
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := runtime.RunApp(ctx, app, ports); err != nil {
			t.Errorf("%s: Run: %v", id, err)
		}
	}()
	go func() { // the loop runs freely
		for n.gm.Step(ctx.Done()) {
			time.Sleep(time.Millisecond)
		}
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Errorf("%s: Run did not return", id)
		}
	})
	c.nodes[id] = n
	return n
}

// phantom is a member of the group no App runs: it owns partitions in
// the view and advertises addr.
func (c *viewCluster) phantom(id, addr string) *enginetest.GroupMember {
	return c.g.Join(enginetest.NewMember(c.b, id, func(string, ...any) {}), id, addr)
}

// keyOf returns a key of partition p.
func (c *viewCluster) keyOf(p int32) string {
	for i := 0; ; i++ {
		k := fmt.Sprintf("k%d", i)
		if murmur2.Partition([]byte(k), c.n) == p {
			return k
		}
	}
}

// count appends one record of key to its partition and waits until the
// owner's Query answers want.
func (c *viewCluster) count(owner *viewNode, key, want string) {
	p := murmur2.Partition([]byte(key), c.n)
	if err := c.b.Append("in", p, engine.Message{Key: []byte(key), Value: []byte("v")}); err != nil {
		c.t.Fatal(err)
	}
	testprocs.Eventually(c.t, 30*time.Second, "the count of "+key, func() bool {
		time.Sleep(5 * time.Millisecond)
		res, err := owner.app.Query(context.Background(), "count", key)
		return err == nil && len(res.Entries) == 1 && string(res.Entries[0].Value) == want
	})
}

// running waits until each node holds its partitions, restored.
func (c *viewCluster) running(want map[*viewNode]int) {
	testprocs.Eventually(c.t, 30*time.Second, "partitions assigned and restored", func() bool {
		time.Sleep(5 * time.Millisecond)
		for n, k := range want {
			m := n.app.Metrics()
			if n.app.State() != kstate.Running || len(m.Assigned) != k {
				return false
			}
		}
		return true
	})
}

// fetch sends GET path to n's server with header h.
func fetch(t *testing.T, n *viewNode, path string, h http.Header) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest("GET", n.srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range h {
		req.Header[k] = vs
	}
	resp, err := http.DefaultClient.Do(req)
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

type queryMiss struct {
	Error string
	Owner *kstate.KeyOwner
}

func decodeMiss(t *testing.T, body string) queryMiss {
	t.Helper()
	var m queryMiss
	if err := json.Unmarshal([]byte(body), &m); err != nil || m.Owner == nil {
		t.Fatalf("a 421 answer without its owner: %v: %s", err, body)
	}
	return m
}

// A live query sent to the wrong instance is forwarded to the owner, whose
// URL the group view names (KeyOwner.URL), once, with the caller's
// credentials, and answers with the owner's response; ?forward=0, a
// forwarded request, an owner without a URL and an unowned partition
// answer 421 with the owner; an owner that does not answer gives 502.
// (Before: KeyOwner had no URL and every such query answered 421.)
func TestQueryForwardedToOwner(t *testing.T) {
	c := newViewCluster(t, 4)
	i1, i2 := c.start("i1"), c.start("i2")
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL
	dead.Close()
	gone, mute := c.phantom("i3", deadURL), c.phantom("i4", "")
	c.g.Rebalance(time.Second, map[*enginetest.GroupMember]group.Member{
		i1.gm: {Active: []int32{0}}, i2.gm: {Active: []int32{1}}, gone: {Active: []int32{2}}, mute: {Active: []int32{3}},
	})
	c.running(map[*viewNode]int{i1: 1, i2: 1})
	k1 := c.keyOf(0)
	c.count(i1, k1, "1")
	c.count(i1, k1, "2")

	// KeyOwner from the view, on the owner and elsewhere.
	for _, n := range []*viewNode{i1, i2} {
		o, err := n.app.KeyOwner(context.Background(), k1)
		if err != nil {
			t.Fatal(err)
		}
		if !o.Assigned || o.InstanceID != "i1" || o.Process != "i1" || o.URL != i1.srv.URL || o.Local != (n == i1) || o.Partition != 0 {
			t.Fatalf("KeyOwner(%q) on %s = %+v, want i1 at %s", k1, n.srv.URL, o, i1.srv.URL)
		}
	}

	// Forwarded: i2 answers with i1's state, and says who answered.
	h := http.Header{"Authorization": {"Bearer s3cret"}, "Connection": {"X-Hop"}, "X-Hop": {"1"}, "X-Request-Id": {"r1"}}
	before := len(i1.requests())
	resp, body := fetch(t, i2, "/state/count/"+url.PathEscape(k1), h)
	var res kstate.QueryResult
	if err := json.Unmarshal([]byte(body), &res); resp.StatusCode != 200 || err != nil || len(res.Entries) != 1 || string(res.Entries[0].Value) != "2" {
		t.Fatalf("GET /state/count/%s on i2 (owned by i1): %d %s, want 200 with i1's count 2", k1, resp.StatusCode, body)
	}
	if got := resp.Header.Get("Kstate-Answered-By"); got != "i1" {
		t.Fatalf("Kstate-Answered-By %q, want i1", got)
	}
	reqs := i1.requests()[before:]
	if len(reqs) != 1 {
		t.Fatalf("i1 received %d requests for one forwarded query", len(reqs))
	}
	fw := reqs[0]
	if fw.Header.Get("Authorization") != "Bearer s3cret" || fw.Header.Get("X-Request-Id") != "r1" ||
		fw.Header.Get("Kstate-Forwarded-By") != "i2" || fw.Header.Get("X-Hop") != "" || fw.URL.Path != "/state/count/"+k1 {
		t.Fatalf("the forwarded request: %s %v", fw.URL, fw.Header)
	}

	// ?forward=0: 421 with the owner's URL; i1 not asked.
	before = len(i1.requests())
	resp, body = fetch(t, i2, "/state/count/"+url.PathEscape(k1)+"?forward=0", nil)
	if m := decodeMiss(t, body); resp.StatusCode != 421 || m.Owner.URL != i1.srv.URL || !strings.Contains(m.Error, "forward=0") {
		t.Fatalf("?forward=0: %d %s, want 421 naming %s", resp.StatusCode, body, i1.srv.URL)
	}
	// A forwarded request is never forwarded again.
	resp, body = fetch(t, i2, "/state/count/"+url.PathEscape(k1), http.Header{"Kstate-Forwarded-By": {"i9"}})
	if m := decodeMiss(t, body); resp.StatusCode != 421 || m.Owner.URL != i1.srv.URL || resp.Header.Get("Kstate-Answered-By") != "i2" {
		t.Fatalf("a forwarded request not owned here: %d %v %s, want 421 from i2", resp.StatusCode, resp.Header, body)
	}
	if n := len(i1.requests()) - before; n != 0 {
		t.Fatalf("i1 received %d requests, want none (forward=0, already forwarded)", n)
	}

	// An owner that advertises no URL: 421 saying so, url "".
	resp, body = fetch(t, i1, "/state/count/"+url.PathEscape(c.keyOf(3)), nil)
	if m := decodeMiss(t, body); resp.StatusCode != 421 || m.Owner.InstanceID != "i4" || m.Owner.URL != "" ||
		!strings.Contains(m.Error, "Options.Group.AdvertisedURL is empty") || !strings.Contains(body, `"url": ""`) {
		t.Fatalf("owner without a URL: %d %s", resp.StatusCode, body)
	}
	// An owner that does not answer: 502 with the owner.
	resp, body = fetch(t, i1, "/state/count/"+url.PathEscape(c.keyOf(2)), nil)
	if m := decodeMiss(t, body); resp.StatusCode != 502 || m.Owner.URL != deadURL || !strings.Contains(m.Error, "forwarding") {
		t.Fatalf("owner not answering: %d %s, want 502", resp.StatusCode, body)
	}

	// i3 leaves without a new owner for partition 2: unowned, 421.
	c.g.Rebalance(2*time.Second, map[*enginetest.GroupMember]group.Member{
		i1.gm: {Active: []int32{0}}, i2.gm: {Active: []int32{1}}, mute: {Active: []int32{3}},
	})
	testprocs.Eventually(t, 10*time.Second, "the second generation's view", func() bool {
		o, err := i1.app.KeyOwner(context.Background(), c.keyOf(2))
		return err == nil && !o.Assigned
	})
	resp, body = fetch(t, i1, "/state/count/"+url.PathEscape(c.keyOf(2)), nil)
	if m := decodeMiss(t, body); resp.StatusCode != 421 || m.Owner.Assigned || !strings.Contains(m.Error, "no member of the group owns partition 2") {
		t.Fatalf("unowned partition: %d %s", resp.StatusCode, body)
	}
}

// Options.Group.AdvertisedURL must be an absolute http(s) URL of the
// instance: the error names the field and the value.
func TestAdvertisedURLRefusals(t *testing.T) {
	for _, bad := range []string{"pod-0:8080", "ftp://pod-0", "http://", "http://pod-0:8080/api", "http://u:p@pod-0",
		"http://pod-0?x=1", "http://pod-0#f", "http://pod-0:99999", "://x"} {
		cfg := config([]string{"k:9092"}, t.TempDir(), testprocs.NewCounter)
		cfg.Group.AdvertisedURL = bad
		_, err := kstate.New(cfg.Topology, cfg.Options)
		if !errors.Is(err, kstate.ErrConfig) || !strings.Contains(err.Error(), fmt.Sprintf("Options.Group.AdvertisedURL %q", bad)) {
			t.Errorf("AdvertisedURL %q: %v, want ErrConfig naming the field and the value", bad, err)
		}
	}
	for _, good := range []string{"", "http://pod-0.app:8080", "https://pod-0.app/", "http://[::1]:8080", "http://10.0.0.1"} {
		cfg := config([]string{"k:9092"}, t.TempDir(), testprocs.NewCounter)
		cfg.Group.AdvertisedURL = good
		if _, err := kstate.New(cfg.Topology, cfg.Options); err != nil {
			t.Errorf("AdvertisedURL %q: %v", good, err)
		}
	}
}

// Status.Group (and /status) show the whole group as the last assignment
// described it: members with their URLs, standbys and warm-ups with their
// lag, the partitions that move when caught up, unowned partitions and
// the last rebalances with their durations. (Before: Status had no group,
// and an instance whose own partitions were caught up looked healthy
// while partitions of the group had no owner.)
func TestStatusGroupView(t *testing.T) {
	c := newViewCluster(t, 4)
	i1, i2 := c.start("i1"), c.start("i2")
	if g := i1.app.Status().Group; g != nil {
		t.Fatalf("Status.Group before any assignment: %+v, want nil", g)
	}
	ghost := c.phantom("i3", "")
	c.g.Rebalance(1500*time.Millisecond, map[*enginetest.GroupMember]group.Member{
		i1.gm: {Active: []int32{0}}, i2.gm: {Active: []int32{1}}, ghost: {Active: []int32{2, 3}},
	})
	c.running(map[*viewNode]int{i1: 1, i2: 1})
	// i3 stopped without leaving: at its session timeout the group goes on
	// without it; partition 3 is warmed up on i2 (a standby of 0 too),
	// partition 2 is left unowned.
	c.g.Rebalance(250*time.Millisecond, map[*enginetest.GroupMember]group.Member{
		i1.gm: {Active: []int32{0}},
		i2.gm: {Active: []int32{1}, Standby: []int32{0}, Warmup: []int32{3}, Lag: map[int32]int64{0: 5, 3: 1200}},
	})
	var g *kstate.GroupStatus
	testprocs.Eventually(t, 10*time.Second, "the second generation on i1", func() bool {
		g = i1.app.Status().Group
		return g != nil && g.Generation == 2
	})
	// KeyOwner names the standby's URL too.
	if o, err := i1.app.KeyOwner(context.Background(), c.keyOf(0)); err != nil || o.Process != "i1" || fmt.Sprint(o.StandbyURLs) != "["+i2.srv.URL+"]" {
		t.Fatalf("KeyOwner of partition 0: %+v, %v; want standby URLs [%s]", o, err, i2.srv.URL)
	}
	if g.Partitions != 4 || g.Leader != "i1" || len(g.Members) != 2 || g.BalancedAt.IsZero() {
		t.Fatalf("group %+v", g)
	}
	m1, m2 := g.Members[0], g.Members[1]
	if m1.InstanceID != "i1" || m1.Process != "i1" || m1.URL != i1.srv.URL || !m1.Local || fmt.Sprint(m1.Active) != "[0]" {
		t.Fatalf("member i1: %+v", m1)
	}
	if m2.InstanceID != "i2" || m2.URL != i2.srv.URL || m2.Local || fmt.Sprint(m2.Active, m2.Standby, m2.Warmup) != "[1] [0] [3]" || m2.Lag[3] != 1200 {
		t.Fatalf("member i2: %+v", m2)
	}
	if fmt.Sprint(g.Unowned) != "[2 3]" {
		t.Fatalf("unowned %v, want [2 3]", g.Unowned)
	}
	if len(g.Moves) != 1 || g.Moves[0] != (kstate.GroupMove{Partition: 3, From: "", To: "i2", Lag: 1200}) {
		t.Fatalf("moves %+v", g.Moves)
	}
	if len(g.Rebalances) != 2 || g.Rebalances[0].Generation != 2 || g.Rebalances[0].Duration != 250*time.Millisecond ||
		g.Rebalances[1].Duration != 1500*time.Millisecond || fmt.Sprint(g.Rebalances[1].Assigned) != "[0]" || !g.Rebalances[0].Leader {
		t.Fatalf("rebalances %+v", g.Rebalances)
	}
	// The same over /status, on i2.
	resp, body := fetch(t, i2, "/status", nil)
	var st struct {
		Group struct {
			Generation int32
			Unowned    []int32
			Members    []struct {
				InstanceID string `json:"instance_id"`
				URL        string
				Local      bool
				Lag        map[string]int64
			}
			Moves      []kstate.GroupMove
			Rebalances []struct {
				Generation int32
				Duration   int64 `json:"duration_ns"`
				Revoked    []int32
			}
		}
	}
	if err := json.Unmarshal([]byte(body), &st); resp.StatusCode != 200 || err != nil {
		t.Fatalf("/status: %d %v", resp.StatusCode, err)
	}
	sg := st.Group
	if sg.Generation != 2 || fmt.Sprint(sg.Unowned) != "[2 3]" || len(sg.Members) != 2 || !sg.Members[1].Local || sg.Members[1].Lag["3"] != 1200 ||
		len(sg.Moves) != 1 || len(sg.Rebalances) != 2 || sg.Rebalances[0].Duration != int64(250*time.Millisecond) {
		t.Fatalf("/status group: %s", body)
	}
}
