// Package kvtest is the conformance suite every kv.Store backend must pass.
// The shard and its staging layer are written against these semantics only,
// so a backend that passes can replace another without touching state code.
package kvtest

import (
	"bytes"
	"fmt"
	"os"
	"slices"
	"testing"

	"github.com/kstate/kstate/internal/kv"
)

// Opener opens (or reopens) the store kept in dir; it fails t on error.
type Opener func(t *testing.T, dir string) kv.Store

// RunConformance runs the suite against the backend opened by open.
//
// A backend is treated as persistent when, after a write and Close, it left
// files in its directory; persistent backends must then also keep data
// across Close and reopen, and produce openable checkpoints. In-memory
// backends (which ignore dir) skip those subtests.
func RunConformance(t *testing.T, open func(t *testing.T, dir string) kv.Store) {
	o := Opener(open)
	persistent := detectPersistent(t, o)
	t.Logf("backend persistent: %v", persistent)

	t.Run("GetPutDelete", func(t *testing.T) { testGetPutDelete(t, o) })
	t.Run("EmptyValue", func(t *testing.T) { testEmptyValue(t, o) })
	t.Run("Aliasing", func(t *testing.T) { testAliasing(t, o) })
	t.Run("BatchOrder", func(t *testing.T) { testBatchOrder(t, o) })
	t.Run("DeleteRange", func(t *testing.T) { testDeleteRange(t, o) })
	t.Run("DeleteRangeOpenEnd", func(t *testing.T) { testDeleteRangeOpenEnd(t, o) })
	t.Run("IterBounds", func(t *testing.T) { testIterBounds(t, o) })
	t.Run("SetBounds", func(t *testing.T) { testSetBounds(t, o) })
	t.Run("IterEdges", func(t *testing.T) { testIterEdges(t, o) })
	t.Run("BoundsCopied", func(t *testing.T) { testBoundsCopied(t, o) })
	t.Run("BinaryKeys", func(t *testing.T) { testBinaryKeys(t, o) })
	t.Run("WriteOptions", func(t *testing.T) { testWriteOptions(t, o) })
	t.Run("Closed", func(t *testing.T) { testClosed(t, o) })
	t.Run("Concurrent", func(t *testing.T) { testConcurrent(t, o) })
	t.Run("CloseWhileReading", func(t *testing.T) { testCloseWhileReading(t, o) })
	t.Run("Model", func(t *testing.T) { testModel(t, o) })
	t.Run("Reopen", func(t *testing.T) {
		if !persistent {
			t.Skip("in-memory backend")
		}
		testReopen(t, o)
	})
	t.Run("Checkpoint", func(t *testing.T) {
		if !persistent {
			t.Skip("in-memory backend")
		}
		testCheckpoint(t, o)
	})
}

func detectPersistent(t *testing.T, open Opener) bool {
	t.Helper()
	dir := t.TempDir()
	s := open(t, dir)
	put(t, s, "probe", "1")
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	return len(ents) > 0
}

// --- helpers ---

func write(t *testing.T, s kv.Store, o kv.WriteOptions, fill func(b *kv.Batch)) {
	t.Helper()
	var b kv.Batch
	fill(&b)
	if err := s.Write(&b, o); err != nil {
		t.Fatalf("Write: %v", err)
	}
}

func put(t *testing.T, s kv.Store, kvs ...string) {
	t.Helper()
	write(t, s, kv.WriteOptions{}, func(b *kv.Batch) {
		for i := 0; i+1 < len(kvs); i += 2 {
			b.Put([]byte(kvs[i]), []byte(kvs[i+1]))
		}
	})
}

func get(t *testing.T, s kv.Store, key string) (string, bool) {
	t.Helper()
	v, ok, err := s.Get([]byte(key))
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	if !ok && v != nil {
		t.Fatalf("Get(%q) = %q, false: absent key must return a nil value", key, v)
	}
	return string(v), ok
}

func wantGet(t *testing.T, s kv.Store, key, want string, wantOK bool) {
	t.Helper()
	v, ok := get(t, s, key)
	if ok != wantOK || v != want {
		t.Fatalf("Get(%q) = %q, %v; want %q, %v", key, v, ok, want, wantOK)
	}
}

type pair struct{ k, v string }

// scan returns the iterator's entries forward (First/Next) and checks that a
// backward walk (Last/Prev) yields the same entries reversed.
func scan(t *testing.T, s kv.Store, lower, upper []byte) []pair {
	t.Helper()
	it := s.NewIter(lower, upper)
	defer closeIter(t, it)
	var fwd, bwd []pair
	for ok := it.First(); ok; ok = it.Next() {
		if !it.Valid() {
			t.Fatal("positioning returned true but Valid is false")
		}
		fwd = append(fwd, pair{string(it.Key()), string(it.Value())})
	}
	if it.Valid() {
		t.Fatal("Valid after Next returned false")
	}
	for ok := it.Last(); ok; ok = it.Prev() {
		bwd = append(bwd, pair{string(it.Key()), string(it.Value())})
	}
	if err := it.Error(); err != nil {
		t.Fatalf("iterator error: %v", err)
	}
	slices.Reverse(bwd)
	if !slices.Equal(fwd, bwd) {
		t.Fatalf("iter [%q, %q): forward %q, backward (reversed) %q", lower, upper, fwd, bwd)
	}
	for i := 1; i < len(fwd); i++ {
		if fwd[i-1].k >= fwd[i].k {
			t.Fatalf("iter not strictly ascending: %q then %q", fwd[i-1].k, fwd[i].k)
		}
	}
	return fwd
}

func keysOf(ps []pair) []string {
	ks := make([]string, len(ps))
	for i, p := range ps {
		ks[i] = p.k
	}
	return ks
}

func closeIter(t *testing.T, it kv.Iterator) {
	t.Helper()
	if err := it.Close(); err != nil {
		t.Fatalf("iterator Close: %v", err)
	}
}

func b(s string) []byte { return []byte(s) }

func rangeName(lower, upper []byte) string {
	q := func(x []byte) string {
		if x == nil {
			return "nil"
		}
		return fmt.Sprintf("%q", x)
	}
	return "[" + q(lower) + "," + q(upper) + ")"
}

// --- subtests ---

func testGetPutDelete(t *testing.T, open Opener) {
	s := open(t, t.TempDir())
	defer s.Close()
	wantGet(t, s, "a", "", false)
	put(t, s, "a", "1")
	wantGet(t, s, "a", "1", true)
	put(t, s, "a", "2")
	wantGet(t, s, "a", "2", true)
	write(t, s, kv.WriteOptions{}, func(b *kv.Batch) { b.Delete([]byte("a")) })
	wantGet(t, s, "a", "", false)
	// Deleting an absent key is a no-op, not an error.
	write(t, s, kv.WriteOptions{}, func(b *kv.Batch) { b.Delete([]byte("nope")) })
	// Empty and nil batches are no-ops.
	if err := s.Write(&kv.Batch{}, kv.WriteOptions{}); err != nil {
		t.Fatalf("empty batch: %v", err)
	}
	if got := scan(t, s, nil, nil); len(got) != 0 {
		t.Fatalf("store not empty: %q", got)
	}
}

func testEmptyValue(t *testing.T, open Opener) {
	s := open(t, t.TempDir())
	defer s.Close()
	write(t, s, kv.WriteOptions{}, func(bt *kv.Batch) {
		bt.Put(b("empty"), []byte{})
		bt.Put(b("nil"), nil) // a nil value is an empty value, never a delete
	})
	for _, k := range []string{"empty", "nil"} {
		v, ok, err := s.Get(b(k))
		if err != nil || !ok || len(v) != 0 {
			t.Fatalf("Get(%q) = %q, %v, %v; want empty, true, nil", k, v, ok, err)
		}
	}
	wantGet(t, s, "absent", "", false)
	if got := keysOf(scan(t, s, nil, nil)); !slices.Equal(got, []string{"empty", "nil"}) {
		t.Fatalf("iteration = %q; empty values must be iterated", got)
	}
}

func testAliasing(t *testing.T, open Opener) {
	s := open(t, t.TempDir())
	defer s.Close()
	k, v := b("key"), b("value")
	write(t, s, kv.WriteOptions{}, func(bt *kv.Batch) { bt.Put(k, v) })
	// After Write returns the store owns its copy.
	k[0], v[0] = 'X', 'X'
	wantGet(t, s, "key", "value", true)
	got, _, _ := s.Get(b("key"))
	got[0] = 'Y' // Get returns a copy
	wantGet(t, s, "key", "value", true)
}

func testBatchOrder(t *testing.T, open Opener) {
	cases := []struct {
		name   string
		fill   func(*kv.Batch)
		want   string
		wantOK bool
	}{
		{"put then delete", func(bt *kv.Batch) { bt.Put(b("k"), b("1")); bt.Delete(b("k")) }, "", false},
		{"delete then put", func(bt *kv.Batch) { bt.Delete(b("k")); bt.Put(b("k"), b("2")) }, "2", true},
		{"put twice", func(bt *kv.Batch) { bt.Put(b("k"), b("1")); bt.Put(b("k"), b("3")) }, "3", true},
		{"put then range delete", func(bt *kv.Batch) { bt.Put(b("k"), b("1")); bt.DeleteRange(b("a"), b("z")) }, "", false},
		{"range delete then put", func(bt *kv.Batch) { bt.DeleteRange(b("a"), b("z")); bt.Put(b("k"), b("4")) }, "4", true},
		{"delete put delete", func(bt *kv.Batch) { bt.Delete(b("k")); bt.Put(b("k"), b("1")); bt.Delete(b("k")) }, "", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := open(t, t.TempDir())
			defer s.Close()
			put(t, s, "k", "old", "j", "other")
			write(t, s, kv.WriteOptions{}, tc.fill)
			wantGet(t, s, "k", tc.want, tc.wantOK)
		})
	}
}

func testDeleteRange(t *testing.T, open Opener) {
	all := []string{"a", "b", "b\x00", "c", "d", "e"}
	cases := []struct {
		start, end string
		want       []string
	}{
		{"b", "d", []string{"a", "d", "e"}},
		{"b\x00", "c\x00", []string{"a", "b", "d", "e"}},
		{"", "c", []string{"c", "d", "e"}},
		{"0", "z", nil},
		{"c", "c", all}, // empty range
		{"d", "b", all}, // inverted range deletes nothing
		{"x", "z", all}, // no keys inside
		{"e", "e\x00", []string{"a", "b", "b\x00", "c", "d"}},
	}
	for _, tc := range cases {
		t.Run(rangeName(b(tc.start), b(tc.end)), func(t *testing.T) {
			s := open(t, t.TempDir())
			defer s.Close()
			for _, k := range all {
				put(t, s, k, "v")
			}
			write(t, s, kv.WriteOptions{}, func(bt *kv.Batch) { bt.DeleteRange(b(tc.start), b(tc.end)) })
			if got := keysOf(scan(t, s, nil, nil)); !slices.Equal(got, tc.want) {
				t.Fatalf("after DeleteRange: %q, want %q", got, tc.want)
			}
			for _, k := range all {
				_, ok := get(t, s, k)
				if ok != slices.Contains(tc.want, k) {
					t.Fatalf("Get(%q) ok=%v disagrees with iteration %q", k, ok, tc.want)
				}
			}
		})
	}
}

// testDeleteRangeOpenEnd: a nil End deletes to the end of the key space
// (like a nil iterator bound), including keys put earlier in the same batch
// beyond every stored key. Shard.Wipe relies on DeleteRange(nil, nil).
func testDeleteRangeOpenEnd(t *testing.T, open Opener) {
	s := open(t, t.TempDir())
	defer s.Close()
	put(t, s, "a", "v", "b", "v", "c", "v", "\xff\xff\xff", "v")
	write(t, s, kv.WriteOptions{}, func(bt *kv.Batch) {
		bt.Put(b("\xff\xff\xff\xff"), b("beyond every stored key"))
		bt.DeleteRange(b("b"), nil)
		bt.Put(b("z"), b("after"))
	})
	if got := keysOf(scan(t, s, nil, nil)); !slices.Equal(got, []string{"a", "z"}) {
		t.Fatalf("after DeleteRange(b, nil): %q, want [a z]", got)
	}
	write(t, s, kv.WriteOptions{}, func(bt *kv.Batch) { bt.DeleteRange(nil, nil) })
	if got := scan(t, s, nil, nil); len(got) != 0 {
		t.Fatalf("after DeleteRange(nil, nil): %q", got)
	}
}

func testIterBounds(t *testing.T, open Opener) {
	s := open(t, t.TempDir())
	defer s.Close()
	all := []string{"a", "b", "c", "d", "e"}
	for _, k := range all {
		put(t, s, k, "v"+k)
	}
	cases := []struct {
		lower, upper []byte
		want         []string
	}{
		{nil, nil, all},
		{b("b"), b("d"), []string{"b", "c"}},
		{b("b\x00"), b("d\x00"), []string{"c", "d"}},
		{[]byte{}, nil, all}, // empty lower = unbounded
		{nil, b("a"), nil},
		{nil, b("a\x00"), []string{"a"}},
		{b("e\x00"), nil, nil},
		{b("e"), nil, []string{"e"}},
		{b("c"), b("c"), nil},
		{b("d"), b("b"), nil}, // inverted: empty
		{nil, []byte{}, nil},  // empty (non-nil) upper: nothing sorts below ""
		{b("0"), b("z"), all},
	}
	probes := [][]byte{nil, b("0"), b("a"), b("a\x00"), b("b"), b("c"), b("c\x00"), b("d"), b("e"), b("e\x00"), b("z")}
	for _, tc := range cases {
		t.Run(rangeName(tc.lower, tc.upper), func(t *testing.T) {
			if got := keysOf(scan(t, s, tc.lower, tc.upper)); !slices.Equal(got, tc.want) {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
			it := s.NewIter(tc.lower, tc.upper)
			defer closeIter(t, it)
			for _, p := range probes {
				checkSeek(t, it, p, tc.want)
			}
		})
	}
}

// testSetBounds walks the ranges of testIterBounds with ONE iterator
// re-bounded between them (nil bounds appearing and disappearing, empty
// and inverted ranges in between), forward, backward and by seeks, and
// checks that re-bounding keeps the iterator's view when only the bounds'
// values change.
func testSetBounds(t *testing.T, open Opener) {
	s := open(t, t.TempDir())
	defer s.Close()
	all := []string{"a", "b", "c", "d", "e"}
	for _, k := range all {
		put(t, s, k, "v"+k)
	}
	cases := []struct {
		lower, upper []byte
		want         []string
	}{
		{b("b"), b("d"), []string{"b", "c"}},
		{b("b\x00"), b("d\x00"), []string{"c", "d"}},
		{nil, b("a"), nil},
		{b("c"), b("c"), nil},
		{b("d"), b("b"), nil},
		{nil, []byte{}, nil},
		{nil, b("a\x00"), []string{"a"}},
		{b("e"), nil, []string{"e"}},
		{nil, nil, all},
		{b("e\x00"), nil, nil},
		{[]byte{}, b("c"), []string{"a", "b"}},
		{b("0"), b("z"), all},
	}
	probes := [][]byte{nil, b("0"), b("a"), b("a\x00"), b("b"), b("c"), b("c\x00"), b("d"), b("e"), b("e\x00"), b("z")}
	it := s.NewIter(b("x"), b("y"))
	defer closeIter(t, it)
	lower, upper := make([]byte, 0, 8), make([]byte, 0, 8)
	for round := range 2 {
		for _, tc := range cases {
			// The iterator must copy the bounds: the caller's buffers are
			// reused for the next range.
			lower, upper = lower[:0], upper[:0]
			l, u := tc.lower, tc.upper
			if l != nil {
				lower = append(lower, l...)
				l = lower
			}
			if u != nil {
				upper = append(upper, u...)
				u = upper
			}
			it.SetBounds(l, u)
			if it.Valid() {
				t.Fatalf("round %d %s: Valid right after SetBounds", round, rangeName(tc.lower, tc.upper))
			}
			var fwd, bwd []string
			for ok := it.First(); ok; ok = it.Next() {
				fwd = append(fwd, string(it.Key()))
			}
			for ok := it.Last(); ok; ok = it.Prev() {
				bwd = append(bwd, string(it.Key()))
			}
			slices.Reverse(bwd)
			if !slices.Equal(fwd, tc.want) || !slices.Equal(bwd, tc.want) {
				t.Fatalf("round %d %s: forward %q, backward %q, want %q", round, rangeName(tc.lower, tc.upper), fwd, bwd, tc.want)
			}
			for _, p := range probes {
				checkSeek(t, it, p, tc.want)
			}
			clear(lower[:cap(lower)])
			clear(upper[:cap(upper)])
		}
	}
	if err := it.Error(); err != nil {
		t.Fatal(err)
	}

	// Changing the bounds' values keeps the view: a key written after the
	// iterator was created stays invisible to it (the memory store has no
	// snapshots: it sees every write).
	if !detectPersistent(t, open) {
		return
	}
	it2 := s.NewIter(b("a"), b("c"))
	defer closeIter(t, it2)
	put(t, s, "bb", "new")
	it2.SetBounds(b("b"), b("d"))
	var got []string
	for ok := it2.First(); ok; ok = it2.Next() {
		got = append(got, string(it2.Key()))
	}
	if want := []string{"b", "c"}; !slices.Equal(got, want) {
		t.Fatalf("after a write and SetBounds: %q, want %q (the view as of NewIter)", got, want)
	}
}

// checkSeek checks SeekGE and SeekLT at probe against the sorted keys the
// iterator's range holds, including probes outside the bounds (which must
// clamp, never escape the range).
func checkSeek(t *testing.T, it kv.Iterator, probe []byte, keys []string) {
	t.Helper()
	ge, lt := "", ""
	geOK, ltOK := false, false
	for _, k := range keys {
		if !geOK && k >= string(probe) {
			ge, geOK = k, true
		}
		if k < string(probe) {
			lt, ltOK = k, true
		}
	}
	if ok := it.SeekGE(probe); ok != geOK || ok != it.Valid() || (ok && string(it.Key()) != ge) {
		t.Fatalf("SeekGE(%q) = %v %q, want %v %q (keys %q)", probe, ok, it.Key(), geOK, ge, keys)
	}
	if ok := it.SeekLT(probe); ok != ltOK || ok != it.Valid() || (ok && string(it.Key()) != lt) {
		t.Fatalf("SeekLT(%q) = %v %q, want %v %q (keys %q)", probe, ok, it.Key(), ltOK, lt, keys)
	}
}

func testIterEdges(t *testing.T, open Opener) {
	s := open(t, t.TempDir())
	defer s.Close()

	it := s.NewIter(nil, nil)
	if it.First() || it.Last() || it.SeekGE(b("a")) || it.SeekLT(b("z")) || it.Valid() {
		t.Fatal("positioning on an empty store must return false")
	}
	closeIter(t, it)

	put(t, s, "a", "1", "b", "2", "c", "3")
	it = s.NewIter(nil, nil)
	defer closeIter(t, it)
	step := func(name string, ok bool, wantOK bool, wantKey string) {
		t.Helper()
		if ok != wantOK || it.Valid() != wantOK || (ok && string(it.Key()) != wantKey) {
			t.Fatalf("%s = %v (valid %v) %q; want %v %q", name, ok, it.Valid(), it.Key(), wantOK, wantKey)
		}
	}
	step("First", it.First(), true, "a")
	if string(it.Value()) != "1" {
		t.Fatalf("Value at a = %q", it.Value())
	}
	step("Prev before first", it.Prev(), false, "")
	step("Last", it.Last(), true, "c")
	step("Next past last", it.Next(), false, "")
	step("SeekGE exact", it.SeekGE(b("b")), true, "b")
	step("Prev after SeekGE", it.Prev(), true, "a")
	step("Next after Prev", it.Next(), true, "b")
	step("Next", it.Next(), true, "c")
	step("Prev after Next", it.Prev(), true, "b")
	step("SeekLT exact is strict", it.SeekLT(b("b")), true, "a")
	step("Next after SeekLT", it.Next(), true, "b")
	step("SeekLT first", it.SeekLT(b("a")), false, "")
	step("SeekGE past end", it.SeekGE(b("c\x00")), false, "")
	step("SeekLT past end", it.SeekLT(b("zzz")), true, "c")
	step("SeekGE between", it.SeekGE(b("a\x00")), true, "b")
	if err := it.Error(); err != nil {
		t.Fatalf("Error: %v", err)
	}
}

func testBoundsCopied(t *testing.T, open Opener) {
	s := open(t, t.TempDir())
	defer s.Close()
	put(t, s, "a", "1", "b", "2", "c", "3", "d", "4")
	lower, upper := b("b"), b("d")
	it := s.NewIter(lower, upper)
	defer closeIter(t, it)
	// The caller reuses its buffers at once; the iterator must not notice.
	lower[0], upper[0] = 'a', 'z'
	var got []string
	for ok := it.First(); ok; ok = it.Next() {
		got = append(got, string(it.Key()))
	}
	if !slices.Equal(got, []string{"b", "c"}) {
		t.Fatalf("iteration after mutating the bound slices = %q, want [b c]", got)
	}
}

func testBinaryKeys(t *testing.T, open Opener) {
	s := open(t, t.TempDir())
	defer s.Close()
	keys := [][]byte{
		{0xff, 0xff, 0xff}, {0x00}, {0x7f}, {0xff, 0x00}, {0x00, 0x00}, {0x80},
		{0xff}, {0x00, 0xff}, {0x01}, {0xff, 0xff}, {0x00, 0x00, 0x00},
	}
	big := bytes.Repeat([]byte{0x00, 0xff, 0x01}, 1<<18) // 768 KiB with NULs
	write(t, s, kv.WriteOptions{}, func(bt *kv.Batch) {
		for i, k := range keys {
			bt.Put(k, append([]byte{0x00, byte(i), 0xff}, k...))
		}
		bt.Put([]byte{0x42}, big)
	})
	sorted := append(slices.Clone(keys), []byte{0x42})
	slices.SortFunc(sorted, bytes.Compare)
	var want []string
	for _, k := range sorted {
		want = append(want, string(k))
	}
	if got := keysOf(scan(t, s, nil, nil)); !slices.Equal(got, want) {
		t.Fatalf("binary keys out of order:\n got %x\nwant %x", got, want)
	}
	for i, k := range keys {
		v, ok, err := s.Get(k)
		if err != nil || !ok || !bytes.Equal(v, append([]byte{0x00, byte(i), 0xff}, k...)) {
			t.Fatalf("Get(%x) = %x, %v, %v", k, v, ok, err)
		}
	}
	if v, ok, err := s.Get([]byte{0x42}); err != nil || !ok || !bytes.Equal(v, big) {
		t.Fatalf("big value: ok=%v err=%v len=%d", ok, err, len(v))
	}
	if _, ok, _ := s.Get([]byte{0x00, 0x00, 0x00, 0x00}); ok {
		t.Fatal("prefix-extended key must not match")
	}
	// Bounds made of 0x00/0xff bytes.
	got := keysOf(scan(t, s, []byte{0x00, 0x00}, []byte{0xff}))
	wantRange := []string{"\x00\x00", "\x00\x00\x00", "\x00\xff", "\x01", "\x42", "\x7f", "\x80"}
	if !slices.Equal(got, wantRange) {
		t.Fatalf("range [00 00, ff) = %x, want %x", got, wantRange)
	}
	it := s.NewIter([]byte{0xff}, nil)
	defer closeIter(t, it)
	for _, p := range [][]byte{nil, {0x00}, {0xff}, {0xff, 0x00}, {0xff, 0xff, 0xff, 0x00}} {
		checkSeek(t, it, p, []string{"\xff", "\xff\x00", "\xff\xff", "\xff\xff\xff"})
	}
}

func testWriteOptions(t *testing.T, open Opener) {
	s := open(t, t.TempDir())
	defer s.Close()
	opts := []kv.WriteOptions{{}, {Sync: true}, {DisableWAL: true}, {}, {DisableWAL: true}, {Sync: true}}
	for i, o := range opts {
		write(t, s, o, func(bt *kv.Batch) { bt.Put([]byte{byte('a' + i)}, []byte{byte(i)}) })
	}
	if got := scan(t, s, nil, nil); len(got) != len(opts) {
		t.Fatalf("after writes with every option: %q", got)
	}
}
