package integration

import (
	"math/rand/v2"
	"testing"
	"time"
)

// TestCrashReadAhead is TestCrashPacked's kills with the state read ahead
// (shard.Prefetch): no committed-state cache (-no-cache), 600 keys and
// ten times the rows a round, so that the batches of up to 100 or 1,000
// records have more than the 32 keys a read ahead needs and read the
// packed list and map of every key past the cache (checked by hand with a
// trace in Prefetch when the test was written). Kill points count
// transactions and get batches of at most 25 records, not read ahead. The child is
// SIGKILLed after random delays, during shutdown, between produce and
// commit, between the Kafka commit and the local commit, and during
// restore, with committed batches held in the write-behind layer (which
// the prefetched values must not shadow); a clean run then catches up, and
// the outputs, the state restored from the changelog and the local shards
// must equal the model exactly.
func TestCrashReadAhead(t *testing.T) {
	t.Parallel()
	seed, kills := crashParams(t, 6)
	rng := rand.New(rand.NewPCG(seed, 35))
	const parts = 3
	e := newSpecEnv(t, parts)
	in := newEOSInput(t, e, parts, 600)
	args := eosChildArgs{brokers: e.brokers, app: e.app, instance: "i1", stateDir: t.TempDir(),
		in: e.in, out: e.out, maxBatch: 400, packed: true, noCache: true}
	st := newCrashStats()
	start := time.Now()
	for _, kind := range killSchedule(rng, kills, killKinds) {
		killRound(t, rng, in, args, parts, kind, killPlan{maxNth: 3, waves: 10}, st)
	}
	t.Logf("%d kills in %v: %s", kills, time.Since(start).Round(time.Millisecond), st)

	m := in.model()
	final := startEOSChild(t, args)
	waitEOSOutputs(t, e, m, seed, time.Minute, final)
	final.stop(t, 30*time.Second)
	t.Logf("final run: %d input rows, %d output rows expected; last metrics %+v", len(in.rows), m.total, final.metrics())
	checkEOS(t, e, m, seed, args.stateDir)
}
