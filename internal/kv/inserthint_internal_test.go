//go:build cgo && !kstate_nocgo

package kv

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// A store with InsertHints reads back exactly what a model of its writes
// holds, through many memtable switches, with batches written in key
// order (the hinted case), out of order, and with the range deletions a
// shard makes (Wipe: from 0x00 to the end) or may make (from a 0x00 key
// into the hinted kinds) mixed in. Before the hint's domain left out
// 0x00, a Wipe followed by ordinary writes failed RocksDB's skip list
// assertion and aborted the process.
func TestRocksInsertHints(t *testing.T) {
	s, err := OpenRocksDB(t.TempDir(), RocksOptions{InsertHints: true, WriteBufferSize: 256 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rng := rand.New(rand.NewPCG(7, 29))
	kinds := []byte{0x00, 0x01, 0x02, 0x03, 0x04, 0xff}
	key := func() []byte {
		return fmt.Appendf([]byte{kinds[rng.IntN(len(kinds))]}, "k%05d", rng.IntN(5000))
	}
	model := map[string]string{}
	for round := range 400 {
		var b Batch
		switch r := rng.IntN(40); {
		case r == 0: // Wipe
			b.DeleteRange([]byte{0x00}, nil)
			clear(model)
		case r == 1: // from a 0x00 key into the hinted kinds
			lo := fmt.Appendf([]byte{0x00}, "k%05d", rng.IntN(5000))
			hi := fmt.Appendf([]byte{0x03}, "k%05d", rng.IntN(5000))
			b.DeleteRange(lo, hi)
			for k := range model {
				if k >= string(lo) && k < string(hi) {
					delete(model, k)
				}
			}
		}
		n := 1 + rng.IntN(400)
		for range n {
			k := key()
			if rng.IntN(4) == 0 {
				b.Delete(k)
				delete(model, string(k))
			} else {
				v := fmt.Appendf(nil, "v%d.%d", round, rng.Uint64())
				b.Put(k, v)
				model[string(k)] = string(v)
			}
		}
		if err := s.Write(&b, WriteOptions{DisableWAL: round%2 == 0}); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if round%50 == 49 {
			checkModel(t, s, model, fmt.Sprintf("round %d", round))
		}
	}
	checkModel(t, s, model, "end")
}

// checkModel fails unless a full scan of s is exactly model, and a Get of
// some of model's keys finds their values.
func checkModel(t *testing.T, s Store, model map[string]string, where string) {
	t.Helper()
	it := s.NewIter(nil, nil)
	defer it.Close()
	var got []string
	for ok := it.First(); ok; ok = it.Next() {
		k := string(it.Key())
		got = append(got, k)
		if want, ok := model[k]; !ok || want != string(it.Value()) {
			t.Fatalf("%s: scan has %x=%q, model has %q (present %v)", where, k, it.Value(), want, ok)
		}
	}
	if err := it.Error(); err != nil {
		t.Fatalf("%s: scan: %v", where, err)
	}
	if len(got) != len(model) {
		want := make([]string, 0, len(model))
		for k := range model {
			want = append(want, k)
		}
		slices.Sort(want)
		t.Fatalf("%s: scan has %d keys, model %d (first model key %x)", where, len(got), len(model), want[0])
	}
	n := 0
	for k, want := range model {
		if n++; n > 200 {
			break
		}
		v, ok, err := s.Get([]byte(k))
		if err != nil || !ok || !bytes.Equal(v, []byte(want)) {
			t.Fatalf("%s: Get(%x) = %q, %v, %v; want %q", where, k, v, ok, err, want)
		}
	}
}

// A store with InsertHints refuses a range deletion whose start has a hint,
// naming it, and writes nothing of that batch; a store without them takes
// it.
func TestRocksInsertHintsRefuseRange(t *testing.T) {
	hinted, err := OpenRocksDB(t.TempDir(), RocksOptions{InsertHints: true})
	if err != nil {
		t.Fatal(err)
	}
	defer hinted.Close()
	var b Batch
	b.Put([]byte("\x01a"), []byte("1"))
	b.DeleteRange([]byte("\x01b"), nil)
	err = hinted.Write(&b, WriteOptions{})
	if !errors.Is(err, ErrInvalidOptions) || !bytes.Contains([]byte(err.Error()), []byte("0162")) {
		t.Fatalf("DeleteRange from 0x01 'b' on a hinted store: %v, want ErrInvalidOptions naming 0162", err)
	}
	if _, ok, err := hinted.Get([]byte("\x01a")); ok || err != nil {
		t.Fatalf("the refused batch's put is stored (%v, %v)", ok, err)
	}

	plain, err := OpenRocksDB(t.TempDir(), RocksOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if err := plain.Write(&b, WriteOptions{}); err != nil {
		t.Fatalf("the same batch on a store without hints: %v", err)
	}
}
