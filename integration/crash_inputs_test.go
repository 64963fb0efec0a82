package integration

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/kstate/kstate/integration/testapp/eos"
	"github.com/kstate/kstate/internal/engine"
)

// TestCrashTwoInputs is TestCrashExactlyOnce with two input topics
// (Topology.Inputs): half the keys write plain rows to the first topic, the
// other half JSON rows to the second (eos.Row2), and one instance is
// SIGKILLed again and again — after a random delay, between produce and
// commit, between the Kafka commit and the local commit, during restore.
// The read_committed output must equal the exact model, and the state
// restored from the changelog (both topics' input offsets per partition,
// the watermark over both) and the local shards too.
func TestCrashTwoInputs(t *testing.T) {
	t.Parallel()
	seed, kills := crashParams(t, 20)
	rng := rand.New(rand.NewPCG(seed, 3))
	const parts = 3
	e := newSpecEnv(t, parts)
	in2 := e.app + "-in2"
	newTopic(t, e.brokers, in2, parts)
	in := newEOSInput(t, e, parts, 50).withSecondInput(in2)
	args := eosChildArgs{brokers: e.brokers, app: e.app, instance: "i1", stateDir: t.TempDir(),
		in: e.in, in2: in2, out: e.out, maxBatch: 25}
	st := newCrashStats()
	start := time.Now()
	for _, kind := range killSchedule(rng, kills, killKinds) {
		killRound(t, rng, in, args, parts, kind, killPlan{maxNth: 3}, st)
	}
	t.Logf("%d kills in %v: %s", kills, time.Since(start).Round(time.Millisecond), st)
	for _, k := range killKinds[2:] {
		if kills >= 2*len(killKinds) && st.reached[k] == 0 {
			t.Errorf("kill point %s was never reached", k)
		}
	}

	// A clean run catches up: the outputs so far must already be exact.
	catchUp := startEOSChild(t, args)
	in.model().checkOutputs(t, waitEOSOutputs(t, e, in.model(), seed, time.Minute, catchUp), seed)
	catchUp.stop(t, 30*time.Second)

	// Tail: one row per partition far ahead in event time (past the
	// allowed lateness), killed producing the transaction that fires the
	// timers it made due; the final run must fire them.
	tail := args
	tail.killPoint = string(engine.AfterProduce) + "@2"
	in.produceEveryPartition(t, rng, eos.Lateness2.Milliseconds()+1000)
	c := startEOSChild(t, tail)
	if !c.wait(10 * time.Second) {
		t.Log("tail: kill point not reached in 10s: killing it")
		c.kill()
	}
	c.failIfErrored(t)

	rows2 := 0
	for _, r := range in.rows {
		rows2 += r.input
	}
	t.Logf("%d input rows, %d of them on the second topic", len(in.rows), rows2)
	if rows2 == 0 || rows2 == len(in.rows) {
		t.Fatalf("%d of %d rows on the second topic: want both topics used", rows2, len(in.rows))
	}
	finalCleanRun(t, e, in, args, seed, parts)
}

// TestCrashTwoInputsFailover is TestCrashTwoInstancesFailover with two
// input topics: two instances share the partitions through the range
// assignor (partition p of both topics to one member, eager rebalances),
// one of them is killed or frozen in every round, the survivor takes its
// partitions over; outputs, changelog state and local shards are exact.
func TestCrashTwoInputsFailover(t *testing.T) {
	// make test-long: two inputs under kills stay in make test
	// (TestCrashTwoInputs), failover too (TestCrashTwoInstancesFailover).
	longTest(t)
	t.Parallel()
	crashTwoInstancesFailover(t, true)
}
