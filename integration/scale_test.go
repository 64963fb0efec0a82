package integration

import (
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/integration/testapp/eos"
	"github.com/kstate/kstate/internal/testprocs"
)

// TestScaleOutAndIn scales the eos application while input flows: one
// instance (in-process, so -race covers it), then a second and a third
// (child processes) join, then the first stops gracefully and the second
// is SIGKILLed, leaving the third with every partition. The output must be
// exact, every partition must have reached the third instance through a
// changelog restore, and the final state must equal the model.
func TestScaleOutAndIn(t *testing.T) {
	// make test-long: a rebalance that restores moved partitions stays in
	// make test (TestEngineRebalanceTwoInstances, in-process, and
	// TestPipelinesRebalanceTwoInstances), kills with a failover too
	// (TestCrashTwoInstancesFailover).
	longTest(t)
	t.Parallel()
	seed := crashSeed(t)
	const parts = 6
	e := newSpecEnv(t, parts)
	in := newEOSInput(t, e, parts, 60)
	const session = 6 * time.Second // the broker's minimum: partitions of a stopped static member move after it

	// Instance a: in-process.
	var logA logLines
	dirA := t.TempDir()
	topA, optsA := eos.Config(eos.Options{Brokers: e.brokers, ApplicationID: e.app, InstanceID: "a", StateDir: dirA,
		Input: e.in, Output: e.out, MaxBatchRecords: 100, SessionTimeout: session, Logger: slog.New(slog.NewTextHandler(&logA, nil))})
	appA, err := kstate.New(topA, optsA)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			logA.dump(t, "a")
		}
	})
	stopA, doneA := testprocs.StartWatch(t, appA)

	// Input flows from now until the last instance is alone.
	prodStop := make(chan struct{})
	var prodErr error
	var prodWG sync.WaitGroup
	prodWG.Go(func() {
		rng := rand.New(rand.NewPCG(seed, 3))
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-prodStop:
				return
			case <-tick.C:
			}
			if prodErr = in.produceErr(rng, 20+rng.IntN(20)); prodErr != nil {
				return
			}
		}
	})
	stopProducing := func() {
		select {
		case <-prodStop:
		default:
			close(prodStop)
		}
		prodWG.Wait()
		if prodErr != nil {
			t.Fatal(prodErr)
		}
	}
	t.Cleanup(stopProducing)
	aFailed := func() {
		select {
		case err := <-doneA:
			t.Fatalf("instance a stopped: %v", err)
		default:
		}
	}

	waitFor(t, time.Minute, "a processed rows of every partition", func() bool {
		aFailed()
		m := appA.Metrics()
		n := 0
		for _, c := range m.Partitions {
			if c.RowsIn > 0 {
				n++
			}
		}
		return n == parts
	})
	t.Logf("phase 1: a alone owns %v", appA.Metrics().Assigned)

	base := eosChildArgs{brokers: e.brokers, app: e.app, in: e.in, out: e.out, maxBatch: 100, sessionTimeout: session}
	argsB, argsC := base, base
	argsB.instance, argsB.stateDir = "b", t.TempDir()
	argsC.instance, argsC.stateDir = "c", t.TempDir()
	// settled reports whether the instances own every partition once, none
	// restoring, each at least one.
	settled := func(a bool, cs ...*eosChild) bool {
		var all []int32
		if a {
			aFailed()
			m := appA.Metrics()
			if len(m.Assigned) == 0 || len(m.Restoring) > 0 {
				return false
			}
			all = append(all, m.Assigned...)
		}
		for _, c := range cs {
			m := c.metrics()
			if len(m.assigned) == 0 || len(m.restoring) > 0 {
				return false
			}
			all = append(all, m.assigned...)
		}
		slices.Sort(all)
		return len(all) == parts && len(slices.Compact(all)) == parts
	}

	t0 := time.Now()
	b := startEOSChild(t, argsB)
	waitFor(t, time.Minute, "a and b share the partitions", func() bool { return settled(true, b) }, b)
	t.Logf("phase 2 (%v): a owns %v, b owns %v", time.Since(t0).Round(time.Millisecond), appA.Metrics().Assigned, b.metrics().assigned)

	t0 = time.Now()
	c := startEOSChild(t, argsC)
	waitFor(t, time.Minute, "a, b and c share the partitions", func() bool { return settled(true, b, c) }, b, c)
	t.Logf("phase 3 (%v): a owns %v, b owns %v, c owns %v", time.Since(t0).Round(time.Millisecond),
		appA.Metrics().Assigned, b.metrics().assigned, c.metrics().assigned)

	t0 = time.Now()
	if err := stopA(); err != nil {
		t.Fatalf("graceful stop of a: %v", err)
	}
	mA := appA.Metrics()
	waitFor(t, time.Minute, "b and c own a's partitions", func() bool { return settled(false, b, c) }, b, c)
	t.Logf("phase 4 (%v): a stopped gracefully; b owns %v, c owns %v", time.Since(t0).Round(time.Millisecond), b.metrics().assigned, c.metrics().assigned)

	t0 = time.Now()
	b.kill()
	waitFor(t, time.Minute, "c owns every partition", func() bool { return settled(false, c) }, c)
	t.Logf("phase 5 (%v): b SIGKILLed; c owns %v", time.Since(t0).Round(time.Millisecond), c.metrics().assigned)

	stopProducing()
	m := in.model()
	waitEOSOutputs(t, e, m, seed, time.Minute, c)
	c.stop(t, 30*time.Second)

	// Every partition a new instance took was restored from the changelog:
	// b and c started empty, and a had processed every partition first.
	for _, x := range []*eosChild{b, c} {
		first := map[int32]int64{}
		for _, r := range x.restores() {
			if _, seen := first[r.part]; !seen {
				first[r.part] = r.records
			}
		}
		var desc []string
		for _, p := range slices.Sorted(maps.Keys(first)) {
			desc = append(desc, fmt.Sprintf("%d:%d", p, first[p]))
			if first[p] == 0 {
				t.Errorf("instance %s took partition %d without restoring anything", x.name, p)
			}
		}
		t.Logf("instance %s: changelog records restored on first taking partition:records %s", x.name, strings.Join(desc, " "))
	}
	if got := c.restores(); len(uniqueParts(got)) != parts {
		t.Errorf("c, the last instance, restored partitions %v, want all %d", uniqueParts(got), parts)
	}
	t.Logf("a: %d commits, %d aborts; %d rows in total, %d output rows expected", mA.Total.Commits, mA.Total.Aborts, len(in.rows), m.total)
	checkEOS(t, e, m, seed, dirA, argsB.stateDir, argsC.stateDir)
}

func uniqueParts(rs []restoreEvent) []int32 {
	var ps []int32
	for _, r := range rs {
		ps = append(ps, r.part)
	}
	slices.Sort(ps)
	return slices.Compact(ps)
}

// logLines collects an in-process instance's log.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

// Write takes one record of the instance's text slog handler.
func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	l.lines = append(l.lines, strings.TrimSuffix(string(p), "\n"))
	l.mu.Unlock()
	return len(p), nil
}

func (l *logLines) dump(t *testing.T, name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.lines {
		t.Logf("%s: %s", name, s)
	}
}
