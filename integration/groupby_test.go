package integration

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/internal/engine"
	"github.com/kstate/kstate/internal/kafka"
	"github.com/kstate/kstate/internal/testprocs"
)

// GroupBy through <app>-repartition on the real broker.

func groupByConfig(t *testing.T, e specEnv) testApp[string, string, string] {
	cfg := e.config(t, testprocs.NewCounter)
	cfg.GroupBy = []kstate.GroupBy[string, string]{{Topic: e.in, Key: testprocs.CountryOf}}
	return cfg
}

// produceUsers writes n records keyed by user id with value
// "<country>:<id>" and returns the per-country counts written.
func produceUsers(t *testing.T, rng *rand.Rand, brokers []string, topic string, n int, next *int, want map[string]int) {
	t.Helper()
	countries := []string{"de", "fr", "it", "es", "nl", "pl", "se"}
	kvs := make([]string, n)
	for i := range kvs {
		c := countries[rng.IntN(len(countries))]
		want[c]++
		*next++
		kvs[i] = fmt.Sprintf("user%03d=%s:%d", rng.IntN(200), c, *next)
	}
	testprocs.Produce(t, brokers, topic, kvs...)
}

// checkRepartition reads the repartition topic (read_committed): every
// input record forwarded exactly once, under its country, on the
// partition murmur2(country) selects.
func checkRepartition(t *testing.T, brokers []string, topic string, parts, sent int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	recs, err := kafka.ReadAll(ctx, brokers, topic)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, r := range recs {
		seen[string(r.Value)]++
		c, _, _ := strings.Cut(string(r.Value), ":")
		if string(r.Key) != c || r.Partition != engine.PartitionFor(r.Key, parts) {
			t.Fatalf("repartition record key %q partition %d value %q: want key %q on partition %d", r.Key, r.Partition, r.Value, c, engine.PartitionFor([]byte(c), parts))
		}
	}
	for v, n := range seen {
		if n != 1 {
			t.Fatalf("input record %q forwarded %d times to the repartition topic", v, n)
		}
	}
	if len(seen) != sent {
		t.Fatalf("%d distinct records in the repartition topic, want %d", len(seen), sent)
	}
}

// checkPerCountry requires every country's outputs to be exactly 1..n.
func checkPerCountry(t *testing.T, got testprocs.Outputs, want map[string]int) {
	t.Helper()
	for c, n := range want {
		vs := got[c]
		if len(vs) != n {
			t.Fatalf("country %s: %d outputs, want %d: %v", c, len(vs), n, vs)
		}
		for i, v := range vs {
			if v != fmt.Sprint(i+1) {
				t.Fatalf("country %s: outputs %v are not 1..%d", c, vs, n)
			}
		}
	}
	if len(got) != len(want) {
		t.Fatalf("%d output keys, want %d countries", len(got), len(want))
	}
}

// Input keyed by user id, grouped by country: exact per-country counts,
// through a second instance joining and a restart; the repartition topic
// holds every input record exactly once; RunToEnd refuses GroupBy.
func TestGroupByCountry(t *testing.T) {
	t.Parallel()
	const parts = 3
	e := newSpecEnv(t, parts)
	cfg := groupByConfig(t, e)
	rng := rand.New(rand.NewPCG(1, 2))
	want, next, sent := map[string]int{}, 0, 0

	app1 := newSpecApp(t, cfg)
	stop1 := testprocs.Start(t, app1)
	produceUsers(t, rng, e.brokers, e.in, 300, &next, want)
	sent += 300
	checkPerCountry(t, testprocs.WaitOutputs(t, e.brokers, e.out, sent, waitOut), want)

	cfg2 := cfg
	cfg2.InstanceID, cfg2.State.Dir = "i2", t.TempDir()
	app2 := newSpecApp(t, cfg2)
	stop2 := testprocs.Start(t, app2)
	produceUsers(t, rng, e.brokers, e.in, 300, &next, want)
	sent += 300
	checkPerCountry(t, testprocs.WaitOutputs(t, e.brokers, e.out, sent, waitOut), want)
	for _, stop := range []func() error{stop1, stop2} {
		if err := stop(); err != nil {
			t.Fatalf("Run: %v", err)
		}
	}
	app3 := newSpecApp(t, cfg)
	stop3 := testprocs.Start(t, app3)
	produceUsers(t, rng, e.brokers, e.in, 100, &next, want)
	sent += 100
	checkPerCountry(t, testprocs.WaitOutputs(t, e.brokers, e.out, sent, waitOut), want)
	if err := stop3(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	checkRepartition(t, e.brokers, app3.RepartitionTopic(), parts, sent)

	if err := newSpecApp(t, cfg).RunToEnd(context.Background()); !errors.Is(err, kstate.ErrGroupByRunToEnd) {
		t.Fatalf("RunToEnd with GroupBy: %v, want ErrGroupByRunToEnd", err)
	}
	t.Logf("%d records keyed by user, counted per country exactly once: %v", sent, want)
}

// GroupBy with two pipelines in one instance: the source and the
// repartition topic are two inputs, so both pipelines join with the range
// balancer and each owns partition p of both topics. Per-country counts
// exact, every record forwarded once; then a restart with one pipeline
// continues from the same state directory.
func TestGroupByPipelines(t *testing.T) {
	t.Parallel()
	const parts = 4
	e := newSpecEnv(t, parts)
	cfg := groupByConfig(t, e)
	cfg.Batching.Pipelines = 2
	rng := rand.New(rand.NewPCG(3, 4))
	want, next, sent := map[string]int{}, 0, 0

	app := newSpecApp(t, cfg)
	stop := testprocs.Start(t, app)
	produceUsers(t, rng, e.brokers, e.in, 400, &next, want)
	sent += 400
	checkPerCountry(t, testprocs.WaitOutputs(t, e.brokers, e.out, sent, waitOut), want)
	testprocs.Eventually(t, waitOut, "both pipelines own partitions", func() bool {
		by := map[int]int{}
		for _, p := range app.Status().Partitions {
			by[p.Pipeline]++
		}
		return by[0] > 0 && by[1] > 0
	})
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}

	cfg.Batching.Pipelines = 1
	app = newSpecApp(t, cfg)
	stop = testprocs.Start(t, app)
	produceUsers(t, rng, e.brokers, e.in, 100, &next, want)
	sent += 100
	checkPerCountry(t, testprocs.WaitOutputs(t, e.brokers, e.out, sent, waitOut), want)
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	checkRepartition(t, e.brokers, app.RepartitionTopic(), parts, sent)
}
