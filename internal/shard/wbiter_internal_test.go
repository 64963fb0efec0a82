package shard

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/kstate/kstate/internal/kv"
)

// TestWBIterModel compares the write-behind layer merged over a store
// (wbIter) with a plain map, over random stores and layers: full walks in
// both directions and seeks to random keys followed by steps.
func TestWBIterModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	key := func() []byte { return fmt.Appendf(nil, "\x01k%02d", rng.IntN(40)) }
	for round := range 300 {
		store := kv.NewMemory()
		want := map[string]string{}
		var b kv.Batch
		for range rng.IntN(30) {
			k := key()
			v := fmt.Sprint("s", round, len(want))
			b.Put(k, []byte(v))
			want[string(k)] = v
		}
		if b.Len() > 0 {
			if err := store.Write(&b, kv.WriteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		w := newWBLayer()
		for range 1 + rng.IntN(3) { // commits: each puts sorted, distinct keys
			batch := map[string]bool{}
			for range rng.IntN(20) {
				batch[string(key())] = true
			}
			for _, k := range slices.Sorted(maps.Keys(batch)) {
				if rng.IntN(3) == 0 {
					w.put([]byte(k), nil, true)
					delete(want, k)
				} else {
					v := fmt.Sprint("l", round, rng.IntN(1000), string(make([]byte, rng.IntN(20))))
					w.put([]byte(k), []byte(v), false)
					want[k] = v
				}
			}
			w.mergeAdded()
		}
		sorted := slices.Sorted(maps.Keys(want))
		it := newWBIter(store.NewIter(nil, nil), w)
		var got []string
		for ok := it.First(); ok; ok = it.Next() {
			if string(it.Value()) != want[string(it.Key())] {
				t.Fatalf("round %d: %q = %q, want %q", round, it.Key(), it.Value(), want[string(it.Key())])
			}
			got = append(got, string(it.Key()))
		}
		if !slices.Equal(got, sorted) {
			t.Fatalf("round %d: forward %q, want %q", round, got, sorted)
		}
		got = got[:0]
		for ok := it.Last(); ok; ok = it.Prev() {
			got = append(got, string(it.Key()))
		}
		if !slices.Equal(reversed(got), sorted) {
			t.Fatalf("round %d: backward %q, want the reverse of %q", round, got, sorted)
		}
		for range 20 {
			k := key()
			i, _ := slices.BinarySearch(sorted, string(k))
			ok := it.SeekGE(k)
			if ok != (i < len(sorted)) || (ok && string(it.Key()) != sorted[i]) {
				t.Fatalf("round %d: SeekGE(%q) = %v %q, want %v", round, k, ok, it.Key(), sorted[i:])
			}
			if ok && i+1 < len(sorted) && (!it.Next() || string(it.Key()) != sorted[i+1]) {
				t.Fatalf("round %d: Next after SeekGE(%q) = %q, want %q", round, k, it.Key(), sorted[i+1])
			}
			ok = it.SeekLT(k)
			if ok != (i > 0) || (ok && string(it.Key()) != sorted[i-1]) {
				t.Fatalf("round %d: SeekLT(%q) = %v %q, want %v", round, k, ok, it.Key(), sorted[:i])
			}
			if ok && i-2 >= 0 && (!it.Prev() || string(it.Key()) != sorted[i-2]) {
				t.Fatalf("round %d: Prev after SeekLT(%q) = %q, want %q", round, k, it.Key(), sorted[i-2])
			}
		}
		it.Close()
		store.Close()
	}
}

func reversed(s []string) []string {
	out := slices.Clone(s)
	slices.Reverse(out)
	return out
}
