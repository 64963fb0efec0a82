package restore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kstate/kstate/changelog"
	"github.com/kstate/kstate/internal/changelogfmt"
)

// sliceSource serves records in chunks, then io.EOF.
type sliceSource struct {
	chunks [][]changelog.Record
	calls  int
}

func (s *sliceSource) Next(ctx context.Context) ([]changelog.Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if s.calls >= len(s.chunks) {
		return nil, io.EOF
	}
	s.calls++
	return s.chunks[s.calls-1], nil
}

// positionSource also reports a read position past the last record, as a
// read_committed consumer does after transaction markers.
type positionSource struct {
	sliceSource
	pos int64
}

func (s *positionSource) Position() int64 { return s.pos }

func chunked(recs []changelog.Record, n int) [][]changelog.Record {
	var cs [][]changelog.Record
	for len(recs) > 0 {
		k := min(n, len(recs))
		cs = append(cs, recs[:k])
		recs = recs[k:]
	}
	return cs
}

// mapTarget is a shard reduced to a map plus an offset.
type mapTarget struct {
	data    map[string]string
	offset  int64
	batches []int   // records per ApplyChangelog call
	nexts   []int64 // nextOffset per call
	fail    error
}

func newMapTarget() *mapTarget { return &mapTarget{data: map[string]string{}} }

func (m *mapTarget) ChangelogOffset() int64 { return m.offset }

func (m *mapTarget) ApplyChangelog(recs []changelog.Record, next int64) error {
	if m.fail != nil {
		return m.fail
	}
	for _, r := range recs {
		if r.Tombstone() {
			delete(m.data, string(r.Key))
		} else {
			m.data[string(r.Key)] = string(r.Value)
		}
	}
	m.batches = append(m.batches, len(recs))
	m.nexts = append(m.nexts, next)
	m.offset = next
	return nil
}

func skey(g string) []byte { return changelogfmt.StateKey(1, []byte(g), nil) }

func rec(off int64, g, v string) changelog.Record {
	r := changelog.Record{Key: skey(g), Offset: off}
	if v != "" {
		r.Value = changelogfmt.EncodeValue(changelog.Header{Expiry: changelog.NoExpiry}, []byte(v))
	}
	return r
}

func val(v string) string {
	return string(changelogfmt.EncodeValue(changelog.Header{Expiry: changelog.NoExpiry}, []byte(v)))
}

func TestRestoreAppliesTombstones(t *testing.T) {
	recs := []changelog.Record{rec(0, "a", "1"), rec(1, "b", "2"), rec(2, "a", ""), rec(3, "c", "3"), rec(4, "b", "22")}
	dst := newMapTarget()
	st, err := Restore(context.Background(), &sliceSource{chunks: chunked(recs, 2)}, dst, Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{string(skey("b")): val("22"), string(skey("c")): val("3")}
	if !maps.Equal(dst.data, want) {
		t.Fatalf("target %q, want %q", dst.data, want)
	}
	if dst.offset != 5 || st.Records != 5 || st.FromOffset != 0 || st.ToOffset != 5 {
		t.Fatalf("offset %d, stats %+v", dst.offset, st)
	}
	if !slices.Equal(dst.batches, []int{5}) {
		t.Fatalf("batches %v: records from several Next calls belong in one write", dst.batches)
	}
}

func TestRestoreIdempotent(t *testing.T) {
	var recs []changelog.Record
	for i := range 50 {
		v := fmt.Sprint(i)
		if i%7 == 3 {
			v = "" // tombstone
		}
		recs = append(recs, rec(int64(i*2), fmt.Sprint(i%9), v))
	}
	dst := newMapTarget()
	if _, err := Restore(context.Background(), &sliceSource{chunks: chunked(recs, 8)}, dst, Options{BatchSize: 6}); err != nil {
		t.Fatal(err)
	}
	first := maps.Clone(dst.data)
	// Same records again over the restored state, as if the offset had been lost.
	dst.offset = 0
	if _, err := Restore(context.Background(), &sliceSource{chunks: chunked(recs, 5)}, dst, Options{BatchSize: 4}); err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(dst.data, first) || dst.offset != 99 {
		t.Fatalf("second restore: %q offset %d, want %q offset 99", dst.data, dst.offset, first)
	}
	// And with the offset kept: nothing is re-applied.
	calls := len(dst.batches)
	st, err := Restore(context.Background(), &sliceSource{chunks: chunked(recs, 5)}, dst, Options{})
	if err != nil || st.Records != 0 || len(dst.batches) != calls || !maps.Equal(dst.data, first) {
		t.Fatalf("third restore: err %v stats %+v, %d new writes", err, st, len(dst.batches)-calls)
	}
}

func TestRestoreBatches(t *testing.T) {
	// Offsets with gaps, as compaction and transaction markers leave them.
	offs := []int64{0, 1, 2, 5, 6, 9, 10, 11, 20, 30}
	var recs []changelog.Record
	for i, o := range offs {
		recs = append(recs, rec(o, fmt.Sprint(i), "v"))
	}
	dst := newMapTarget()
	st, err := Restore(context.Background(), &sliceSource{chunks: chunked(recs, 4)}, dst, Options{BatchSize: 3})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(dst.batches, []int{3, 3, 3, 1}) {
		t.Fatalf("batch sizes %v, want [3 3 3 1]", dst.batches)
	}
	if !slices.Equal(dst.nexts, []int64{3, 10, 21, 31}) {
		t.Fatalf("next offsets %v, want last offset + 1 of each batch [3 10 21 31]", dst.nexts)
	}
	if st.Records != 10 || st.ToOffset != 31 || len(dst.data) != 10 {
		t.Fatalf("stats %+v, %d keys", st, len(dst.data))
	}
}

func TestRestorePosition(t *testing.T) {
	recs := []changelog.Record{rec(0, "a", "1"), rec(1, "b", "2")}
	// The partition ends at 4: a commit marker at 2, an aborted record at 3.
	dst := newMapTarget()
	src := &positionSource{sliceSource{chunks: [][]changelog.Record{recs}}, 4}
	st, err := Restore(context.Background(), src, dst, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if dst.offset != 4 || st.ToOffset != 4 || !slices.Equal(dst.nexts, []int64{4}) {
		t.Fatalf("offset %d nexts %v, want 4 in one write", dst.offset, dst.nexts)
	}
	// Only markers/aborted records past the target's offset: the offset
	// still advances, in an empty write.
	src = &positionSource{sliceSource{chunks: [][]changelog.Record{{}}}, 9}
	st, err = Restore(context.Background(), src, dst, Options{})
	if err != nil || dst.offset != 9 || st.Records != 0 || dst.batches[len(dst.batches)-1] != 0 {
		t.Fatalf("err %v offset %d stats %+v batches %v", err, dst.offset, st, dst.batches)
	}
	// A position behind the records never moves the offset back.
	src = &positionSource{sliceSource{chunks: [][]changelog.Record{{rec(9, "c", "3")}}}, 3}
	if _, err := Restore(context.Background(), src, dst, Options{}); err != nil || dst.offset != 10 {
		t.Fatalf("err %v offset %d, want 10", err, dst.offset)
	}
	// Nothing new at all: no write.
	calls := len(dst.batches)
	src = &positionSource{sliceSource{}, 10}
	if _, err := Restore(context.Background(), src, dst, Options{}); err != nil || len(dst.batches) != calls {
		t.Fatalf("err %v, %d writes for an empty restore", err, len(dst.batches)-calls)
	}
}

func TestRestoreSkipsBelowTargetOffset(t *testing.T) {
	var recs []changelog.Record
	for i := range 10 {
		recs = append(recs, rec(int64(i), "k", fmt.Sprint(i)))
	}
	dst := newMapTarget()
	dst.offset = 6
	dst.data[string(skey("k"))] = val("5")
	st, err := Restore(context.Background(), &sliceSource{chunks: chunked(recs, 3)}, dst, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if st.Records != 4 || st.FromOffset != 6 || dst.offset != 10 || dst.data[string(skey("k"))] != val("9") {
		t.Fatalf("stats %+v offset %d value %q", st, dst.offset, dst.data[string(skey("k"))])
	}
}

func TestRestoreRejects(t *testing.T) {
	cases := []struct {
		name string
		recs []changelog.Record
		opts Options
		want error
	}{
		{"offsets backwards", []changelog.Record{rec(5, "a", "1"), rec(4, "b", "1")}, Options{}, ErrBadRecord},
		{"duplicate offset", []changelog.Record{rec(5, "a", "1"), rec(5, "b", "1")}, Options{}, ErrBadRecord},
		{"local offset key", []changelog.Record{{Key: []byte("\xffoffset"), Value: []byte{0, 0, 0, 0, 0, 0, 0, 9}, Offset: 3}}, Options{}, ErrBadRecord},
		{"truncated key", []changelog.Record{{Key: []byte{0x01, 0, 0}, Offset: 3}}, Options{}, changelog.ErrShortKey},
		{"negative batch size", nil, Options{BatchSize: -1}, ErrInvalidOptions},
		{"negative batch bytes", nil, Options{BatchBytes: -1}, ErrInvalidOptions},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dst := newMapTarget()
			_, err := Restore(context.Background(), &sliceSource{chunks: [][]changelog.Record{tc.recs}}, dst, tc.opts)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
			if len(dst.batches) != 0 {
				t.Fatalf("bad input was applied: %v", dst.batches)
			}
		})
	}
	t.Run("offset named", func(t *testing.T) {
		_, err := Restore(context.Background(), &sliceSource{chunks: [][]changelog.Record{{{Key: []byte{0x07}, Offset: 42}}}}, newMapTarget(), Options{})
		if !errors.Is(err, changelog.ErrUnknownKind) || !strings.Contains(err.Error(), "offset 42") {
			t.Fatalf("err %v should wrap changelog.ErrUnknownKind and name offset 42", err)
		}
	})
}

func TestRestoreErrorsPropagate(t *testing.T) {
	boom := errors.New("disk full")
	dst := newMapTarget()
	dst.fail = boom
	_, err := Restore(context.Background(), &sliceSource{chunks: [][]changelog.Record{{rec(0, "a", "1")}}}, dst, Options{})
	if !errors.Is(err, boom) {
		t.Fatalf("apply error: %v", err)
	}
	_, err = Restore(context.Background(), errSource{boom}, newMapTarget(), Options{})
	if !errors.Is(err, boom) || errors.Is(err, io.EOF) {
		t.Fatalf("source error: %v", err)
	}
}

type errSource struct{ err error }

func (s errSource) Next(context.Context) ([]changelog.Record, error) { return nil, s.err }

// endlessSource never reaches EOF: it yields one record per call, or waits
// on ctx when blocking.
type endlessSource struct {
	off      int64
	blocking bool
}

func (s *endlessSource) Next(ctx context.Context) ([]changelog.Record, error) {
	if s.blocking && s.off >= 3 {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	s.off++
	return []changelog.Record{rec(s.off-1, "k", "v")}, nil
}

func TestRestoreCancel(t *testing.T) {
	for _, blocking := range []bool{false, true} {
		t.Run(fmt.Sprintf("blocking=%v", blocking), func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			dst := newMapTarget()
			done := make(chan error, 1)
			var st Stats
			go func() {
				var err error
				st, err = Restore(ctx, &endlessSource{blocking: blocking}, dst, Options{BatchSize: 2})
				done <- err
			}()
			time.Sleep(20 * time.Millisecond)
			cancel()
			select {
			case err := <-done:
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("err %v, want context.Canceled", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("Restore did not stop after cancel")
			}
			// Only whole batches were applied; the offset is a batch boundary.
			if dst.offset%2 != 0 || st.ToOffset != dst.offset || st.Records != dst.offset {
				t.Fatalf("offset %d, stats %+v", dst.offset, st)
			}
		})
	}
}

func TestRestoreProgressLog(t *testing.T) {
	now := time.Unix(0, 0)
	clock := func() time.Time { now = now.Add(700 * time.Millisecond); return now }
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, nil))
	var recs []changelog.Record
	for i := range 20 {
		recs = append(recs, rec(int64(i), fmt.Sprint(i), "v"))
	}
	st, err := Restore(context.Background(), &sliceSource{chunks: chunked(recs, 2)}, newMapTarget(),
		Options{BatchSize: 2, Logger: logger, EndOffset: 20, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) < 3 || len(lines) > 12 {
		t.Fatalf("%d log lines with a clock ticking 0.7s per read, want one per ~2s: %q", len(lines), lines)
	}
	if !strings.Contains(lines[0], "remaining=") || !strings.Contains(lines[0], "records_per_second=") {
		t.Fatalf("progress line %q lacks rate or remaining", lines[0])
	}
	last := lines[len(lines)-1]
	if !strings.Contains(last, "changelog restored") || !strings.Contains(last, "records=20") || !strings.Contains(last, "from_offset=0 to_offset=20") {
		t.Fatalf("summary %q", last)
	}
	if st.Duration <= 0 {
		t.Fatalf("duration %v from the injected clock", st.Duration)
	}
}

func TestRestoreBatchBytes(t *testing.T) {
	var recs []changelog.Record
	for i := range 10 {
		recs = append(recs, rec(int64(i), fmt.Sprint(i), strings.Repeat("v", 40)))
	}
	per := len(recs[0].Key) + len(recs[0].Value)
	dst := newMapTarget()
	if _, err := Restore(context.Background(), &sliceSource{chunks: chunked(recs, 10)}, dst, Options{BatchBytes: 3 * per}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(dst.batches, []int{3, 3, 3, 1}) {
		t.Fatalf("batch sizes %v, want [3 3 3 1] (a batch ends at BatchBytes)", dst.batches)
	}
}

// gateSource serves chunks and records when each Next call started.
type gateSource struct {
	sliceSource
	started chan int // receives the number of the call that starts
}

func (s *gateSource) Next(ctx context.Context) ([]changelog.Record, error) {
	s.started <- s.calls
	return s.sliceSource.Next(ctx)
}

// blockingTarget's first ApplyChangelog waits until the source has been
// asked for the next chunk: it only returns if reading overlaps applying.
type blockingTarget struct {
	*mapTarget
	src   *gateSource
	first bool
}

func (b *blockingTarget) ApplyChangelog(recs []changelog.Record, next int64) error {
	if !b.first {
		b.first = true
		for waiting := true; waiting; {
			select {
			case n := <-b.src.started:
				waiting = n < 1 // call 0 produced this batch; call 1 must start meanwhile
			case <-time.After(5 * time.Second):
				return errors.New("the next chunk was not read while a batch was applied")
			}
		}
	}
	return b.mapTarget.ApplyChangelog(recs, next)
}

// Restore reads the next chunk while it applies the previous one.
func TestRestoreReadsAhead(t *testing.T) {
	recs := []changelog.Record{rec(0, "a", "1"), rec(1, "b", "2"), rec(2, "c", "3"), rec(3, "d", "4")}
	src := &gateSource{sliceSource: sliceSource{chunks: chunked(recs, 2)}, started: make(chan int, 10)}
	dst := &blockingTarget{mapTarget: newMapTarget(), src: src}
	st, err := Restore(context.Background(), src, dst, Options{BatchSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	if st.Records != 4 || dst.offset != 4 || len(dst.data) != 4 || !slices.Equal(dst.batches, []int{2, 2}) {
		t.Fatalf("stats %+v, offset %d, %d keys, batches %v", st, dst.offset, len(dst.data), dst.batches)
	}
}

// With Coalesce, a batch writes only the newest record of each key (a
// tombstone included): the target ends exactly as without it, every
// record counts as restored, the superseded ones as coalesced, and the
// batch bounds still count every record read.
func TestRestoreCoalesce(t *testing.T) {
	recs := []changelog.Record{
		rec(0, "a", "1"), rec(1, "b", "1"), rec(2, "a", "2"), rec(3, "c", "1"), // batch 1: a twice
		rec(4, "b", ""), rec(5, "b", "3"), rec(6, "d", "1"), rec(7, "d", ""), // batch 2: b deleted then set, d set then deleted
		rec(8, "a", "3"), rec(9, "a", "4"), // batch 3
	}
	want := newMapTarget()
	want.data[string(skey("d"))] = val("old") // deleted by batch 2
	if _, err := Restore(context.Background(), &sliceSource{chunks: chunked(recs, 3)}, want, Options{BatchSize: 4}); err != nil {
		t.Fatal(err)
	}
	dst := newMapTarget()
	dst.data[string(skey("d"))] = val("old")
	st, err := Restore(context.Background(), &sliceSource{chunks: chunked(recs, 3)}, dst, Options{BatchSize: 4, Coalesce: true})
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(dst.data, want.data) || dst.offset != 10 {
		t.Errorf("coalesced: offset %d, state %q; want offset 10, %q", dst.offset, dst.data, want.data)
	}
	if !slices.Equal(dst.batches, []int{3, 2, 1}) || !slices.Equal(dst.nexts, []int64{4, 8, 10}) {
		t.Errorf("coalesced batches %v (next offsets %v), want [3 2 1] ([4 8 10])", dst.batches, dst.nexts)
	}
	if st.Records != 10 || st.Coalesced != 4 || st.ToOffset != 10 {
		t.Errorf("stats %+v, want 10 records, 4 coalesced, to offset 10", st)
	}
	if got := dst.data[string(skey("a"))]; got != val("4") {
		t.Errorf("a = %q, want the newest value %q", got, val("4"))
	}
	if _, ok := dst.data[string(skey("d"))]; ok {
		t.Error("d survived its newest record, a tombstone")
	}
}

// With Coalesce, BatchBytes bounds the distinct records kept (copies, the
// memory held), not the records read: one key updated 100 times is one
// batch of one record under a bound of three records' bytes, where the
// batches without Coalesce hold three records each. BatchSize still
// counts every record read.
func TestRestoreCoalesceBounds(t *testing.T) {
	var recs []changelog.Record
	for i := range 100 {
		recs = append(recs, rec(int64(i), "k", fmt.Sprintf("v%02d", i)))
	}
	size := len(recs[0].Key) + len(recs[0].Value)
	dst := newMapTarget()
	st, err := Restore(context.Background(), &sliceSource{chunks: chunked(recs, 7)}, dst, Options{BatchBytes: 3 * size, Coalesce: true})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(dst.batches, []int{1}) || st.Records != 100 || st.Coalesced != 99 || dst.data[string(skey("k"))] != val("v99") {
		t.Errorf("coalesced: batches %v, stats %+v, k = %q", dst.batches, st, dst.data[string(skey("k"))])
	}
	plain := newMapTarget()
	if _, err := Restore(context.Background(), &sliceSource{chunks: chunked(recs, 7)}, plain, Options{BatchBytes: 3 * size}); err != nil {
		t.Fatal(err)
	}
	if len(plain.batches) != 34 {
		t.Errorf("without Coalesce: %d batches, want 34 of at most 3 records", len(plain.batches))
	}
	bySize := newMapTarget()
	if _, err := Restore(context.Background(), &sliceSource{chunks: chunked(recs, 7)}, bySize, Options{BatchSize: 10, Coalesce: true}); err != nil {
		t.Fatal(err)
	}
	if len(bySize.batches) != 10 || !slices.Equal(bySize.nexts[:2], []int64{10, 20}) {
		t.Errorf("BatchSize 10 with Coalesce: batches %v up to %v, want 10 batches of 10 records read", bySize.batches, bySize.nexts)
	}
}
