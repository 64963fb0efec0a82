package shard

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// TestWBLayerMergeAdded checks the layer's sorted items against the keys
// and values put, over commits of very different sizes into layers of very
// different sizes: a few keys into thousands (the caught-up input), as
// many as the layer holds (a backlog), keys before, between and after the
// layer's, values replaced in place and by a new entry (a longer value),
// and again after a reset.
func TestWBLayerMergeAdded(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	w := newWBLayer()
	want := map[string]string{}
	check := func(step string) {
		t.Helper()
		if len(w.items) != len(want) || len(w.index) != len(want) {
			t.Fatalf("%s: %d items, %d indexed, want %d keys", step, len(w.items), len(w.index), len(want))
		}
		if !slices.IsSortedFunc(w.items, w.cmpRefs) {
			t.Fatalf("%s: items not sorted", step)
		}
		for i, ref := range w.items {
			k := string(w.refKey(ref))
			v, ok := want[k]
			if !ok {
				t.Fatalf("%s: item %d, %q, was never put", step, i, k)
			}
			if w.index[k] != ref {
				t.Fatalf("%s: item %q has ref %x, the index %x", step, k, ref, w.index[k])
			}
			if got, _, _ := w.get([]byte(k)); string(got) != v {
				t.Fatalf("%s: %q = %q, want %q", step, k, got, v)
			}
		}
	}
	for round := range 16 {
		if round == 8 {
			w.reset()
			clear(want)
			check("reset")
		}
		for commit := range 30 {
			n := 1 + rng.IntN(5) // mostly small commits
			if commit%10 == 0 {
				n = 1 + rng.IntN(2000) // now and then a large one
			}
			batch := map[string]bool{}
			for range n {
				batch[fmt.Sprintf("\x01k%06d", rng.IntN(200_000))] = true
			}
			for _, k := range slices.Sorted(maps.Keys(batch)) {
				v := "v" + strings.Repeat("x", rng.IntN(24))
				w.put([]byte(k), []byte(v), false)
				want[k] = v
			}
			w.mergeAdded()
			if sorted := slices.IsSortedFunc(w.items, w.cmpRefs); !sorted || len(w.items) != len(want) {
				t.Fatalf("round %d commit %d (%d keys): %d items, want %d, sorted %v", round, commit, n, len(w.items), len(want), sorted)
			}
			if commit%5 == 4 {
				check(fmt.Sprintf("round %d commit %d", round, commit))
			}
		}
	}
}

// TestWBLayerGallop checks gallop against a linear count at every place,
// in layers of every length up to 40.
func TestWBLayerGallop(t *testing.T) {
	for n := range 41 {
		w := newWBLayer()
		for i := range n {
			w.put(fmt.Appendf(nil, "k%03d", 2*i+1), nil, false) // odd keys; probe even and odd
		}
		w.mergeAdded()
		for p := range 2*n + 3 {
			key := fmt.Appendf(nil, "k%03d", p)
			want := 0
			for _, ref := range w.items {
				if string(w.refKey(ref)) < string(key) {
					want++
				}
			}
			if got := w.gallop(w.items, key); got != want {
				t.Fatalf("n=%d: gallop(%q) = %d, want %d", n, key, got, want)
			}
		}
	}
}
