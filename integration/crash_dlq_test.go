package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/integration/testapp/eos"
	"github.com/kstate/kstate/internal/engine"
	"github.com/kstate/kstate/internal/kafka"
)

// The crash tests on the dead-letter path: the eos application runs with
// -dead-letter and its input holds poison values (undecodable, on any key)
// and fail rows (HandleInputRows fails; on keys of their own, see
// eosInput.withBadRows). Kills after produce and before the local commit
// count only batches that hold dead letters. Every bad row must be in the
// dead-letter topic exactly once (read_committed), with its source
// partition and offset, and every other output, the state and the local
// shards must stay exact.

// Kinds of kill of the dead-letter test: the batch kill points twice per
// cycle, since they are what it is about.
var dlqKillKinds = []string{killDelay, killShutdown, string(engine.AfterProduce), string(engine.AfterProduce),
	string(engine.BeforeLocalCommit), string(engine.BeforeLocalCommit), string(engine.DuringRestore)}

// withDeadLetters is the suffix of a reached batch kill point in a batch
// that held dead letters, in crashStats.reached.
const withDeadLetters = " (batch with dead letters)"

func TestCrashDeadLetterExactlyOnce(t *testing.T) {
	t.Parallel()
	seed, kills := crashParams(t, 15)
	if env := os.Getenv("KSTATE_CRASH_KILLS"); env != "" {
		kills = max(2, kills/2) // `make crash`: 100 of its 200
	}
	rng := rand.New(rand.NewPCG(seed, 3))
	const parts = 3
	e := newSpecEnv(t, parts)
	in := newEOSInput(t, e, parts, 50).withBadRows(0.06, 0.06)
	args := eosChildArgs{brokers: e.brokers, app: e.app, instance: "i1", stateDir: t.TempDir(),
		in: e.in, out: e.out, maxBatch: 25, deadLetter: true}
	st := newCrashStats()
	start := time.Now()
	for _, kind := range killSchedule(rng, kills, dlqKillKinds) {
		killRound(t, rng, in, args, parts, kind, killPlan{maxNth: 2}, st)
	}
	t.Logf("%d kills in %v: %s", kills, time.Since(start).Round(time.Millisecond), st)
	if kills >= len(dlqKillKinds) {
		for _, k := range []engine.KillPoint{engine.AfterProduce, engine.BeforeLocalCommit} {
			if st.reached[string(k)+withDeadLetters] == 0 {
				t.Errorf("kill point %s was never reached in a batch with dead letters", k)
			}
		}
	}

	// A clean run consumes everything.
	m := in.model()
	final := startEOSChild(t, args)
	waitEOSOutputs(t, e, m, seed, time.Minute, final)
	dl := waitDeadLetters(t, e, m, seed, time.Minute, final)
	waitFinalReady(t, final, parts)
	final.stop(t, 30*time.Second)
	m.checkDeadLetters(t, e, dl, seed)
	checkEOS(t, e, m, seed, args.stateDir)
	// Read again after every instance stopped: nothing came late.
	m.checkDeadLetters(t, e, readDeadLetters(t, e), seed)
	poison := 0
	for _, r := range m.deadLetters {
		if r.bad == engine.StageDecode {
			poison++
		}
	}
	t.Logf("%d input records: %d poison, %d fail rows on %d fail keys; %d output rows; last metrics %+v",
		len(in.rows), poison, len(m.deadLetters)-poison, len(in.failKeys), m.total, final.metrics())
}

func dlqTopic(e specEnv) string { return e.app + "-dlq" }

func readDeadLetters(t *testing.T, e specEnv) []kafka.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	recs, err := kafka.ReadAll(ctx, e.brokers, dlqTopic(e))
	if err != nil {
		t.Fatalf("read the dead-letter topic: %v", err)
	}
	return recs
}

// waitDeadLetters waits until the dead-letter topic holds at least the
// model's number of records (read_committed) and returns them.
func waitDeadLetters(t *testing.T, e specEnv, m *eosModel, seed uint64, d time.Duration, children ...*eosChild) []kafka.Record {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		recs, err := kafka.ReadAll(ctx, e.brokers, dlqTopic(e))
		cancel()
		if err == nil && len(recs) >= len(m.deadLetters) {
			return recs
		}
		for _, c := range children {
			c.failIfErrored(t)
		}
		if time.Now().After(deadline) {
			for _, c := range children {
				c.dump(t)
			}
			t.Logf("waited %v for %d dead letters (read error %v)", d, len(m.deadLetters), err)
			m.checkDeadLetters(t, e, recs, seed)
			t.Fatalf("waited %v for %d dead letters", d, len(m.deadLetters))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// checkDeadLetters requires got (the read_committed dead-letter topic) to
// hold every bad row of the model exactly once — found by its source
// partition and offset headers — with its key and value, the stage, the
// error and the source headers, in the partition of its source.
func (m *eosModel) checkDeadLetters(t *testing.T, e specEnv, got []kafka.Record, seed uint64) {
	t.Helper()
	type at struct {
		part   int32
		offset int64
	}
	want := map[at]eosRow{}
	for _, r := range m.deadLetters {
		want[at{r.part, r.offset}] = r
	}
	seen := map[at]int{}
	var bad []string
	dups := 0
	for _, r := range got {
		h := headers(r)
		p, perr := strconv.ParseInt(h[kstate.HeaderSourcePartition], 10, 32)
		off, oerr := strconv.ParseInt(h[kstate.HeaderSourceOffset], 10, 64)
		if perr != nil || oerr != nil {
			bad = append(bad, fmt.Sprintf("dead letter %s=%s (partition %d offset %d): source headers %v", r.Key, r.Value, r.Partition, r.Offset, h))
			continue
		}
		a := at{int32(p), off}
		seen[a]++
		w, ok := want[a]
		switch {
		case !ok:
			bad = append(bad, fmt.Sprintf("dead letter %s=%s of input partition %d offset %d: not a bad row", r.Key, r.Value, p, off))
			continue
		case seen[a] > 1:
			dups++
			bad = append(bad, fmt.Sprintf("dead letter %s=%s of input partition %d offset %d: duplicate #%d (at dead-letter offset %d)", r.Key, r.Value, p, off, seen[a], r.Offset))
			continue
		}
		errPart := eos.ErrFail.Error()
		if w.bad == engine.StageDecode {
			errPart = eos.ErrPoison.Error()
		}
		if string(r.Key) != w.key || string(r.Value) != w.value || r.Partition != w.part ||
			h[kstate.HeaderStage] != w.bad || h[kstate.HeaderSourceTopic] != e.in || h[kstate.HeaderApplication] != e.app ||
			!strings.Contains(h[kstate.HeaderError], errPart) {
			bad = append(bad, fmt.Sprintf("dead letter %s=%s in partition %d, headers %v: want %s=%s in partition %d, stage %s, error containing %q",
				r.Key, r.Value, r.Partition, h, w.key, w.value, w.part, w.bad, errPart))
		}
	}
	var missing []string
	for _, r := range m.deadLetters {
		if seen[at{r.part, r.offset}] == 0 {
			missing = append(missing, fmt.Sprintf("%s=%s (partition %d offset %d, %s)", r.key, r.value, r.part, r.offset, r.bad))
		}
	}
	if len(bad) == 0 && len(missing) == 0 {
		return
	}
	slices.Sort(missing)
	if len(missing) > 10 {
		missing = append(missing[:10], fmt.Sprintf("... and %d more", len(missing)-10))
	}
	if len(bad) > 10 {
		bad = append(bad[:10], fmt.Sprintf("... and %d more", len(bad)-10))
	}
	t.Fatalf("seed %d: dead-letter topic differs from the bad rows (%d records, want %d; %d duplicates, %d missing):\n%s\nmissing: %s",
		seed, len(got), len(m.deadLetters), dups, len(missing), strings.Join(bad, "\n"), strings.Join(missing, ", "))
}

var killPointDLRe = regexp.MustCompile(`testapp: kill point \S+ #\d+ reached \(batch dead-letters (\d+)\)`)

// killPointDeadLetters returns the number of records the batch at the
// reached kill point dead-letters, when the child logged it.
func (c *eosChild) killPointDeadLetters() (int64, bool) {
	m := c.find(killPointDLRe)
	if m == nil {
		return 0, false
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	return n, err == nil
}
