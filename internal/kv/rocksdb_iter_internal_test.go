//go:build cgo && !kstate_nocgo

package kv

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/linxGnu/grocksdb"
)

// refIter is the store's iterator before rocksdb_iter.cc: grocksdb's
// iterator with the same bound clamps, one crossing per call. It is the
// reference of the property test below.
type refIter struct {
	it           *grocksdb.Iterator
	ro           *grocksdb.ReadOptions
	lower, upper []byte
	valid        bool
}

func newRefIter(s *rocksStore, lower, upper []byte) *refIter {
	r := &refIter{ro: grocksdb.NewDefaultReadOptions()}
	if len(lower) > 0 {
		r.lower = bytes.Clone(lower)
		r.ro.SetIterateLowerBound(r.lower)
	}
	if upper != nil {
		r.upper = bytes.Clone(upper)
		r.ro.SetIterateUpperBound(r.upper)
	}
	r.it = s.db.NewIterator(r.ro)
	return r
}

func (r *refIter) close() { r.it.Close(); r.ro.Destroy() }

func (r *refIter) do(op int, key []byte) bool {
	r.valid = false
	switch op {
	case 0:
		r.it.SeekToFirst()
	case 1:
		r.it.SeekToLast()
	case 2:
		r.it.Next()
	case 3:
		r.it.Prev()
	case 4:
		if r.upper != nil && bytes.Compare(key, r.upper) >= 0 {
			return false
		}
		if bytes.Compare(key, r.lower) < 0 {
			key = r.lower
		}
		r.it.Seek(key)
	case 5:
		if bytes.Compare(key, r.lower) <= 0 {
			return false
		}
		if r.upper != nil && bytes.Compare(key, r.upper) > 0 {
			key = r.upper
		}
		r.it.SeekForPrev(key)
		if r.it.Valid() && bytes.Equal(r.it.Key().Data(), key) {
			r.it.Prev()
		}
	}
	r.valid = r.it.Valid()
	return r.valid
}

// The one-crossing iterator agrees with grocksdb's on random contents
// (memtable and flushed files, deletions, range deletions, empty and large
// values past the iterator's scratch buffer), random bounds and random
// sequences of First, Last, Next, Prev, SeekGE and SeekLT.
func TestRocksIterMatchesGrocksdb(t *testing.T) {
	s0, err := OpenRocksDB(t.TempDir(), RocksOptions{WriteBufferSize: 256 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer s0.Close()
	s := s0.(*rocksStore)
	rng := rand.New(rand.NewPCG(5, 6))
	key := func() []byte {
		switch rng.IntN(12) {
		case 0:
			return nil
		case 1:
			return []byte("zz") // past every key
		default:
			return fmt.Appendf(nil, "k%03d", rng.IntN(210))
		}
	}
	rounds := 150
	if testing.Short() {
		rounds = 40
	}
	steps, positioned := 0, 0
	for round := range rounds {
		var b Batch
		for _, op := range randomOps(rng, 1+rng.IntN(60)) {
			switch op.Kind {
			case OpPut:
				b.Put(op.Key, op.Value)
			case OpDelete:
				b.Delete(op.Key)
			case OpDeleteRange:
				b.DeleteRange(op.Key, op.End)
			}
		}
		if err := s.Write(&b, WriteOptions{}); err != nil {
			t.Fatal(err)
		}
		if round%25 == 24 {
			if err := s.db.Flush(grocksdb.NewDefaultFlushOptions()); err != nil {
				t.Fatal(err)
			}
		}
		for range 4 {
			var lower, upper []byte
			if rng.IntN(3) > 0 {
				lower = key()
			}
			if rng.IntN(3) > 0 {
				upper = key()
				if upper == nil {
					upper = []byte{}
				}
			}
			got, want := s.NewIter(lower, upper), newRefIter(s, lower, upper)
			empty := upper != nil && (len(upper) == 0 || bytes.Compare(lower, upper) >= 0)
			for range 40 {
				op := rng.IntN(6)
				if (op == 2 || op == 3) && !want.valid {
					op = rng.IntN(2) // Next/Prev only from a valid position, as the store's iterator guards
				}
				k := key()
				var g bool
				switch op {
				case 0:
					g = got.First()
				case 1:
					g = got.Last()
				case 2:
					g = got.Next()
				case 3:
					g = got.Prev()
				case 4:
					g = got.SeekGE(k)
				case 5:
					g = got.SeekLT(k)
				}
				w := false
				if !empty {
					w = want.do(op, k)
				}
				steps++
				if g != w || got.Valid() != w {
					t.Fatalf("round %d, bounds [%q, %q), op %d key %q: valid %v, want %v", round, lower, upper, op, k, g, w)
				}
				if !w {
					continue
				}
				positioned++
				wk, wv := want.it.Key().Data(), want.it.Value().Data()
				if !bytes.Equal(got.Key(), wk) || !bytes.Equal(got.Value(), wv) {
					t.Fatalf("round %d, bounds [%q, %q), op %d key %q: at %q (%d-byte value), want %q (%d bytes)",
						round, lower, upper, op, k, got.Key(), len(got.Value()), wk, len(wv))
				}
			}
			if err := got.Close(); err != nil {
				t.Fatal(err)
			}
			want.close()
		}
	}
	t.Logf("%d steps compared, %d of them positioned", steps, positioned)
	if positioned < steps/4 {
		t.Fatalf("only %d of %d steps positioned: the test compares too little", positioned, steps)
	}
}

// Key and value stay valid (and unchanged) after the iterator moves on and
// after it is closed: the store's iterators hand out copies.
func TestRocksIterCopiesSurviveSteps(t *testing.T) {
	s, err := OpenRocksDB(t.TempDir(), RocksOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var b Batch
	big := bytes.Repeat([]byte("x"), iterScratch+10)
	b.Put([]byte("a"), []byte("va"))
	b.Put([]byte("b"), big)
	b.Put([]byte("c"), []byte("vc"))
	if err := s.Write(&b, WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	it := s.NewIter(nil, nil)
	var ks, vs [][]byte
	for ok := it.First(); ok; ok = it.Next() {
		ks, vs = append(ks, it.Key()), append(vs, it.Value())
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	want := [][2]string{{"a", "va"}, {"b", string(big)}, {"c", "vc"}}
	if len(ks) != len(want) {
		t.Fatalf("%d entries, want %d", len(ks), len(want))
	}
	for i, w := range want {
		if string(ks[i]) != w[0] || string(vs[i]) != w[1] {
			t.Errorf("entry %d = %q (%d bytes), want %q (%d bytes)", i, ks[i], len(vs[i]), w[0], len(w[1]))
		}
	}
}

// A step allocates once (the copy of key and value): no Slice wrappers, no
// out-parameters.
func TestRocksIterStepAllocs(t *testing.T) {
	s, err := OpenRocksDB(t.TempDir(), RocksOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var b Batch
	for i := range 100 {
		b.Put(fmt.Appendf(nil, "k%03d", i), []byte("value"))
	}
	if err := s.Write(&b, WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	it := s.NewIter(nil, nil)
	defer it.Close()
	it.First()
	seek := []byte("k050")
	if n := testing.AllocsPerRun(200, func() {
		if !it.SeekGE(seek) || !it.Next() {
			t.Fatal("lost position")
		}
	}); n > 2 {
		t.Errorf("SeekGE + Next allocate %.1f times, want 2", n)
	}
}
