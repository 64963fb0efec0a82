package kstatetest_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/kstatetest"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/state"
)

// The faults of kstatetest on the real coordinator: after each, the
// outputs and the state are exactly what a run without the fault gives.

// exactly checks the counter's committed outputs (every "k=n" once, n
// from 1 up per key, nothing twice) and its state, against the rows fed
// so far.
type exactly struct {
	t     *testing.T
	fed   map[string]int64 // rows fed per key
	seen  map[string][]string
	order []string
}

func newExactly(t *testing.T) *exactly {
	return &exactly{t: t, fed: map[string]int64{}, seen: map[string][]string{}}
}

func (e *exactly) feed(d *kstatetest.Driver[string, string, string], keys string) {
	for k := range strings.FieldsSeq(keys) {
		d.Input(k, "x")
		if e.fed[k] == 0 {
			e.order = append(e.order, k)
		}
		e.fed[k]++
	}
}

func (e *exactly) take(d *kstatetest.Driver[string, string, string]) {
	for _, v := range d.OutputValues() {
		k, _, _ := strings.Cut(v, "=")
		e.seen[k] = append(e.seen[k], v)
	}
}

// check: the outputs of key k are the counts up to fed[k], each once,
// and k's committed count is fed[k].
func (e *exactly) check(d *kstatetest.Driver[string, string, string]) {
	e.t.Helper()
	e.take(d)
	for _, k := range e.order {
		n := e.fed[k]
		got := slices.Clone(e.seen[k])
		sort.Slice(got, func(i, j int) bool { return len(got[i]) < len(got[j]) || len(got[i]) == len(got[j]) && got[i] < got[j] })
		// Several rows of k in one batch emit one count: the outputs are
		// increasing, end at n, and none repeats.
		if len(got) == 0 || got[len(got)-1] != fmt.Sprintf("%s=%d", k, n) || slices.Compact(slices.Clone(got)) == nil || len(slices.Compact(slices.Clone(got))) != len(got) {
			e.t.Errorf("outputs of %s: %q; want distinct counts ending at %s=%d", k, e.seen[k], k, n)
		}
		if c, ok := kstatetest.ValueOf(d, k, "count", state.Int64()); !ok || c != n {
			e.t.Errorf("state of %s: %d, %v; want %d", k, c, ok, n)
		}
	}
}

const faultKeys = "a b c d e f g h"

func TestCrashAtKillPoints(t *testing.T) {
	for _, point := range []kstatetest.KillPoint{kstatetest.AfterProduce, kstatetest.AfterTaskProduce,
		kstatetest.BeforeLocalCommit, kstatetest.AfterLocalCommit} {
		for _, keep := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/keep=%v", point, keep), func(t *testing.T) {
				d := kstatetest.New(t, counterConfig(), kstatetest.Partitions(4))
				e := newExactly(t)
				e.feed(d, faultKeys)
				d.MustRunBatch()
				d.Crash(point)
				e.feed(d, faultKeys+" a b")
				err := d.RunBatch()
				racy := point == kstatetest.AfterTaskProduce || point == kstatetest.AfterLocalCommit
				switch {
				case err == nil && racy:
					// Reached only while another partition's task is
					// still running: the tasks' timing decides.
					// The crash stays armed (Crash: "the next time it
					// reaches point"), so a later batch could still
					// reach it: check this run here.
					t.Logf("%s not reached: the batch's tasks finished together", point)
					e.take(d)
					e.check(d)
					return
				case !errors.Is(err, kstatetest.ErrCrashed):
					t.Fatalf("RunBatch after Crash(%s) = %v, want ErrCrashed", point, err)
				default:
					if err := d.RunBatch(); !errors.Is(err, kstatetest.ErrCrashed) {
						t.Fatalf("second RunBatch after the crash = %v, want ErrCrashed until Restart", err)
					}
				}
				e.take(d)
				if keep {
					d.Restart(kstatetest.KeepLocalState())
				} else {
					d.Restart()
				}
				d.MustRunBatch() // the crashed batch again, if it did not commit
				e.feed(d, "a c")
				d.MustRunBatch()
				e.check(d)
			})
		}
	}
}

func TestCrashDuringRestore(t *testing.T) {
	d := kstatetest.New(t, counterConfig(), kstatetest.Partitions(2))
	e := newExactly(t)
	e.feed(d, faultKeys)
	d.MustRunBatch()
	e.feed(d, "a b")
	d.MustRunBatch()
	d.Crash(kstatetest.DuringRestore)
	if err := d.RestartError(); !errors.Is(err, kstatetest.ErrCrashed) {
		t.Fatalf("Restart with a crash during the restore = %v, want ErrCrashed", err)
	}
	d.Restart(kstatetest.KeepLocalState()) // on the half-restored shards
	e.feed(d, "a b c")
	d.MustRunBatch()
	e.check(d)
}

func TestRebalance(t *testing.T) {
	closed := 0
	cfg := counterConfig()
	cfg.NewProcessor = func() processor.StatefulProcessor[string, string, string] { return &counter{closed: &closed} }
	d := kstatetest.New(t, cfg, kstatetest.Partitions(4))
	e := newExactly(t)
	e.feed(d, faultKeys)
	d.MustRunBatch()
	d.Rebalance(0, 2)
	if closed != 2 {
		t.Errorf("%d processors closed by the rebalance, want 2", closed)
	}
	if m := d.Metrics(); !slices.Equal(m.Assigned, []int32{0, 1, 2, 3}) {
		t.Errorf("assigned %v after the rebalance", m.Assigned)
	}
	e.feed(d, faultKeys)
	d.MustRunBatch()
	e.check(d)
	d.Rebalance(2, 3) // 2 back, 3 away: 2 restores the tail on its old shard
	e.feed(d, faultKeys+" a a")
	d.MustRunBatch()
	d.Crash(kstatetest.AfterProduce)
	e.feed(d, faultKeys)
	if err := d.RunBatch(); !errors.Is(err, kstatetest.ErrCrashed) {
		t.Fatalf("RunBatch after Crash = %v", err)
	}
	d.Restart(kstatetest.KeepLocalState())
	d.MustRunBatch()
	e.check(d)
}

func TestFailNextCommit(t *testing.T) {
	d := kstatetest.New(t, counterConfig(), kstatetest.Partitions(2))
	e := newExactly(t)
	e.feed(d, faultKeys)
	d.MustRunBatch()
	e.take(d)
	d.FailNextCommit()
	e.feed(d, faultKeys+" a")
	if err := d.RunBatch(); !errors.Is(err, kstatetest.ErrInjected) {
		t.Fatalf("RunBatch with a failing commit = %v, want ErrInjected", err)
	}
	if got := d.OutputValues(); len(got) != 0 {
		t.Fatalf("outputs %q of an aborted commit", got)
	}
	if n, _ := kstatetest.ValueOf(d, "a", "count", state.Int64()); n != 1 {
		t.Fatalf("count of a = %d after the aborted commit, want 1", n)
	}
	d.MustRunBatch() // the batch again, exactly once
	e.check(d)
}

func TestFence(t *testing.T) {
	d := kstatetest.New(t, counterConfig(), kstatetest.Partitions(2))
	e := newExactly(t)
	e.feed(d, faultKeys)
	d.MustRunBatch()
	e.take(d)
	d.Fence()
	e.feed(d, "a b c")
	if err := d.RunBatch(); !errors.Is(err, kstate.ErrFenced) {
		t.Fatalf("RunBatch of a fenced instance = %v, want ErrFenced", err)
	}
	if got := d.OutputValues(); len(got) != 0 {
		t.Fatalf("outputs %q of a fenced batch", got)
	}
	d.MustRunBatch() // the newer instance, restored from the changelog
	e.check(d)
}

// memSink is an idempotent sink: a batch at or below its partition's
// high-water mark is skipped, as sqlsink does in its SQL transaction.
type memSink struct {
	mu    sync.Mutex
	hwm   map[int32]int64
	table map[string]string
	calls []string
}

func (s *memSink) WriteBatch(_ context.Context, b kstate.SinkBatch[string, string]) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, fmt.Sprintf("p%d#%d:%d", b.Partition, b.ID, len(b.Rows)))
	if h, ok := s.hwm[b.Partition]; ok && b.ID <= h {
		return nil
	}
	for _, r := range b.Rows {
		s.table[r.Key] = r.Value
	}
	s.hwm[b.Partition] = b.ID
	return nil
}

// sinkCounter is the counter on two partitions with memSink as its only
// output.
func sinkCounter(t *testing.T) (*kstatetest.Driver[string, string, string], *memSink) {
	sink := &memSink{hwm: map[int32]int64{}, table: map[string]string{}}
	cfg := counterConfig()
	cfg.Output = kstate.Output[string, string]{Sinks: []kstate.Sink[string, string]{sink}}
	return kstatetest.New(t, cfg, kstatetest.Partitions(2)), sink
}

// check fails t unless the sink's table holds "k=n" for every key and
// the committed count of each key is n.
func (s *memSink) check(t *testing.T, d *kstatetest.Driver[string, string, string], counts map[string]int64) {
	t.Helper()
	want := map[string]string{}
	for k, n := range counts {
		want[k] = fmt.Sprintf("%s=%d", k, n)
	}
	if !maps.Equal(s.table, want) {
		t.Fatalf("sink table %v, want %v (calls %v)", s.table, want, s.calls)
	}
	for k, v := range counts {
		if n, _ := kstatetest.ValueOf(d, k, "count", state.Int64()); n != v {
			t.Errorf("count of %s = %d, want %d", k, n, v)
		}
	}
}

func TestFailNextSink(t *testing.T) {
	d, sink := sinkCounter(t)
	inputs(d, "a a b", "x")
	d.MustRunBatch()
	d.FailNextSink()
	inputs(d, "a c", "x")
	var se *kstate.SinkError
	if err := d.RunBatch(); !errors.As(err, &se) || !errors.Is(err, kstatetest.ErrInjected) {
		t.Fatalf("RunBatch with a failing sink = %v, want a SinkError wrapping ErrInjected", err)
	}
	d.MustRunBatch() // the same batch again
	d.Crash(kstatetest.AfterSink)
	inputs(d, "b", "x")
	if err := d.RunBatch(); !errors.Is(err, kstatetest.ErrCrashed) {
		t.Fatalf("RunBatch after Crash(AfterSink) = %v", err)
	}
	d.Restart(kstatetest.KeepLocalState())
	d.MustRunBatch() // the same batch again: the sink skips it
	sink.check(t, d, map[string]int64{"a": 3, "b": 2, "c": 1})
}

// TestCrashAfterPlan: killed once a batch's plan committed (with sinks,
// the batch id and its input offsets are recorded first) and before its
// sinks ran: the restart runs the planned batch with the same id, the
// sink writes it once, and the counts are exact.
func TestCrashAfterPlan(t *testing.T) {
	d, sink := sinkCounter(t)
	inputs(d, "a a b", "x")
	d.MustRunBatch()
	d.Crash(kstatetest.AfterPlan)
	inputs(d, "a c", "x")
	if err := d.RunBatch(); !errors.Is(err, kstatetest.ErrCrashed) {
		t.Fatalf("RunBatch after Crash(AfterPlan) = %v, want ErrCrashed", err)
	}
	if _, ok := sink.table["c"]; ok {
		t.Fatalf("the sink wrote the crashed batch before its plan ran: %v", sink.table)
	}
	d.Restart(kstatetest.KeepLocalState())
	d.MustRunBatch() // the planned batch
	inputs(d, "c", "x")
	d.MustRunBatch()
	sink.check(t, d, map[string]int64{"a": 3, "b": 1, "c": 2})
}

// TestStuckNextCall: a processor call that never returns (of a key on
// either partition, so that the other partition's task finished first or
// is the stuck one): the batch is given up at MaxBatchDuration, nothing of
// it is committed, and the next RunBatch redoes it exactly once. With a
// watchdog that does not give up, RunBatch fails after stuckGuard (20s)
// of real time instead of hanging.
func TestStuckNextCall(t *testing.T) {
	for _, key := range []string{"c", "d"} {
		t.Run(key, func(t *testing.T) {
			d := kstatetest.New(t, counterConfig(), kstatetest.Partitions(2), kstatetest.MaxBatchDuration(time.Minute))
			if d.Partition("c") == d.Partition("d") {
				t.Fatalf("c and d on one partition: pick keys of both")
			}
			e := newExactly(t)
			e.feed(d, faultKeys)
			d.MustRunBatch()
			e.take(d)
			start := d.Now()
			d.StuckNextCall(key)
			e.feed(d, faultKeys+" a "+key)
			err := d.RunBatch()
			var se *kstate.StuckError
			if !errors.As(err, &se) || !errors.Is(err, kstate.ErrStuck) {
				t.Fatalf("RunBatch with a stuck call = %v, want a *kstate.StuckError", err)
			}
			if se.Partition != d.Partition(key) || se.Method != "HandleInputRows" || se.Key != fmt.Sprintf("%q", key) || se.Limit != "MaxBatchDuration" || se.For < time.Minute {
				t.Errorf("StuckError %+v, want partition %d, HandleInputRows, key %q, MaxBatchDuration, for 1m", *se, d.Partition(key), key)
			}
			if got := d.Now().Sub(start); got != time.Minute {
				t.Errorf("the driver clock moved %v, want MaxBatchDuration (1m)", got)
			}
			// The released call ran the processor: nothing of it, nor of
			// the batch's other keys, was committed.
			if got := d.OutputValues(); len(got) != 0 {
				t.Fatalf("outputs %q of a stuck batch", got)
			}
			for _, k := range []string{"a", key} {
				if n, _ := kstatetest.ValueOf(d, k, "count", state.Int64()); n != 1 {
					t.Fatalf("count of %s = %d after the stuck batch, want 1", k, n)
				}
			}
			d.MustRunBatch() // the batch again, exactly once
			e.feed(d, key)
			d.MustRunBatch()
			e.check(d)
		})
	}
}

// TestStuckNextCallTimer: a stuck HandleExpiredTimer; the timers fire once,
// in the redone batch.
func TestStuckNextCallTimer(t *testing.T) {
	d := kstatetest.New(t, monitorConfig(), kstatetest.Partitions(2), kstatetest.MaxBatchDuration(time.Second))
	inputs(d, "s1 s2", "hb") // timers at 10s
	d.MustRunBatch()
	d.AdvanceClock(11 * time.Second)
	d.StuckNextCall("s1")
	err := d.RunBatch()
	var se *kstate.StuckError
	if !errors.As(err, &se) || se.Method != "HandleExpiredTimer" || se.Key != `"s1"` || se.Partition != d.Partition("s1") {
		t.Fatalf("RunBatch with a stuck timer = %v, want a StuckError of HandleExpiredTimer \"s1\"", err)
	}
	// The restart after the error may already run the due timers (its
	// first trigger): the outputs of the stuck batch's RunBatch and the
	// next one's together are each timer's, once.
	got := d.OutputValues()
	d.MustRunBatch()
	got = append(got, d.OutputValues()...)
	slices.Sort(got)
	if want := []string{"s1 SILENT@10s", "s2 SILENT@10s"}; !slices.Equal(got, want) {
		t.Fatalf("outputs of the stuck batch and its redo %q, want %q", got, want)
	}
	d.MustRunBatch()
	if got := d.OutputValues(); len(got) != 0 || d.Timers("s1") != nil || d.Timers("s2") != nil {
		t.Fatalf("after the redone batch: outputs %q, timers %v %v; want none", got, d.Timers("s1"), d.Timers("s2"))
	}
}
