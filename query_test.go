package kstate_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/internal/kafka"
	"github.com/kstate/kstate/internal/murmur2"
	"github.com/kstate/kstate/internal/testprocs"
)

// Two instances own one partition each: each answers Query for its own
// keys with the committed count, list and map, refuses the others' with
// ErrNotOwner, and KeyOwner (and the /state endpoint's 421) names the
// instance that owns them.
func TestQueryTwoInstances(t *testing.T) {
	brokers := startEmbedded(t, 2)
	apps := map[string]*kstate.App[string, string, string]{}
	for _, id := range []string{"i1", "i2"} {
		cfg := config(brokers, t.TempDir(), testprocs.NewCounter)
		cfg.InstanceID = id
		cfg.Batching.Pipelines = 1 // one group member per instance: one partition each
		app := newApp(t, cfg)
		if _, err := app.Query(context.Background(), "count", "k"); !errors.Is(err, kstate.ErrNotRunning) {
			t.Fatalf("Query before Run: %v, want ErrNotRunning", err)
		}
		apps[id] = app
		testprocs.Start(t, app)
	}
	testprocs.Eventually(t, 30*time.Second, "one partition each, running", func() bool {
		time.Sleep(20 * time.Millisecond)
		for _, a := range apps {
			if a.State() != kstate.Running || len(a.Metrics().Assigned) != 1 {
				return false
			}
		}
		return true
	})
	var kvs []string
	keys := []string{"a", "b", "c", "d", "e", "f"}
	for i, k := range keys {
		for j := 0; j <= i; j++ {
			kvs = append(kvs, fmt.Sprintf("%s=v%d", k, j%2))
		}
	}
	testprocs.Produce(t, brokers, "in", kvs...)
	testprocs.WaitOutputs(t, brokers, "out", len(kvs), 30*time.Second)

	ctx := context.Background()
	owned := map[string]int{}
	for i, k := range keys {
		var owner, other string
		for id, a := range apps {
			o, err := a.KeyOwner(ctx, k)
			if err != nil {
				t.Fatalf("%s: KeyOwner(%q): %v", id, k, err)
			}
			if !o.Assigned || o.InstanceID == "" {
				t.Fatalf("%s: KeyOwner(%q) = %+v: no owner", id, k, o)
			}
			if o.Local {
				owner = id
			} else {
				other = id
			}
			if owner != "" && o.InstanceID != owner && o.Local {
				t.Fatalf("%s: KeyOwner(%q) = %+v, local but owned by %s", id, k, o, o.InstanceID)
			}
		}
		if owner == "" || other == "" {
			t.Fatalf("key %q: owner %q other %q", k, owner, other)
		}
		owned[owner]++
		// The committed state may trail the outputs by the store write
		// after the commit: wait for the count.
		want := fmt.Sprint(i + 1)
		var res kstate.QueryResult
		testprocs.Eventually(t, 10*time.Second, "count of "+k, func() bool {
			var err error
			res, err = apps[owner].Query(ctx, "count", k)
			if owned[owner] == 1 && queryNotYet(err) {
				return false // the first key asked of this owner
			}
			if err != nil {
				t.Fatalf("%s: Query(count, %q): %v", owner, k, err)
			}
			return len(res.Entries) == 1 && string(res.Entries[0].Value) == want
		})
		if res.Kind != "value" {
			t.Fatalf("Query(count, %q) = %+v", k, res)
		}
		list, err := apps[owner].Query(ctx, "seen", k)
		if err != nil || len(list.Entries) != i+1 || list.Kind != "list" || string(list.Entries[0].Value) != `"v0"` {
			t.Fatalf("Query(seen, %q) = %+v, %v", k, list, err)
		}
		m, err := apps[owner].Query(ctx, "per", k)
		if err != nil || m.Kind != "map" || len(m.Entries) != min(i+1, 2) || string(m.Entries[0].MapKey) != `"v0"` || string(m.Entries[0].Value) != fmt.Sprint((i+2)/2) {
			t.Fatalf("Query(per, %q) = %+v, %v", k, m, err)
		}
		if _, err := apps[other].Query(ctx, "count", k); !errors.Is(err, kstate.ErrNotOwner) {
			t.Fatalf("%s: Query(count, %q) of a key owned by %s: %v, want ErrNotOwner", other, k, owner, err)
		}
		if _, err := apps[owner].Query(ctx, "nope", k); !errors.Is(err, kstate.ErrUnknownVariable) {
			t.Fatalf("Query(nope, %q): %v, want ErrUnknownVariable", k, err)
		}

		// The same over HTTP.
		code, body := get(t, apps[owner].QueryHandler(), "/state/count/"+url.PathEscape(k))
		var hr kstate.QueryResult
		if err := json.Unmarshal([]byte(body), &hr); code != 200 || err != nil || len(hr.Entries) != 1 || string(hr.Entries[0].Value) != want {
			t.Fatalf("GET /state/count/%s on the owner: %d %s", k, code, body)
		}
		code, body = get(t, apps[other].QueryHandler(), "/state/count/"+url.PathEscape(k))
		var miss struct {
			Error string
			Owner *kstate.KeyOwner
		}
		if err := json.Unmarshal([]byte(body), &miss); code != 421 || err != nil || miss.Owner == nil || miss.Owner.InstanceID != owner {
			t.Fatalf("GET /state/count/%s on the other instance: %d %s, want 421 naming %s", k, code, body, owner)
		}
		if code, body := get(t, apps[owner].QueryHandler(), "/state/nope/"+url.PathEscape(k)); code != 404 {
			t.Fatalf("GET /state/nope/%s: %d %s, want 404", k, code, body)
		}
	}
	if len(owned) != 2 {
		t.Fatalf("keys by owner %v: want both instances to own some", owned)
	}
	// A key with no state yet: an empty answer, not an error.
	for _, a := range apps {
		o, err := a.KeyOwner(ctx, "zz-none")
		if err != nil {
			t.Fatal(err)
		}
		if o.Local {
			res, err := a.Query(ctx, "count", "zz-none")
			if err != nil || len(res.Entries) != 0 {
				t.Fatalf("Query of a key without state: %+v, %v", res, err)
			}
		}
	}
}

// queryNotYet reports the errors of a live query asked in a test's first
// seconds, before the state it waits for is there: the committed store of a
// partition is written after the batch's transaction committed (so after
// its outputs are visible), and before a partition's first batch is in it,
// its variables are not registered there (ErrUnknownVariable; a key that
// falls back from its own partition reports that partition's error,
// ErrNotOwner); with two pipelines a partition can also move to the second
// one in the first seconds and restore there (ErrNotOwner meanwhile).
func queryNotYet(err error) bool {
	return errors.Is(err, kstate.ErrNotOwner) || errors.Is(err, kstate.ErrUnknownVariable)
}

// produceTo writes key=value records to one partition of topic, as a
// producer that does not partition with murmur2 (kcat's default) would.
func produceTo(t *testing.T, brokers []string, topic string, p int32, kvs ...string) {
	t.Helper()
	pr, err := kafka.NewProducer(brokers)
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	var recs []kafka.Record
	for _, kv := range kvs {
		k, v, _ := strings.Cut(kv, "=")
		recs = append(recs, kafka.Record{Topic: topic, Partition: p, Key: []byte(k), Value: []byte(v)})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := pr.Produce(ctx, recs...); err != nil {
		t.Fatal(err)
	}
}

// A key produced to a partition it does not hash to (the default
// KeyPartitionAllow processes it there): the live query answers with the
// state where it is, not an empty 200 from the murmur2 partition; where the
// key's partition may be on another instance it refuses with
// ErrKeyElsewhere (409) rather than answer empty.
func TestQueryMisroutedKey(t *testing.T) {
	const key = "k"
	home := murmur2.Partition([]byte(key), 2)
	away := 1 - home
	t.Run("one instance", func(t *testing.T) {
		brokers := startEmbedded(t, 2)
		app := newApp(t, config(brokers, t.TempDir(), testprocs.NewCounter))
		testprocs.Start(t, app)
		produceTo(t, brokers, "in", away, key+"=a", key+"=b", key+"=c")
		testprocs.WaitOutputs(t, brokers, "out", 3, 30*time.Second)
		ctx := context.Background()
		var res kstate.QueryResult
		testprocs.Eventually(t, 10*time.Second, "count of the misrouted key", func() bool {
			var err error
			if res, err = app.Query(ctx, "count", key); queryNotYet(err) {
				return false
			} else if err != nil {
				t.Fatalf("Query: %v", err)
			}
			return len(res.Entries) == 1 && string(res.Entries[0].Value) == "3"
		})
		if res.Partition != away {
			t.Fatalf("Query answered from partition %d, the state is on %d", res.Partition, away)
		}
		if m := app.Metrics().Total.KeyPartitionMismatches; m != 3 {
			t.Fatalf("KeyPartitionMismatches = %d, want 3", m)
		}
		// This instance holds every partition: a key without state is
		// empty, not an error (once no partition moves between its
		// pipelines).
		testprocs.Eventually(t, 10*time.Second, "an answer for a key without state", func() bool {
			res, err := app.Query(ctx, "count", "zz-none")
			if queryNotYet(err) {
				return false
			}
			if err != nil || len(res.Entries) != 0 {
				t.Fatalf("Query of a key without state: %+v, %v", res, err)
			}
			return true
		})
	})
	t.Run("two instances", func(t *testing.T) {
		brokers := startEmbedded(t, 2)
		apps := map[string]*kstate.App[string, string, string]{}
		for _, id := range []string{"i1", "i2"} {
			cfg := config(brokers, t.TempDir(), testprocs.NewCounter)
			cfg.InstanceID = id
			cfg.Batching.Pipelines = 1
			app := newApp(t, cfg)
			apps[id] = app
			testprocs.Start(t, app)
		}
		testprocs.Eventually(t, 30*time.Second, "one partition each, running", func() bool {
			time.Sleep(20 * time.Millisecond)
			for _, a := range apps {
				if a.State() != kstate.Running || len(a.Metrics().Assigned) != 1 {
					return false
				}
			}
			return true
		})
		produceTo(t, brokers, "in", away, key+"=a", key+"=b")
		testprocs.WaitOutputs(t, brokers, "out", 2, 30*time.Second)
		var homeApp, awayApp *kstate.App[string, string, string]
		for _, a := range apps {
			if a.Metrics().Assigned[0] == home {
				homeApp = a
			} else {
				awayApp = a
			}
		}
		ctx := context.Background()
		testprocs.Eventually(t, 10*time.Second, "count on the instance holding the key", func() bool {
			res, err := awayApp.Query(ctx, "count", key)
			if queryNotYet(err) {
				return false
			}
			if err != nil {
				t.Fatalf("Query on the instance that processed the key: %v", err)
			}
			return len(res.Entries) == 1 && string(res.Entries[0].Value) == "2" && res.Partition == away
		})
		// The home instance saw no mismatch itself: it answers for its
		// partition (421 would send the caller nowhere better).
		if _, err := homeApp.Query(ctx, "count", key); err != nil && !errors.Is(err, kstate.ErrUnknownVariable) {
			t.Fatalf("Query on the key's murmur2 owner: %v", err)
		}
		// The away instance counted mismatches; a key it does not hold may
		// be on the other instance's partition: refused, not empty.
		miss := "y"
		for murmur2.Partition([]byte(miss), 2) != away {
			miss += "y"
		}
		_, err := awayApp.Query(ctx, "count", miss)
		if !errors.Is(err, kstate.ErrKeyElsewhere) || !strings.Contains(err.Error(), "murmur2_random") {
			t.Fatalf("Query of a key without state after mismatches: %v, want ErrKeyElsewhere", err)
		}
		if code, body := get(t, awayApp.QueryHandler(), "/state/count/"+miss); code != 409 || !strings.Contains(body, "another partition") {
			t.Fatalf("GET /state/count/%s: %d %s, want 409", miss, code, body)
		}
	})
}
