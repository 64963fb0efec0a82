package engine

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// manualClock is a Clock moved by hand.
type manualClock struct{ el time.Duration }

func (c *manualClock) Now() time.Time         { return time.Unix(0, 0).Add(c.el) }
func (c *manualClock) Elapsed() time.Duration { return c.el }
func (c *manualClock) Sleep(ctx context.Context, d time.Duration) error {
	c.el += d
	return ctx.Err()
}

// TestRestoreProgress drives a restore's progress by the clock: live
// records and total in the Snapshot, rate and ETA, a log line every
// restoreLogEvery and a final line; the total is exact once restored.
func TestRestoreProgress(t *testing.T) {
	clk := &manualClock{el: time.Minute}
	var buf bytes.Buffer
	c := &Coordinator{clock: clk, log: slog.New(slog.NewTextHandler(&buf, nil))}
	c.mu.slots = map[int32]*slot{}
	s := &slot{part: 3, watermark: -1, position: []int64{-1}, lag: -1}
	c.mu.slots[3] = s
	s.restore.start, s.restore.lastLog = clk.el, clk.el
	status := func() PartitionStatus { return c.Snapshot().Status[3] }

	// Changelog offsets 100..2,000,100 to read.
	c.restoreReader(s, 0, 100, 2_000_100)
	if st := status(); st.RestoredRecords != 0 || st.RestoreTotal != 2_000_000 || st.RestoreRate != 0 || st.RestoreETA != 0 {
		t.Fatalf("at start: %+v", st)
	}
	// 250k records/s: 10k records every 40ms.
	apply := func(steps int) {
		for range steps {
			clk.el += 40 * time.Millisecond
			done := s.restore.done + 10_000
			c.restoreApplied(s, done, 100+done)
		}
	}
	apply(50) // 2s
	if st := status(); st.RestoredRecords != 500_000 || st.RestoreTotal != 2_000_000 || int64(st.RestoreRate) != 250_000 || st.RestoreETA != 6*time.Second {
		t.Fatalf("after 2s: %+v", st)
	}
	if buf.Len() != 0 {
		t.Fatalf("a progress line before %v:\n%s", restoreLogEvery, buf.String())
	}
	apply(75) // 5s
	want := "restoring partition 3: 1250000/2000000 changelog records (62%), 250k/s, ETA 3s"
	if got := buf.String(); strings.Count(got, "\n") != 1 || !strings.Contains(got, want) {
		t.Fatalf("after 5s, log:\n%s\nwant a line %q", got, want)
	}
	apply(75) // 8s: all applied
	c.restoreEnded(s, 2_000_000)
	st := status()
	if st.RestoredRecords != 2_000_000 || st.RestoreTotal != 2_000_000 || int64(st.RestoreRate) != 250_000 || st.RestoreETA != 0 {
		t.Fatalf("restored: %+v", st)
	}
	clk.el += time.Hour // the rate of a finished restore does not decay
	if st := status(); int64(st.RestoreRate) != 250_000 {
		t.Fatalf("an hour later: %+v", st)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	want = "restored partition 3: 2000000 changelog records in 8s (250k/s)"
	if len(lines) != 2 || !strings.Contains(lines[1], want) {
		t.Fatalf("log:\n%s\nwant 2 lines, the last %q", buf.String(), want)
	}
}

// TestRestoreProgressAcrossReaders: a restore waiting for a lagging
// changelog opens several readers; the records add up.
func TestRestoreProgressAcrossReaders(t *testing.T) {
	clk := &manualClock{}
	c := &Coordinator{clock: clk, log: slog.New(slog.DiscardHandler)}
	c.mu.slots = map[int32]*slot{}
	s := &slot{part: 0}
	c.mu.slots[0] = s
	c.restoreReader(s, 0, 0, 10)
	c.restoreApplied(s, 8, 10) // 2 markers
	c.restoreReader(s, 8, 10, 15)
	if st := c.Snapshot().Status[0]; st.RestoredRecords != 8 || st.RestoreTotal != 13 {
		t.Fatalf("second reader: %+v", st)
	}
	c.restoreApplied(s, 4, 15)
	c.restoreEnded(s, 12)
	if st := c.Snapshot().Status[0]; st.RestoredRecords != 12 || st.RestoreTotal != 12 {
		t.Fatalf("restored: %+v", st)
	}
}

type nopObserver struct{ n int }

func (o *nopObserver) BatchCommitted(b BatchObservation) { o.n += len(b.Partitions) }
func (o *nopObserver) Aborted(error)                     {}
func (o *nopObserver) Rebalanced(string, []int32)        {}

// BenchmarkObserveCommit is the observation's cost per committed batch
// (6 partitions, 5000 records: the bench's defaults).
func BenchmarkObserveCommit(b *testing.B) {
	clk := &manualClock{}
	c := &Coordinator{clock: clk, log: slog.New(slog.DiscardHandler), cfg: CoordinatorConfig{Observer: &nopObserver{}}}
	c.mu.slots = map[int32]*slot{}
	var parts []*slot
	byPart := map[int32][]Record{}
	var results []*BatchResult
	for p := range int32(6) {
		s := &slot{part: p}
		c.mu.slots[p] = s
		parts = append(parts, s)
		for i := range 5000 / 6 {
			byPart[p] = append(byPart[p], Record{Offset: int64(i), TimestampMs: int64(i % 97)})
		}
		results = append(results, &BatchResult{})
	}
	b.ReportAllocs()
	for b.Loop() {
		c.observeCommit(parts, byPart, results, 0, 0)
	}
}
