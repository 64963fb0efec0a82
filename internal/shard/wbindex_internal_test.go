package shard

import (
	"fmt"
	"testing"
)

// TestWBIndexCollisions fills an index with keys whose hashes are forced to
// three values (one at the table's last slot, so probes wrap around), past
// several growths, and checks that every key is found with its own ref,
// that absent keys with the same hashes are not, and that a reset empties
// the index and it fills again.
func TestWBIndexCollisions(t *testing.T) {
	w := newWBLayer()
	defer w.release()
	const n = 3000 // wbIndexMinSlots/2 is the first growth: three growths
	for i := range n {
		w.put(fmt.Appendf(nil, "k%05d", i), nil, false)
	}
	w.mergeAdded()
	hashes := [3]uint64{0, 1, ^uint64(0)}
	var x wbIndex
	defer x.release()
	fill := func() {
		t.Helper()
		for i, ref := range w.items {
			key := w.refKey(ref)
			h := hashes[i%3]
			slot, found := x.lookup(w, h, key)
			if found {
				t.Fatalf("%q found before it was inserted", key)
			}
			x.insert(slot, h, ref)
		}
		if x.n != n {
			t.Fatalf("%d keys indexed, want %d", x.n, n)
		}
		for i, ref := range w.items {
			key := w.refKey(ref)
			slot, found := x.lookup(w, hashes[i%3], key)
			if !found || x.ref(slot) != ref {
				t.Fatalf("%q: found %v, ref %x, want %x", key, found, x.ref(slot), ref)
			}
			if _, found := x.lookup(w, hashes[i%3], fmt.Appendf(nil, "absent%05d", i)); found {
				t.Fatalf("absent key %d found", i)
			}
		}
	}
	fill()
	x.reset()
	if x.n != 0 {
		t.Fatalf("%d keys after reset", x.n)
	}
	for i, ref := range w.items {
		if _, found := x.lookup(w, hashes[i%3], w.refKey(ref)); found {
			t.Fatalf("%q found after reset", w.refKey(ref))
		}
	}
	fill()
}

// TestWBIndexReplace checks that a replaced entry (a value longer than its
// room moves to a new entry) is what the index then finds.
func TestWBIndexReplace(t *testing.T) {
	w := newWBLayer()
	defer w.release()
	for i := range 100 {
		w.put(fmt.Appendf(nil, "k%03d", i), []byte("short"), false)
	}
	w.mergeAdded()
	for i := 0; i < 100; i += 2 {
		w.put(fmt.Appendf(nil, "k%03d", i), fmt.Appendf(nil, "a longer value than before %d", i), false)
	}
	w.mergeAdded()
	for i := range 100 {
		want := "short"
		if i%2 == 0 {
			want = fmt.Sprintf("a longer value than before %d", i)
		}
		if v, deleted, ok := w.get(fmt.Appendf(nil, "k%03d", i)); !ok || deleted || string(v) != want {
			t.Fatalf("k%03d = %q, %v, %v; want %q", i, v, deleted, ok, want)
		}
	}
	if w.keys() != 100 || len(w.items) != 100 {
		t.Fatalf("%d keys, %d items, want 100", w.keys(), len(w.items))
	}
}
