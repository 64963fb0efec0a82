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
