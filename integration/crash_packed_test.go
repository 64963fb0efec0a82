package integration

import (
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/kstate/kstate/integration/testapp/eos"
	"github.com/kstate/kstate/internal/shard"
)

// TestCrashPacked is TestCrashExactlyOnce's kills with the eos processor's
// list and map declared with state.Packed (-packed): one stored value and
// one changelog record per key each. The child is SIGKILLed after random
// delays, during shutdown, between produce and commit, between the Kafka
// commit and the local commit, and during restore; a clean run then
// catches up, and the outputs, the state restored from the changelog and
// the local shards must equal the model exactly.
func TestCrashPacked(t *testing.T) {
	t.Parallel()
	e, args := crashPackedKills(t, 33, 50, killPlan{maxNth: 3}, nil)

	// The state checked above was packed: the shard recorded the layout.
	sh, err := shard.OpenShard(shard.ShardOptions{Dir: filepath.Join(args.stateDir, e.app, "0")})
	if err != nil {
		t.Fatal(err)
	}
	defer sh.Close()
	vars, err := sh.Variables()
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]string{}
	for _, v := range vars {
		kinds[v.Name] = v.Kind
	}
	if kinds[eos.VarLast] != "packed list" || kinds[eos.VarBuckets] != "packed map" {
		t.Fatalf("variable kinds %v: want the list and the map packed", kinds)
	}
}

// crashPackedKills runs the kills of TestCrashPacked (salt seeds its
// schedule) on keys keys, with plan, and the child's options changed by
// opts (nil: none); then a clean run must catch up, and the outputs, the
// state restored from the changelog and the local shards must equal the
// model exactly.
func crashPackedKills(t *testing.T, salt uint64, keys int, plan killPlan, opts func(*eosChildArgs)) (specEnv, eosChildArgs) {
	t.Helper()
	seed, kills := crashParams(t, 6)
	rng := rand.New(rand.NewPCG(seed, salt))
	const parts = 3
	e := newSpecEnv(t, parts)
	in := newEOSInput(t, e, parts, keys)
	args := eosChildArgs{brokers: e.brokers, app: e.app, instance: "i1", stateDir: t.TempDir(),
		in: e.in, out: e.out, maxBatch: 25, packed: true}
	if opts != nil {
		opts(&args)
	}
	st := newCrashStats()
	start := time.Now()
	for _, kind := range killSchedule(rng, kills, killKinds) {
		killRound(t, rng, in, args, parts, kind, plan, st)
	}
	t.Logf("%d kills in %v: %s", kills, time.Since(start).Round(time.Millisecond), st)

	finalCleanRun(t, e, in, args, seed, parts)
	return e, args
}
