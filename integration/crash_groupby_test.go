package integration

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/kstate/kstate/internal/engine"
	"github.com/kstate/kstate/internal/testprocs"
)

// TestCrashGroupBy kills an instance of a GroupBy application (records
// keyed by user id, counted per country through <app>-repartition; the
// testapp's -proc groupby) again and again with seeded SIGKILLs — after a
// random delay, during a graceful shutdown, between produce and commit,
// between the Kafka commit and the local commit, during restore — while
// the test keeps producing. A clean final run then catches up, and:
// every country's read_committed outputs are exactly 1..n (n = the input
// records of that country: no loss, no duplicate, in both stages), and
// the read_committed repartition topic holds every input record exactly
// once, under its country, on murmur2(country)'s partition.
func TestCrashGroupBy(t *testing.T) {
	t.Parallel()
	seed, kills := crashParams(t, 20)
	rng := rand.New(rand.NewPCG(seed, 4))
	const parts = 3
	e := newSpecEnv(t, parts)
	args := eosChildArgs{brokers: e.brokers, app: e.app, instance: "i1", stateDir: t.TempDir(),
		in: e.in, out: e.out, maxBatch: 25, proc: "groupby"}
	want, next, sent := map[string]int{}, 0, 0
	st := newCrashStats()
	committed := false // something was committed: a restore has work
	start := time.Now()
	for _, kind := range killSchedule(rng, kills, killKinds) {
		if kind == string(engine.DuringRestore) && !committed {
			kind = killDelay
		}
		st.planned[kind]++
		a := args
		a.maxBatch = []int{5, 25, 100, 1000}[rng.IntN(4)]
		switch kind {
		case string(engine.AfterProduce), string(engine.BeforeLocalCommit):
			a.maxBatch = min(a.maxBatch, 25)
			a.killPoint = fmt.Sprintf("%s@%d", kind, 1+rng.IntN(3))
		case string(engine.DuringRestore):
			for _, p := range rng.Perm(parts) {
				if err := os.RemoveAll(filepath.Join(a.stateDir, a.app, strconv.Itoa(p))); err != nil {
					t.Fatal(err)
				}
			}
			a.killPoint = fmt.Sprintf("%s@1", kind)
		}
		delay := time.Duration(50+rng.IntN(1450)) * time.Millisecond
		t0 := time.Now()
		c := startEOSChild(t, a)
		n := 60 + rng.IntN(120)
		produceUsers(t, rng, e.brokers, e.in, n, &next, want)
		sent += n
		switch {
		case kind == killDelay:
			time.Sleep(time.Until(t0.Add(delay))) // the kill's random moment
			c.failIfErrored(t)
			c.kill()
		case kind == killShutdown:
			time.Sleep(time.Until(t0.Add(delay)))
			c.failIfErrored(t)
			c.sigterm(t)
			if c.wait(time.Duration(rng.IntN(150)) * time.Millisecond) {
				if !c.state.Success() {
					c.dump(t)
					t.Fatalf("graceful stop: %s", describeExit(c))
				}
				st.reached[killShutdown+" (stopped first)"]++
			} else {
				c.kill()
				st.reached[killShutdown+" (killed)"]++
			}
		case !c.wait(10 * time.Second):
			st.notReached++
			c.kill()
			t.Logf("kill point %s not reached in 10s: killed it", a.killPoint)
		default:
			c.failIfErrored(t)
			p, ok := c.killPointReached()
			if !ok || p != kind {
				c.dump(t)
				t.Fatalf("died (%s) without reporting kill point %s", describeExit(c), a.killPoint)
			}
			st.reached[p]++
		}
		if fc, ok := c.firstCommit(); ok {
			st.firstCommits = append(st.firstCommits, fc)
			committed = true
		}
	}
	t.Logf("%d kills in %v: %s", kills, time.Since(start).Round(time.Millisecond), st)
	for _, k := range killKinds[2:] {
		if kills >= 2*len(killKinds) && st.reached[k] == 0 {
			t.Errorf("kill point %s was never reached", k)
		}
	}

	final := startEOSChild(t, args)
	got := testprocs.WaitOutputs(t, e.brokers, e.out, sent, 2*time.Minute)
	final.stop(t, 30*time.Second)
	checkPerCountry(t, got, want)
	checkRepartition(t, e.brokers, e.app+"-repartition", parts, sent)
	t.Logf("seed %d: %d records keyed by user, counted per country exactly once through the repartition topic: %v", seed, sent, want)
}

// TestCrashGroupByTwoInstances runs two instances of the GroupBy
// application; in every round one of them is SIGKILLed at a random moment
// (or at a kill point) while the other keeps running, and every other
// round the survivor takes all partitions over (session timeout, eager
// range rebalance, restore) before the victim comes back. Per-country
// outputs must be exactly 1..n and the repartition topic must hold every
// input record once.
func TestCrashGroupByTwoInstances(t *testing.T) {
	// make test-long: GroupBy under kills stays in make test
	// (TestCrashGroupBy), failover too (TestCrashTwoInstancesFailover).
	longTest(t)
	t.Parallel()
	seed, kills := crashParams(t, 4) // `make crash` runs more
	if env := os.Getenv("KSTATE_CRASH_KILLS"); env != "" {
		kills = max(2, kills/4)
	}
	rng := rand.New(rand.NewPCG(seed, 5))
	const parts = 4
	e := newSpecEnv(t, parts)
	base := eosChildArgs{brokers: e.brokers, app: e.app, in: e.in, out: e.out, maxBatch: 25, proc: "groupby", sessionTimeout: 6 * time.Second}
	argsOf := map[string]eosChildArgs{}
	for _, name := range []string{"a", "b"} {
		a := base
		a.instance, a.stateDir = name, t.TempDir()
		argsOf[name] = a
	}
	want, next, sent := map[string]int{}, 0, 0
	produce := func(n int) {
		produceUsers(t, rng, e.brokers, e.in, n, &next, want)
		sent += n
	}
	running := map[string]*eosChild{"a": startEOSChild(t, argsOf["a"]), "b": startEOSChild(t, argsOf["b"])}
	produce(200)
	waitFor(t, time.Minute, "both instances own partitions", func() bool {
		ma, mb := running["a"].metrics(), running["b"].metrics()
		return len(ma.assigned) > 0 && len(mb.assigned) > 0 && len(ma.restoring)+len(mb.restoring) == 0
	}, running["a"], running["b"])

	failovers, reached := 0, 0
	for i := range kills {
		victim, survivor := "a", "b"
		if rng.IntN(2) == 1 {
			victim, survivor = survivor, victim
		}
		v := running[victim]
		produce(60 + rng.IntN(120))
		if rng.IntN(2) == 0 {
			time.Sleep(time.Duration(rng.IntN(800)) * time.Millisecond) // a random moment of its processing
			v.failIfErrored(t)
			v.kill()
		} else {
			// Killed at a kill point of its next incarnation.
			v.failIfErrored(t)
			v.kill()
			a := argsOf[victim]
			a.killPoint = fmt.Sprintf("%s@%d", []engine.KillPoint{engine.AfterProduce, engine.BeforeLocalCommit}[rng.IntN(2)], 1+rng.IntN(3))
			v = startEOSChild(t, a)
			produce(60 + rng.IntN(120))
			if !v.wait(20 * time.Second) {
				v.kill()
				t.Logf("round %d: kill point %s not reached in 20s: killed", i, a.killPoint)
			}
			v.failIfErrored(t)
			if _, ok := v.killPointReached(); ok {
				reached++
			}
		}
		if i%2 == 0 {
			failovers++
			sv := running[survivor]
			t0 := time.Now()
			waitFor(t, time.Minute, survivor+" owns every partition", func() bool {
				m := sv.metrics()
				return len(m.assigned) == parts && len(m.restoring) == 0
			}, sv)
			t.Logf("round %d: %s took over every partition in %v", i, survivor, time.Since(t0).Round(time.Millisecond))
		}
		running[victim] = startEOSChild(t, argsOf[victim])
		produce(60 + rng.IntN(120))
	}
	got := testprocs.WaitOutputs(t, e.brokers, e.out, sent, 2*time.Minute)
	for _, name := range []string{"a", "b"} {
		running[name].stop(t, 30*time.Second)
	}
	checkPerCountry(t, got, want)
	checkRepartition(t, e.brokers, e.app+"-repartition", parts, sent)
	t.Logf("seed %d: %d kills (%d at a kill point), %d failovers; %d records counted per country exactly once: %v", seed, kills, reached, failovers, sent, want)
}
