//go:build cgo && !kstate_nocgo

package kv

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/linxGnu/grocksdb"
)

// The single-crossing calls read grocksdb's C handles from the first field
// of its structs; a grocksdb upgrade that moves them must fail here, not
// crash at run time.
func TestRocksHandleLayout(t *testing.T) {
	for _, v := range []any{grocksdb.DB{}, grocksdb.ReadOptions{}, grocksdb.WriteOptions{}, grocksdb.Options{}} {
		typ := reflect.TypeOf(v)
		f := typ.Field(0)
		if f.Name != "c" || f.Offset != 0 || f.Type.Kind() != reflect.Pointer {
			t.Errorf("grocksdb.%s's first field is %s %v, want the C handle c *C.rocksdb_...", typ.Name(), f.Name, f.Type)
		}
	}
}

// randomOps returns a random batch over a small key space so that puts,
// deletes and range deletions overlap, with empty, small and large values
// (past the Get scratch buffer and past its retained size).
func randomOps(rng *rand.Rand, n int) []Op {
	key := func() []byte { return fmt.Appendf(nil, "k%03d", rng.IntN(200)) }
	ops := make([]Op, 0, n)
	for range n {
		switch r := rng.IntN(20); {
		case r < 13:
			var v []byte
			switch rng.IntN(10) {
			case 0: // empty
			case 1:
				v = bytes.Repeat([]byte{byte(rng.IntN(256))}, 4<<10+rng.IntN(100<<10))
			default:
				v = fmt.Appendf(nil, "v%d", rng.Uint64())
			}
			ops = append(ops, Op{Kind: OpPut, Key: key(), Value: v})
		case r < 18:
			ops = append(ops, Op{Kind: OpDelete, Key: key()})
		case r < 19:
			ops = append(ops, Op{Kind: OpDeleteRange, Key: key()}) // open-ended
		default:
			a, b := key(), key()
			ops = append(ops, Op{Kind: OpDeleteRange, Key: a, End: b}) // may be inverted: skipped
		}
	}
	return ops
}

// The batch serialized in Go is byte for byte the one RocksDB builds with
// WriteBatch::Put/Delete/DeleteRange.
func TestRocksBatchRepMatchesRocksDB(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var rep batchRep
	large := 0
	for i := range 200 {
		wb := grocksdb.NewWriteBatch()
		ops := randomOps(rng, 1+rng.IntN(50))
		size := batchRepHeader
		for i, op := range ops {
			if op.Kind == OpDeleteRange && op.End == nil {
				ops[i].End = []byte("zz")
			}
			size += repSize(ops[i], ops[i].End)
		}
		rep.reset(size)
		for _, op := range ops {
			switch op.Kind {
			case OpPut:
				wb.Put(op.Key, op.Value)
				rep.put(op.Key, op.Value)
			case OpDelete:
				wb.Delete(op.Key)
				rep.delete(op.Key)
			case OpDeleteRange:
				wb.DeleteRange(op.Key, op.End)
				rep.deleteRange(op.Key, op.End)
			}
		}
		want := append([]byte{}, wb.Data()...)
		wb.Destroy()
		if got := rep.bytes(); !bytes.Equal(got, want) {
			at := 0
			for at < min(len(got), len(want)) && got[at] == want[at] {
				at++
			}
			t.Fatalf("batch %d: Go rep (%d bytes) differs from RocksDB's (%d bytes) at byte %d", i, len(got), len(want), at)
		}
		// repSize is exact, and a large rep is built in its mapping, off
		// the Go heap, without growing out of it.
		if got := len(rep.bytes()); got != size {
			t.Fatalf("batch %d: rep of %d bytes, repSize said %d", i, got, size)
		}
		if size > repKeepBytes {
			large++
			if rep.mapped == nil || &rep.buf[0] != &rep.mapped[0] {
				t.Fatalf("batch %d: a rep of %d bytes is not in its mapping", i, size)
			}
		} else if rep.mapped != nil {
			t.Fatalf("batch %d: a rep of %d bytes is mapped", i, size)
		}
		rep.release()
		if rep.mapped != nil || cap(rep.small) > repKeepBytes {
			t.Fatalf("batch %d: release kept the mapping or %d bytes", i, cap(rep.small))
		}
	}
	if large == 0 {
		t.Fatal("no rep above repKeepBytes: the test does not reach the mapped path")
	}
}

// oldWrite is the store's write path before the batch was serialized in Go
// (one cgo crossing per operation through grocksdb's WriteBatch), kept here
// as the reference of the property test.
func oldWrite(s *rocksStore, b *Batch, o WriteOptions) error {
	wb := grocksdb.NewWriteBatch()
	defer wb.Destroy()
	var maxPut []byte
	for _, op := range b.Ops() {
		switch op.Kind {
		case OpPut:
			wb.Put(op.Key, op.Value)
			if bytes.Compare(op.Key, maxPut) > 0 {
				maxPut = op.Key
			}
		case OpDelete:
			wb.Delete(op.Key)
		case OpDeleteRange:
			end := op.End
			if end == nil {
				end = s.endAfterLast(maxPut)
			}
			if end == nil || bytes.Compare(op.Key, end) >= 0 {
				continue
			}
			wb.DeleteRange(op.Key, end)
		}
	}
	return s.db.Write(s.wo[woIndex(o)], wb)
}

func scanAll(t *testing.T, s Store) [][2][]byte {
	t.Helper()
	it := s.NewIter(nil, nil)
	var out [][2][]byte
	for ok := it.First(); ok; ok = it.Next() {
		out = append(out, [2][]byte{append([]byte{}, it.Key()...), append([]byte{}, it.Value()...)})
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	return out
}

// Random batches written through the single-crossing path (sorted and
// deduplicated when they hold no DeleteRange), through the old per-operation
// path and into the memory store leave identical contents, and every Get
// agrees (including values larger than Get's scratch buffer).
func TestRocksFastPathMatchesOldPath(t *testing.T) {
	open := func() *rocksStore {
		s, err := OpenRocksDB(t.TempDir(), RocksOptions{WriteBufferSize: 256 << 10})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s.(*rocksStore)
	}
	fast, old, mem := open(), open(), NewMemory()
	rng := rand.New(rand.NewPCG(3, 4))
	rounds := 300
	if testing.Short() {
		rounds = 60
	}
	for round := range rounds {
		var b Batch
		noRanges := round%2 == 0 // batches without DeleteRange are written sorted (rocksdb_sort.go)
		ops := randomOps(rng, 1+rng.IntN(40))
		if round%4 == 2 { // in key order already, one op a key: written as they are (inKeyOrder)
			ops = slices.DeleteFunc(ops, func(op Op) bool { return op.Kind == OpDeleteRange })
			slices.SortStableFunc(ops, func(a, b Op) int { return bytes.Compare(a.Key, b.Key) })
			ops = slices.CompactFunc(ops, func(a, b Op) bool { return bytes.Equal(a.Key, b.Key) })
			if !inKeyOrder(ops) {
				t.Fatalf("round %d: the sorted batch is not inKeyOrder", round)
			}
		}
		for _, op := range ops {
			if noRanges && op.Kind == OpDeleteRange {
				continue
			}
			switch op.Kind {
			case OpPut:
				b.Put(op.Key, op.Value)
			case OpDelete:
				b.Delete(op.Key)
			case OpDeleteRange:
				b.DeleteRange(op.Key, op.End)
			}
		}
		o := WriteOptions{DisableWAL: rng.IntN(3) == 0}
		if err := fast.Write(&b, o); err != nil {
			t.Fatalf("round %d: fast write: %v", round, err)
		}
		if err := oldWrite(old, &b, o); err != nil {
			t.Fatalf("round %d: old write: %v", round, err)
		}
		if err := mem.Write(&b, o); err != nil {
			t.Fatalf("round %d: memory write: %v", round, err)
		}
		want := scanAll(t, mem)
		for name, s := range map[string]Store{"fast": fast, "old": old} {
			if got := scanAll(t, s); !reflect.DeepEqual(got, want) {
				t.Fatalf("round %d: %s path holds %d keys, memory model %d; contents differ", round, name, len(got), len(want))
			}
		}
		for range 20 {
			k := fmt.Appendf(nil, "k%03d", rng.IntN(200))
			wv, wok, _ := mem.Get(k)
			v, ok, err := fast.Get(k)
			if err != nil || ok != wok || !bytes.Equal(v, wv) {
				t.Fatalf("round %d: Get(%s) = %d bytes, %v, %v; want %d bytes, %v", round, k, len(v), ok, err, len(wv), wok)
			}
			if ok && len(v) > 0 && cap(v) != len(v) {
				t.Fatalf("Get(%s) returned cap %d for %d bytes: the copy should be exact", k, cap(v), len(v))
			}
		}
	}
}

// An empty key is a valid key.
func TestRocksEmptyKey(t *testing.T) {
	s, err := OpenRocksDB(t.TempDir(), RocksOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var b Batch
	b.Put([]byte{}, []byte("v"))
	if err := s.Write(&b, WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if v, ok, err := s.Get(nil); err != nil || !ok || string(v) != "v" {
		t.Fatalf("Get(empty) = %q, %v, %v", v, ok, err)
	}
}

func TestSortedLast(t *testing.T) {
	op := func(kind OpKind, k string) Op { return Op{Kind: kind, Key: []byte(k)} }
	for _, tc := range []struct {
		name string
		ops  []Op
		want []int32
		ok   bool
	}{
		{"in order", []Op{op(OpPut, "a"), op(OpDelete, "b"), op(OpPut, "c")}, []int32{0, 1, 2}, true},
		{"reversed", []Op{op(OpPut, "c"), op(OpPut, "b"), op(OpPut, "a")}, []int32{2, 1, 0}, true},
		{"last of a key wins", []Op{op(OpPut, "b"), op(OpPut, "a"), op(OpDelete, "b"), op(OpPut, "a"), op(OpPut, "b")}, []int32{3, 4}, true},
		{"delete last", []Op{op(OpPut, "a"), op(OpDelete, "a")}, []int32{1}, true},
		{"empty key", []Op{op(OpPut, "a"), op(OpPut, "")}, []int32{1, 0}, true},
		{"range delete", []Op{op(OpPut, "b"), {Kind: OpDeleteRange, Key: []byte("a")}}, nil, false},
		{"unknown kind", []Op{op(OpPut, "b"), {Kind: 9, Key: []byte("a")}}, nil, false},
	} {
		got, ok := sortedLast(tc.ops, nil)
		if ok != tc.ok || (ok && !reflect.DeepEqual(got, tc.want)) {
			t.Errorf("%s: sortedLast = %v, %v; want %v, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

// TestRepPool: a returned mapping serves the next rep that fits, and the
// pool keeps at most repPoolBytes, dropping its smallest mappings first.
func TestRepPool(t *testing.T) {
	var p repPool
	a := p.get(300 << 10)
	if len(a) != 512<<10 {
		t.Fatalf("get(300 KiB) mapped %d bytes, want 512 KiB", len(a))
	}
	a[len(a)-1] = 7
	p.put(a)
	if b := p.get(400 << 10); &b[0] != &a[0] {
		t.Fatal("a kept mapping that fits was not reused")
	} else {
		p.put(b)
	}
	big := p.get(repPoolBytes - 256<<10) // rounds to repPoolBytes
	p.put(big)                           // drops a (the smallest) to keep big
	if p.bytes != repPoolBytes || len(p.free) != 1 || &p.free[0][0] != &big[0] {
		t.Fatalf("pool keeps %d bytes in %d mappings, want big alone", p.bytes, len(p.free))
	}
	huge := p.get(2 * repPoolBytes)
	p.put(huge) // larger than the bound: unmapped, big stays
	if p.bytes != repPoolBytes || len(p.free) != 1 {
		t.Fatalf("pool keeps %d bytes in %d mappings after a huge put", p.bytes, len(p.free))
	}
	for _, m := range p.free {
		unmapRep(m)
	}
}

// TestRocksDefaultMemtable: at the default options a store's memtable
// switches at 32 MiB (defaultWriteBuffer): after 48 MiB of writes the
// active memtable holds what came after the switch. With 64 MiB memtables
// it held all 48.
func TestRocksDefaultMemtable(t *testing.T) {
	s, err := OpenRocksDB(t.TempDir(), RocksOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rs := s.(*rocksStore)
	writeMiBs(t, s, 48)
	active, ok := rs.db.GetIntProperty("rocksdb.cur-size-active-mem-table")
	if !ok {
		t.Fatal("no rocksdb.cur-size-active-mem-table property")
	}
	if active > 24<<20 {
		t.Fatalf("the active memtable holds %d bytes after 48 MiB of writes: it did not switch at 32 MiB", active)
	}
}

// writeMiBs writes n × 1,000 keys "kIIJJJJ" of 1,000 zero bytes each
// (about n MB), 1,000 a write.
func writeMiBs(t *testing.T, s Store, n int) {
	t.Helper()
	val := make([]byte, 1000)
	for i := range n {
		var b Batch
		for j := range 1000 {
			b.Put(fmt.Appendf(nil, "k%02d%04d", i, j), val)
		}
		if err := s.Write(&b, WriteOptions{DisableWAL: true}); err != nil {
			t.Fatal(err)
		}
	}
}

// getMiBs reads with Get every key writeMiBs(t, s, n) wrote.
func getMiBs(t *testing.T, s Store, n int) {
	t.Helper()
	for i := range n {
		for j := range 1000 {
			if _, ok, err := s.Get(fmt.Appendf(nil, "k%02d%04d", i, j)); err != nil || !ok {
				t.Fatalf("Get: %v, %v", ok, err)
			}
		}
	}
}

// TestRocksDefaultBlockCache: at the default options reading a state of
// 80 MB fills a store's block cache to 32 MiB (defaultBlockCache), not
// more.
func TestRocksDefaultBlockCache(t *testing.T) {
	s, err := OpenRocksDB(t.TempDir(), RocksOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rs := s.(*rocksStore)
	writeMiBs(t, s, 80) // the cache holds blocks uncompressed, so their content does not matter
	if err := rs.db.Flush(rs.fo); err != nil {
		t.Fatal(err)
	}
	getMiBs(t, s, 80)
	if u := rs.cache.GetUsage(); u > 33<<20 || u < 24<<20 {
		t.Fatalf("the block cache holds %d bytes after reading 80 MB: want 32 MiB", u)
	}
}

// TestRocksWriteOrdered: WriteOrdered leaves the store Write leaves for the
// same operations (small reps and large ones, built off the Go heap), and
// refuses a walk out of key order or one that changes between its two
// calls, writing nothing.
func TestRocksWriteOrdered(t *testing.T) {
	open := func() *rocksStore {
		s, err := OpenRocksDB(t.TempDir(), RocksOptions{WriteBufferSize: 256 << 10, InsertHints: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s.(*rocksStore)
	}
	ordered, mem := open(), NewMemory()
	rng := rand.New(rand.NewPCG(5, 6))
	for round := range 40 {
		n := 1 + rng.IntN(40)
		if round%8 == 7 {
			n = 20000 // a rep over repKeepBytes
		}
		ops := randomOps(rng, n)
		ops = slices.DeleteFunc(ops, func(op Op) bool { return op.Kind == OpDeleteRange })
		for i := range ops {
			if round%8 == 7 { // more distinct keys, and large values
				ops[i].Key = fmt.Appendf(nil, "\x01big%06d", rng.IntN(100000))
				if ops[i].Kind == OpPut {
					ops[i].Value = bytes.Repeat([]byte{byte(i)}, 1+rng.IntN(200))
				}
			}
		}
		slices.SortStableFunc(ops, func(a, b Op) int { return bytes.Compare(a.Key, b.Key) })
		ops = slices.CompactFunc(ops, func(a, b Op) bool { return bytes.Equal(a.Key, b.Key) })
		var b Batch
		for _, op := range ops {
			if op.Kind == OpPut {
				b.Put(op.Key, op.Value)
			} else {
				b.Delete(op.Key)
			}
		}
		walk := func(add func(key, value []byte, deleted bool)) {
			for _, op := range ops {
				add(op.Key, op.Value, op.Kind == OpDelete)
			}
		}
		o := WriteOptions{DisableWAL: rng.IntN(3) == 0}
		if err := ordered.WriteOrdered(walk, o); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if err := mem.Write(&b, o); err != nil {
			t.Fatal(err)
		}
		if got, want := scanAll(t, ordered), scanAll(t, mem); !reflect.DeepEqual(got, want) {
			t.Fatalf("round %d: WriteOrdered's store holds %d keys, Write's %d; contents differ", round, len(got), len(want))
		}
	}
	before := scanAll(t, ordered)
	unordered := func(add func(key, value []byte, deleted bool)) {
		add([]byte("\x01zz"), []byte("v"), false)
		add([]byte("\x01aa"), []byte("v"), false)
	}
	if err := ordered.WriteOrdered(unordered, WriteOptions{}); !errors.Is(err, ErrInvalidOptions) {
		t.Fatalf("keys out of order: %v, want ErrInvalidOptions", err)
	}
	calls := 0
	changing := func(add func(key, value []byte, deleted bool)) {
		calls++
		add([]byte("\x01new"), bytes.Repeat([]byte("v"), calls), false)
	}
	if err := ordered.WriteOrdered(changing, WriteOptions{}); !errors.Is(err, ErrInvalidOptions) {
		t.Fatalf("a walk that changed: %v, want ErrInvalidOptions", err)
	}
	if got := scanAll(t, ordered); !reflect.DeepEqual(got, before) {
		t.Fatal("a refused WriteOrdered changed the store")
	}
}

// TestRocksGetSortedLeavesBlockCache: GetSorted (the shard's read-ahead of
// a state larger than its caches) reads 80 MB of data blocks without
// filling the block cache, which Get then fills: only index and filter
// blocks enter it.
func TestRocksGetSortedLeavesBlockCache(t *testing.T) {
	s, err := OpenRocksDB(t.TempDir(), RocksOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rs := s.(*rocksStore)
	writeMiBs(t, s, 80)
	if err := rs.db.Flush(rs.fo); err != nil {
		t.Fatal(err)
	}
	before := rs.cache.GetUsage()
	for i := range 80 {
		keys := make([][]byte, 1000)
		for j := range keys {
			keys[j] = fmt.Appendf(nil, "k%02d%04d", i, j)
		}
		found := 0
		err := rs.GetSorted(keys, 1<<30, func(_ int, v []byte, ok bool) {
			if ok && len(v) == 1000 {
				found++
			}
		})
		if err != nil || found != len(keys) {
			t.Fatalf("GetSorted: %d of %d found, %v", found, len(keys), err)
		}
	}
	if u := rs.cache.GetUsage(); u > before+4<<20 {
		t.Fatalf("the block cache holds %d bytes after GetSorted read 80 MB (%d before): want only index and filter blocks", u, before)
	}
	getMiBs(t, s, 80)
	if u := rs.cache.GetUsage(); u < 24<<20 {
		t.Fatalf("the block cache holds %d bytes after Get read 80 MB: want it filled", u)
	}
}
