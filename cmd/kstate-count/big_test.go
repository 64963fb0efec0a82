package main

import (
	"bytes"
	"encoding/binary"
	"testing"
)

func TestBigPeerEmbedded(t *testing.T) { testPeerEmbedded(t, "big") }

// The big workload's state value: the count and the send time up front,
// then filler that depends on both (every update rewrites the whole value)
// and does not repeat, so a store's compression cannot shrink it.
func TestBigValue(t *testing.T) {
	a := bigValue(make([]byte, 200), 7, 1234)
	if binary.BigEndian.Uint64(a) != 7 || binary.BigEndian.Uint64(a[8:]) != 1234 {
		t.Fatalf("header %x, want count 7 and send time 1234", a[:16])
	}
	if !bytes.Equal(a, bigValue(make([]byte, 200), 7, 1234)) {
		t.Fatal("not deterministic")
	}
	b := bigValue(make([]byte, 200), 8, 1234)
	if bytes.Equal(a[16:], b[16:]) {
		t.Fatal("the filler does not change with the count")
	}
	seen := map[uint64]bool{}
	for i := 16; i+8 <= len(a); i += 8 {
		w := binary.BigEndian.Uint64(a[i:])
		if seen[w] || w == 0 {
			t.Fatalf("filler word %d (%x) repeats or is zero: %x", (i-16)/8, w, a[16:])
		}
		seen[w] = true
	}
	if odd := bigValue(make([]byte, 21), 1, 2); len(odd) != 21 || odd[20] == 0 && odd[19] == 0 && odd[18] == 0 {
		t.Fatalf("a size not a multiple of 8: %x", odd)
	}
	if _, err := parseFlags([]string{"-brokers", "b:1", "-group", "g", "-state", "s", "-processor", "big", "-value-bytes", "15"}); err == nil {
		t.Fatal("-value-bytes 15 accepted")
	}
}
