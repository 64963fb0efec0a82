//go:build cgo && !kstate_nocgo

package kv_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/kstate/kstate/internal/kv"
)

// TestRocksGetSorted checks MultiGetter against Get on one store: keys
// present and absent, in the memtable and in tables, an empty value and
// values larger than the first buffer (the retry).
func TestRocksGetSorted(t *testing.T) {
	s := rocksOpener(kv.RocksOptions{})(t, t.TempDir())
	mg, ok := s.(kv.MultiGetter)
	if !ok {
		t.Fatal("the RocksDB store is not a kv.MultiGetter")
	}
	rng := rand.New(rand.NewPCG(1, 2))
	key := func(i int) []byte { return fmt.Appendf(nil, "k%05d", i) }
	const n = 3000
	var b kv.Batch
	for i := 0; i < n; i += 2 { // even keys present
		var v []byte
		switch {
		case i == 10:
			v = []byte{} // empty
		case i%500 == 0:
			v = make([]byte, 100<<10) // over the first 64 KiB buffer
		default:
			v = make([]byte, 1+rng.IntN(300))
		}
		for j := range v {
			v[j] = byte(rng.Uint32())
		}
		b.Put(key(i), v)
		if i == n/2 { // the first half in a table, the rest in the memtable
			if err := s.Write(&b, kv.WriteOptions{}); err != nil {
				t.Fatal(err)
			}
			b.Reset()
			if err := kv.FlushForTest(s); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := s.Write(&b, kv.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, step := range []int{1, 3, 7} {
		var ks [][]byte
		for i := 0; i < n; i += step {
			ks = append(ks, key(i))
		}
		seen := 0
		err := mg.GetSorted(ks, 1<<30, func(i int, v []byte, ok bool) {
			if i != seen {
				t.Fatalf("step %d: key %d passed after %d", step, i, seen)
			}
			seen++
			want, wantOK, err := s.Get(ks[i])
			if err != nil {
				t.Fatal(err)
			}
			if ok != wantOK || !bytes.Equal(v, want) {
				t.Fatalf("step %d: %s: GetSorted = %d bytes, %v; Get = %d bytes, %v", step, ks[i], len(v), ok, len(want), wantOK)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		if seen != len(ks) {
			t.Fatalf("step %d: %d of %d keys passed", step, seen, len(ks))
		}
	}
	if err := mg.GetSorted(nil, 1<<30, func(int, []byte, bool) { t.Fatal("called for no key") }); err != nil {
		t.Fatal(err)
	}
	// A limit: the values passed stay within it, in key order, and the
	// keys skipped are those whose values would not fit.
	var ks [][]byte
	for i := range n {
		ks = append(ks, key(i))
	}
	const limit = 150 << 10
	total, last := 0, -1
	err := mg.GetSorted(ks, limit, func(i int, v []byte, ok bool) {
		if i <= last {
			t.Fatalf("limit: key %d passed after %d", i, last)
		}
		for j := last + 1; j < i; j++ { // skipped: present, and too large
			w, wok, _ := s.Get(ks[j])
			if !wok || total+len(w) <= limit {
				t.Fatalf("limit: %s skipped (present %v, %d bytes, %d passed)", ks[j], wok, len(w), total)
			}
		}
		last = i
		total += len(v)
		want, wantOK, _ := s.Get(ks[i])
		if ok != wantOK || !bytes.Equal(v, want) {
			t.Fatalf("limit: %s: %d bytes, %v; Get = %d bytes, %v", ks[i], len(v), ok, len(want), wantOK)
		}
	})
	if err != nil || total > limit || last < n/2 {
		t.Fatalf("limit %d: err %v, %d bytes passed, last key %d", limit, err, total, last)
	}
	s.Close()
	if err := mg.GetSorted([][]byte{key(0)}, 1<<30, func(int, []byte, bool) {}); !errors.Is(err, kv.ErrClosed) {
		t.Fatalf("GetSorted after Close: %v, want ErrClosed", err)
	}
}
