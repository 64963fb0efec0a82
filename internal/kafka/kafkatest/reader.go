package kafkatest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/kstate/kstate/changelog"
	"github.com/kstate/kstate/internal/kafka"
)

// readFrom reads topic partition 0 from offset with a PartitionReader and
// returns the values and the final position and end.
// waitEnd waits until a reader of partition 0 of topic, opened at 0, ends
// at want or beyond.
func waitEnd(t *testing.T, brokers []string, topic string, want int64) {
	t.Helper()
	ctx := Ctx(t, time.Minute)
	deadline := time.Now().Add(30 * time.Second)
	for {
		r, err := kafka.NewPartitionReader(ctx, brokers, topic, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		end := r.End()
		r.Close()
		if end >= want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited 30s for the last stable offset of %s to reach %d: %d", topic, want, end)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func readFrom(t *testing.T, brokers []string, topic string, from int64) (values []string, pos, end int64) {
	t.Helper()
	ctx := Ctx(t, time.Minute)
	r, err := kafka.NewPartitionReader(ctx, brokers, topic, 0, from)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for {
		recs, err := r.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) == 0 {
			t.Fatal("Next returned no records and no error")
		}
		values = append(values, Values(recs)...)
	}
	if r.Position() != r.End() {
		t.Fatalf("at EOF, Position %d != End %d", r.Position(), r.End())
	}
	return values, r.Position(), r.End()
}

// ReaderTails: a restore reads exactly the committed records and terminates
// whatever the log ends with — a commit marker, an aborted transaction, or a
// plain record — from the start or from the middle, and stops at the end
// captured at open.
func ReaderTails(t *testing.T, brokers []string) {
	type txn struct {
		commit bool
		values []string
	}
	cases := []struct {
		name string
		txns []txn
		from int // index into the committed offsets; -1: offset 0
		want []string
	}{
		{"commit marker tail", []txn{{true, []string{"a", "b"}}, {false, []string{"c", "d"}}, {true, []string{"e"}}}, -1, []string{"a", "b", "e"}},
		{"aborted tail", []txn{{true, []string{"a", "b"}}, {false, []string{"c"}}}, -1, []string{"a", "b"}},
		{"only aborted", []txn{{false, []string{"x", "y"}}}, -1, nil},
		{"from the middle", []txn{{true, []string{"a", "b"}}, {false, []string{"c", "d"}}, {true, []string{"e"}}}, 1, []string{"b", "e"}},
		{"empty", nil, -1, nil},
	}
	adm := NewAdmin(t, brokers)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			topic := Topic(t, adm, "changelog", 1, true)
			w := TxnWriter(t, brokers, Name(t, "txn"))
			var committedOffs []int64
			for _, x := range tc.txns {
				offs := Txn(t, w, topic, 0, x.commit, x.values...)
				if x.commit {
					committedOffs = append(committedOffs, offs...)
				}
			}
			// The tail's transaction complete first: a real broker
			// answers EndTxn once the transaction is prepared and writes
			// its markers after, so a reader opened at once can find the
			// LSO still at the transaction's start (position 0 end 0 for
			// "only aborted", once) and the tail under test not there.
			waitStable(t, adm, topic)
			from := int64(0)
			if tc.from >= 0 {
				from = committedOffs[tc.from]
			}
			got, pos, end := readFrom(t, brokers, topic, from)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("read %v, want %v", got, tc.want)
			}
			high, err := NewAdmin(t, brokers).EndOffsets(Ctx(t, time.Minute), topic)
			if err != nil {
				t.Fatal(err)
			}
			if pos != high[0] || end != high[0] {
				t.Fatalf("position %d end %d, want both at the high watermark %d", pos, end, high[0])
			}
			// A new reader from the final position is at its end at once.
			if again, _, _ := readFrom(t, brokers, topic, pos); len(again) != 0 {
				t.Fatalf("re-reading from the final position returned %v", again)
			}
		})
	}
}

// waitStable waits until no transaction is open or completing on topic:
// every partition's last stable offset is its high watermark.
func waitStable(t *testing.T, adm *kafka.Admin, topic string) {
	t.Helper()
	ctx := Ctx(t, time.Minute)
	start := time.Now()
	for waited := false; ; waited = true {
		stable, err := adm.StableOffsets(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		high, err := adm.EndOffsets(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		if maps.Equal(stable, high) {
			if waited {
				t.Logf("waited %v for the markers: last stable offsets reached the high watermarks %v", time.Since(start).Round(time.Millisecond), high)
			}
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("topic %q: last stable offsets %v still below the high watermarks %v", topic, stable, high)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// ReaderAbortedBelowOpenTxn: the end captured at open is the last stable
// offset. When the record just below it belongs to an aborted transaction
// whose abort marker lies above it (another producer's transaction was open
// when the abort was written), nothing visible remains below the end — the
// reader must still terminate, at the end, without waiting for the open
// transaction. A reader opened after that transaction commits reads it.
func ReaderAbortedBelowOpenTxn(t *testing.T, brokers []string) {
	adm := NewAdmin(t, brokers)
	topic := Topic(t, adm, "changelog", 1, true)
	ctx := Ctx(t, time.Minute)
	x, y := TxnWriter(t, brokers, Name(t, "x")), TxnWriter(t, brokers, Name(t, "y"))

	Txn(t, x, topic, 0, true, "a") // a0 M1
	if err := x.Begin(); err != nil {
		t.Fatal(err)
	}
	cOff := Produce(t, x, topic, 0, "c")[0] // c2
	if err := y.Begin(); err != nil {
		t.Fatal(err)
	}
	dOff := Produce(t, y, topic, 0, "d")[0] // d3, open
	if committed, err := x.End(ctx, false); err != nil || committed {
		t.Fatalf("x abort: %v %v", committed, err) // A4
	}
	if dOff != cOff+1 {
		t.Fatalf("setup: c at %d, d at %d; want adjacent", cOff, dOff)
	}
	// EndTxn returns once the coordinator has decided; a real broker writes
	// the abort marker to the partition after that, and until it does, the
	// last stable offset is still c's. Wait for the marker (under make
	// test's load the read came first once).
	waitEnd(t, brokers, topic, dOff)

	got, pos, end := readFrom(t, brokers, topic, 0)
	if !slices.Equal(got, []string{"a"}) || end != dOff || pos != dOff {
		t.Fatalf("read %v position %d end %d; want [a] and both at the open transaction's start %d", got, pos, end, dOff)
	}

	if committed, err := y.End(ctx, true); err != nil || !committed {
		t.Fatalf("y commit: %v %v", committed, err)
	}
	got, _, _ = readFrom(t, brokers, topic, pos)
	if !slices.Equal(got, []string{"d"}) {
		t.Fatalf("after the open transaction committed, read %v from %d, want [d]", got, pos)
	}
}

// ReaderOutOfRange: a start offset beyond the log (a recreated changelog) is
// ErrOffsetOutOfRange, a missing topic ErrTopicNotFound.
func ReaderOutOfRange(t *testing.T, brokers []string) {
	adm := NewAdmin(t, brokers)
	topic := Topic(t, adm, "changelog", 1, true)
	// A key is required: a real broker rejects null-key records on a
	// compacted topic (INVALID_RECORD); kfake accepts them.
	PlainProduce(t, brokers, kafka.Record{Topic: topic, Partition: 0, Key: []byte("k"), Value: []byte("a")})
	ctx := Ctx(t, time.Minute)
	if _, err := kafka.NewPartitionReader(ctx, brokers, topic, 0, 10); !errors.Is(err, kafka.ErrOffsetOutOfRange) {
		t.Fatalf("reader beyond the log: %v, want ErrOffsetOutOfRange", err)
	}
	if _, err := kafka.NewPartitionReader(ctx, brokers, topic, 3, 0); err == nil {
		t.Fatal("reader of a missing partition: no error")
	}
	if _, err := kafka.NewPartitionReader(ctx, brokers, Name(t, "missing"), 0, 0); !errors.Is(err, kafka.ErrTopicNotFound) {
		t.Fatalf("reader of a missing topic: %v, want ErrTopicNotFound", err)
	}
}

// ReadAllCommitted: ReadAll returns committed and plain records of every
// partition, ordered by partition then offset, and never aborted ones.
func ReadAllCommitted(t *testing.T, brokers []string) {
	adm := NewAdmin(t, brokers)
	topic := Topic(t, adm, "out", 3, false)
	w := TxnWriter(t, brokers, Name(t, "txn"))
	Txn(t, w, topic, 0, true, "p0-a")
	Txn(t, w, topic, 2, false, "p2-aborted")
	PlainProduce(t, brokers, kafka.Record{Topic: topic, Partition: 2, Value: []byte("p2-plain")})
	Txn(t, w, topic, 1, true, "p1-a", "p1-b")
	Txn(t, w, topic, 0, false, "p0-aborted")

	got := ReadAll(t, brokers, topic)
	if want := []string{"p0-a", "p1-a", "p1-b", "p2-plain"}; !slices.Equal(Values(got), want) {
		t.Fatalf("ReadAll = %v, want %v", Values(got), want)
	}
	for i := 1; i < len(got); i++ {
		a, b := got[i-1], got[i]
		if a.Partition > b.Partition || (a.Partition == b.Partition && a.Offset >= b.Offset) {
			t.Fatalf("records out of order: %d/%d before %d/%d", a.Partition, a.Offset, b.Partition, b.Offset)
		}
	}
}

// ProducerPartitioning: AnyPartition keeps one key in one partition, an
// explicit partition is honoured (including 0).
func ProducerPartitioning(t *testing.T, brokers []string) {
	adm := NewAdmin(t, brokers)
	topic := Topic(t, adm, "in", 4, false)
	var recs []kafka.Record
	for i := range 20 {
		recs = append(recs, kafka.Record{Topic: topic, Partition: kafka.AnyPartition, Key: []byte("same-key"), Value: []byte{byte(i)}})
	}
	recs = append(recs,
		kafka.Record{Topic: topic, Partition: 3, Key: []byte("same-key"), Value: []byte("explicit-3")},
		kafka.Record{Topic: topic, Partition: 0, Key: []byte("same-key"), Value: []byte("explicit-0")})
	PlainProduce(t, brokers, recs...)

	byKey := map[int32]int{}
	for _, r := range ReadAll(t, brokers, topic) {
		switch string(r.Value) {
		case "explicit-3", "explicit-0":
			if want := map[string]int32{"explicit-3": 3, "explicit-0": 0}[string(r.Value)]; r.Partition != want {
				t.Fatalf("%s landed in partition %d", r.Value, r.Partition)
			}
		default:
			byKey[r.Partition]++
		}
	}
	if len(byKey) != 1 {
		t.Fatalf("one key spread over partitions %v", byKey)
	}
}

// ReaderNextChangelog: NextChangelog returns exactly the committed records
// Next returns — keys, values (tombstones stay nil), offsets — over several
// fetches of ~1 MiB; the records of earlier calls stay intact after later
// calls (the reader reuses no buffer), and the position ends at the end.
func ReaderNextChangelog(t *testing.T, brokers []string) { readerNextChangelog(t, brokers, false) }

// ReaderNextChangelogAborted is ReaderNextChangelog with an aborted
// transaction between the committed ones, in the middle of a fetch. Real
// brokers only: kfake (this version) answered a read_committed fetch from
// offset 1284 that held the aborted transaction's batches (2002–3001) with
// an empty AbortedTransactions list, so the aborted records came back
// (when one fetch held the whole log they were filtered).
func ReaderNextChangelogAborted(t *testing.T, brokers []string) {
	readerNextChangelog(t, brokers, true)
}

func readerNextChangelog(t *testing.T, brokers []string, abort bool) {
	adm := NewAdmin(t, brokers)
	topic := Topic(t, adm, "changelog", 1, false) // not compacted: every record stays
	ctx := Ctx(t, 2*time.Minute)
	w := TxnWriter(t, brokers, Name(t, "w"))
	value := func(txn, i int) []byte {
		if i%7 == 3 {
			return nil // a tombstone
		}
		v := make([]byte, 1000)
		x := uint64(txn)<<32 | uint64(i) | 1
		for j := range v { // xorshift: incompressible, so the log really holds ~1 KB per record
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
			v[j] = byte(x)
		}
		return v
	}
	type kv struct {
		key, value []byte
		off        int64
	}
	var want []kv
	const txns, perTxn = 5, 1000 // ~5 MiB: several fetches
	for txn := range txns {
		commit := !abort || txn != 2 // the third transaction aborts
		if err := w.Begin(); err != nil {
			t.Fatal(err)
		}
		recs := make([]kafka.Record, perTxn)
		for i := range recs {
			recs[i] = kafka.Record{Topic: topic, Partition: 0, Key: fmt.Appendf(nil, "k-%d-%d", txn, i), Value: value(txn, i)}
		}
		offs, err := w.Produce(ctx, recs)
		if err != nil {
			t.Fatal(err)
		}
		if committed, err := w.End(ctx, commit); err != nil || committed != commit {
			t.Fatalf("End(%v): %v %v", commit, committed, err)
		}
		if commit {
			for i, r := range recs {
				want = append(want, kv{r.Key, r.Value, offs[i]})
			}
		}
	}

	var viaNext []kv
	r, err := kafka.NewPartitionReader(ctx, brokers, topic, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for {
		recs, err := r.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, rec := range recs {
			viaNext = append(viaNext, kv{rec.Key, rec.Value, rec.Offset})
		}
	}
	r.Close()

	r, err = kafka.NewPartitionReader(ctx, brokers, topic, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var chunks [][]changelog.Record
	for {
		recs, err := r.NextChangelog(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) == 0 {
			t.Fatal("NextChangelog returned no records and no error")
		}
		chunks = append(chunks, recs) // kept, not copied: checked after every later call
	}
	if r.Position() != r.End() {
		t.Fatalf("at EOF, Position %d != End %d", r.Position(), r.End())
	}
	var viaChangelog []kv
	for _, c := range chunks {
		for _, rec := range c {
			viaChangelog = append(viaChangelog, kv{rec.Key, rec.Value, rec.Offset})
		}
	}
	t.Logf("%d records in %d NextChangelog chunks", len(viaChangelog), len(chunks))
	for name, got := range map[string][]kv{"Next": viaNext, "NextChangelog": viaChangelog} {
		if len(got) != len(want) {
			t.Fatalf("%s: %d records, want %d", name, len(got), len(want))
		}
		for i := range want {
			g, w := got[i], want[i]
			if g.off != w.off || !bytes.Equal(g.key, w.key) || !bytes.Equal(g.value, w.value) || (g.value == nil) != (w.value == nil) {
				t.Fatalf("%s: record %d: offset %d key %q value %d bytes (nil %v); want offset %d key %q value %d bytes (nil %v)",
					name, i, g.off, g.key, len(g.value), g.value == nil, w.off, w.key, len(w.value), w.value == nil)
			}
		}
	}
}
