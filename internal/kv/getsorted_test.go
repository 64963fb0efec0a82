package kv_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/kstate/kstate/internal/kv"
)

// getSortedKey is the key of entry i of fillForGetSorted's stores.
func getSortedKey(i int) []byte { return fmt.Appendf(nil, "k%05d", i) }

// fillForGetSorted writes the even keys below n to s: an empty value,
// values larger than 64 KiB (RocksDB's first buffer) and small random
// ones. After the first half, table writes the store's memtable to a
// table; the rest stays in the memtable, and then every twelfth key (from
// 4) is deleted: tombstones over keys in the table and in the memtable.
func fillForGetSorted(t *testing.T, s kv.Store, n int, table func() error) {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	var b kv.Batch
	write := func() {
		t.Helper()
		if err := s.Write(&b, kv.WriteOptions{}); err != nil {
			t.Fatal(err)
		}
		b.Reset()
	}
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
		b.Put(getSortedKey(i), v)
		if i == n/2 { // the first half in a table, the rest in the memtable
			write()
			if err := table(); err != nil {
				t.Fatal(err)
			}
		}
	}
	write()
	for i := 4; i < n; i += 12 {
		b.Delete(getSortedKey(i))
	}
	write()
}

// checkGetSorted checks s's MultiGetter against its Get on the keys of
// fillForGetSorted: every key, every third and every seventh; no key; a
// byte limit; after Close.
func checkGetSorted(t *testing.T, s kv.Store, n int) {
	t.Helper()
	mg, ok := s.(kv.MultiGetter)
	if !ok {
		t.Fatalf("%T is not a kv.MultiGetter", s)
	}
	for _, step := range []int{1, 3, 7} {
		var ks [][]byte
		for i := 0; i < n; i += step {
			ks = append(ks, getSortedKey(i))
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
		ks = append(ks, getSortedKey(i))
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
	if err := mg.GetSorted([][]byte{getSortedKey(0)}, 1<<30, func(int, []byte, bool) {}); !errors.Is(err, kv.ErrClosed) {
		t.Fatalf("GetSorted after Close: %v, want ErrClosed", err)
	}
}

// TestPebbleGetSorted checks the Pebble store's MultiGetter against Get,
// with the first half of the keys compacted to the bottom level (read
// with its bloom filters) and the rest in the memtable.
func TestPebbleGetSorted(t *testing.T) {
	s := pebbleOpener(kv.PebbleOptions{})(t, t.TempDir())
	const n = 3000
	fillForGetSorted(t, s, n, func() error { return kv.PebbleCompactForTest(s) })
	checkGetSorted(t, s, n)
}
