package shard

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"runtime"
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

// TestWBLayerOffHeap checks that the layer's entry bytes are not on the Go
// heap (where the garbage collector's headroom doubled them in peak RSS),
// that its values survive a reset's release of extra chunks, and that
// release returns the chunks.
func TestWBLayerOffHeap(t *testing.T) {
	if !osMapped {
		t.Skip("no memory mapping on this system: the layer's chunks are on the heap")
	}
	w := newWBLayer()
	val := []byte(strings.Repeat("v", 60<<10))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range 128 { // 7.5 MiB of values: 32 chunks
		w.put(fmt.Appendf(nil, "k%04d", i), val, false)
	}
	w.mergeAdded()
	runtime.GC()
	runtime.ReadMemStats(&after)
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 2<<20 {
		t.Fatalf("the Go heap grew by %d bytes for 7.5 MiB of layer entries: the chunks are on the heap", grew)
	}
	if len(w.chunks) < 8 {
		t.Fatalf("%d chunks for 7.5 MiB", len(w.chunks))
	}
	w.reset() // releases all but 4 chunks
	if len(w.chunks) != 4 {
		t.Fatalf("reset kept %d chunks, want 4", len(w.chunks))
	}
	for i := range 10 {
		w.put(fmt.Appendf(nil, "k%04d", i), fmt.Appendf(nil, "short %d", i), false)
	}
	w.mergeAdded()
	for i := range 10 {
		v, deleted, ok := w.get(fmt.Appendf(nil, "k%04d", i))
		if !ok || deleted || string(v) != fmt.Sprintf("short %d", i) {
			t.Fatalf("after reset: get(k%04d) = %q, %v, %v", i, v, deleted, ok)
		}
	}
	w.release()
	if len(w.chunks) != 0 || !w.empty() {
		t.Fatalf("release kept %d chunks, %d keys", len(w.chunks), len(w.index))
	}
}
