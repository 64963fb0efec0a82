package engine

import (
	"encoding/binary"
	"reflect"
	"strings"
	"testing"
)

// TestPlanFormats: a plan of one input is the 41-byte format of earlier
// releases (a shard of a previous release decodes as before, and a
// one-input application writes what they wrote); a plan of several
// inputs appends the further ranges; a plan of fewer inputs than the
// application has decodes with empty ranges for the others.
func TestPlanFormats(t *testing.T) {
	// The earlier release's encoding, by hand: id, first, end, count,
	// time, flags.
	var old []byte
	for _, v := range []int64{7, 100, 103, 3, 5000} {
		old = binary.BigEndian.AppendUint64(old, uint64(v))
	}
	old = append(old, 2)
	p, err := decodePlan(old, 1)
	if err != nil {
		t.Fatal(err)
	}
	want := Plan{BatchID: 7, TimeMs: 5000, FirstBatch: true, Ranges: []InputRange{{100, 103, 3}}}
	if !reflect.DeepEqual(p, want) {
		t.Fatalf("decoded %+v, want %+v", p, want)
	}
	if got := p.encode(); string(got) != string(old) {
		t.Fatalf("one input re-encodes as %x, want %x", got, old)
	}

	// The same bytes read by an application with a second input.
	p2, err := decodePlan(old, 2)
	if err != nil {
		t.Fatal(err)
	}
	if want := []InputRange{{100, 103, 3}, {-1, -1, 0}}; !reflect.DeepEqual(p2.Ranges, want) || p2.Count() != 3 {
		t.Fatalf("with two inputs: ranges %+v count %d", p2.Ranges, p2.Count())
	}

	// Two inputs round-trip.
	two := Plan{BatchID: 1, TimeMs: 9, Done: true, Ranges: []InputRange{{-1, -1, 0}, {4, 9, 5}}}
	b := two.encode()
	if len(b) != planLen+planRangeLen {
		t.Fatalf("two inputs: %d bytes", len(b))
	}
	back, err := decodePlan(b, 2)
	if err != nil || !reflect.DeepEqual(back, two) {
		t.Fatalf("round trip: %+v, %v; want %+v", back, err, two)
	}

	// An outstanding plan with records of an input the application no
	// longer has is refused; a done one is fine.
	two.Done = false
	if _, err := decodePlan(two.encode(), 1); err == nil || !strings.Contains(err.Error(), "plans records of 2 input topics, the application has 1") {
		t.Fatalf("outstanding plan of a removed input: %v", err)
	}
	if _, err := decodePlan(old[:40], 1); err == nil {
		t.Fatal("a truncated plan decoded")
	}
}

// TestInputOffsetMeta: the first input keeps the one-input metadata name.
func TestInputOffsetMeta(t *testing.T) {
	if got := InputOffsetMeta(0, "a"); got != MetaInputOffset {
		t.Fatalf("input 0: %q", got)
	}
	if got := InputOffsetMeta(1, "b"); got != "engine/input_offset/b" {
		t.Fatalf("input 1: %q", got)
	}
}

// TestOrderRecords: by input, then the poll's (offset) order.
func TestOrderRecords(t *testing.T) {
	recs := []Record{{Input: 1, Offset: 0}, {Input: 0, Offset: 5}, {Input: 1, Offset: 1}, {Input: 0, Offset: 6}}
	orderRecords(recs)
	var got [][2]int64
	for _, r := range recs {
		got = append(got, [2]int64{int64(r.Input), r.Offset})
	}
	if want := [][2]int64{{0, 5}, {0, 6}, {1, 0}, {1, 1}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
	if lo := lastOffsets(recs, 3); !reflect.DeepEqual(lo, []int64{7, 2, -1}) {
		t.Fatalf("lastOffsets %v", lo)
	}
}
