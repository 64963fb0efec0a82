package integration

import (
	"math/rand/v2"
	"regexp"
	"testing"
	"time"
)

// secondPipelineRe matches a log line of pipeline 1.
var secondPipelineRe = regexp.MustCompile(` pipeline=1 `)

// TestCrashExactlyOncePipelines is TestCrashExactlyOnce with two pipelines
// in the instance (Options.Batching.Pipelines = 2): two group members, two
// transactional producers and two batch loops in one process, so a SIGKILL
// lands with both pipelines' batches in flight (one may be producing while
// the other commits, writes its shard or restores; the kill points count
// over both). A clean run then catches up, and the outputs, the changelog's
// state and the local shards must equal the model exactly.
func TestCrashExactlyOncePipelines(t *testing.T) {
	t.Parallel()
	seed, kills := crashParams(t, 15)
	rng := rand.New(rand.NewPCG(seed, 3))
	const parts = 4
	e := newSpecEnv(t, parts)
	in := newEOSInput(t, e, parts, 50)
	args := eosChildArgs{brokers: e.brokers, app: e.app, instance: "i1", stateDir: t.TempDir(),
		in: e.in, out: e.out, maxBatch: 25, pipelines: 2}
	st := newCrashStats()
	start := time.Now()
	for _, kind := range killSchedule(rng, kills, killKinds) {
		killRound(t, rng, in, args, parts, kind, killPlan{maxNth: 4}, st)
	}
	t.Logf("%d kills in %v: %s", kills, time.Since(start).Round(time.Millisecond), st)
	for _, k := range killKinds[2:] {
		if kills >= 2*len(killKinds) && st.reached[k] == 0 {
			t.Errorf("kill point %s was never reached", k)
		}
	}

	// A clean run catches up; then the outputs, the changelog's state and
	// the local shards must be exact.
	m := in.model()
	final := startEOSChild(t, args)
	waitEOSOutputs(t, e, m, seed, time.Minute, final)
	fc, _ := final.firstCommit()
	// The outputs may all be there before the child logged anything (the
	// last kill round's run can have caught up): wait for pipeline 1's
	// first line.
	for deadline := time.Now().Add(30 * time.Second); final.find(secondPipelineRe) == nil && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	if final.find(secondPipelineRe) == nil {
		final.dump(t)
		t.Fatal("the instance did not run a second pipeline")
	}
	waitFinalReady(t, final, parts)
	final.stop(t, 30*time.Second)
	t.Logf("final run: first commit %v after start; %d input rows, %d output rows expected; last metrics %+v",
		fc, len(in.rows), m.total, final.metrics())
	checkEOS(t, e, m, seed, args.stateDir)
}
