package kvtest

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"testing"

	"github.com/kstate/kstate/internal/kv"
)

// model is the reference store: a Go map, sorted on demand.
type model map[string]string

func (m model) apply(bt *kv.Batch) {
	for _, op := range bt.Ops() {
		switch op.Kind {
		case kv.OpPut:
			m[string(op.Key)] = string(op.Value)
		case kv.OpDelete:
			delete(m, string(op.Key))
		case kv.OpDeleteRange:
			for k := range m {
				if k >= string(op.Key) && (op.End == nil || k < string(op.End)) {
					delete(m, k)
				}
			}
		}
	}
}

// rangeKeys returns the sorted keys in [lower, upper) (nil upper = unbounded).
func (m model) rangeKeys(lower, upper []byte) []string {
	var ks []string
	for k := range m {
		if k >= string(lower) && (upper == nil || k < string(upper)) {
			ks = append(ks, k)
		}
	}
	sort.Strings(ks)
	return ks
}

func (m model) check(t *testing.T, s kv.Store) {
	t.Helper()
	var want []pair
	for _, k := range m.rangeKeys(nil, nil) {
		want = append(want, pair{k, m[k]})
	}
	if got := scan(t, s, nil, nil); !slices.Equal(got, want) {
		t.Fatalf("store holds %q\nmodel holds %q", got, want)
	}
}

// testModel drives random batches against the store and the model and
// compares Gets, full scans and random iterator walks. The seeds are fixed
// so a failure reproduces; the failing seed and step are in the message.
func testModel(t *testing.T, open Opener) {
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			s := open(t, t.TempDir())
			defer s.Close()
			rng := rand.New(rand.NewPCG(seed, seed))
			// A small alphabet of awkward bytes makes collisions, prefixes and
			// range edges frequent.
			alphabet := []byte{0x00, 0x01, 0x7f, 0xff}
			randKey := func() []byte {
				k := make([]byte, 1+rng.IntN(3))
				for i := range k {
					k[i] = alphabet[rng.IntN(len(alphabet))]
				}
				return k
			}
			m := model{}
			for step := range 400 {
				var bt kv.Batch
				for range 1 + rng.IntN(8) {
					switch r := rng.IntN(100); {
					case r < 60:
						v := make([]byte, rng.IntN(4)) // includes empty values
						for i := range v {
							v[i] = byte(rng.UintN(256))
						}
						bt.Put(randKey(), v)
					case r < 88:
						bt.Delete(randKey())
					case r < 98:
						bt.DeleteRange(randKey(), randKey()) // sometimes inverted
					default:
						bt.DeleteRange(randKey(), nil)
					}
				}
				if err := s.Write(&bt, kv.WriteOptions{DisableWAL: rng.IntN(2) == 0}); err != nil {
					t.Fatalf("seed %d step %d: Write: %v", seed, step, err)
				}
				m.apply(&bt)
				for range 4 {
					k := randKey()
					v, ok, err := s.Get(k)
					mv, mok := m[string(k)]
					if err != nil || ok != mok || string(v) != mv {
						t.Fatalf("seed %d step %d: Get(%x) = %x %v %v, model %x %v", seed, step, k, v, ok, err, mv, mok)
					}
				}
				if step%10 == 9 {
					m.check(t, s)
				}
				if step%5 == 0 {
					walk(t, s, m, rng, randKey, fmt.Sprintf("seed %d step %d", seed, step))
				}
			}
		})
	}
}

// walk moves one bounded iterator randomly and compares every position with
// the model. Next/Prev are only used from a valid position: what they do
// after running off either end is left to the backend.
func walk(t *testing.T, s kv.Store, m model, rng *rand.Rand, randKey func() []byte, where string) {
	t.Helper()
	var lower, upper []byte
	if rng.IntN(3) > 0 {
		lower = randKey()
	}
	if rng.IntN(3) > 0 {
		upper = randKey()
	}
	keys := m.rangeKeys(lower, upper)
	if upper != nil && bytes.Compare(lower, upper) >= 0 {
		keys = nil
	}
	it := s.NewIter(lower, upper)
	defer closeIter(t, it)
	pos := -1 // index into keys; -1 = invalid
	for range 30 {
		var ok bool
		var op string
		switch r := rng.IntN(6); {
		case r == 0 || pos < 0 && r >= 4:
			op, ok = "First", it.First()
			pos = -1
			if len(keys) > 0 {
				pos = 0
			}
		case r == 1:
			op, ok = "Last", it.Last()
			pos = len(keys) - 1
		case r == 2:
			p := randKey()
			op, ok = fmt.Sprintf("SeekGE(%x)", p), it.SeekGE(p)
			pos = sort.SearchStrings(keys, string(p))
			if pos == len(keys) {
				pos = -1
			}
		case r == 3:
			p := randKey()
			op, ok = fmt.Sprintf("SeekLT(%x)", p), it.SeekLT(p)
			pos = sort.SearchStrings(keys, string(p)) - 1
		case r == 4:
			op, ok = "Next", it.Next()
			if pos++; pos == len(keys) {
				pos = -1
			}
		default:
			op, ok = "Prev", it.Prev()
			pos--
		}
		wantOK := pos >= 0
		if ok != wantOK || it.Valid() != wantOK {
			t.Fatalf("%s: iter [%x,%x) %s = %v (valid %v), model %v (keys %x)", where, lower, upper, op, ok, it.Valid(), wantOK, keys)
		}
		if ok && (string(it.Key()) != keys[pos] || string(it.Value()) != m[keys[pos]]) {
			t.Fatalf("%s: iter [%x,%x) %s at %x=%x, model %x=%x", where, lower, upper, op, it.Key(), it.Value(), keys[pos], m[keys[pos]])
		}
	}
	if err := it.Error(); err != nil {
		t.Fatalf("%s: iterator error: %v", where, err)
	}
}

// testConcurrent runs one writer and several readers at once (the Store
// contract); run with -race. Readers check that every view is internally
// consistent: a batch writes key i and its "index" entry together.
func testConcurrent(t *testing.T, open Opener) {
	s := open(t, t.TempDir())
	defer s.Close()
	const n = 300
	key := func(i int) []byte { return fmt.Appendf(nil, "k%05d", i) }
	var wg sync.WaitGroup
	done := make(chan struct{})
	errs := make(chan error, 8)
	for r := range 4 {
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				if r%2 == 0 {
					it := s.NewIter(b("k"), b("l"))
					prev := []byte(nil)
					for ok := it.First(); ok; ok = it.Next() {
						if prev != nil && bytes.Compare(prev, it.Key()) >= 0 {
							errs <- fmt.Errorf("iteration not ascending: %q then %q", prev, it.Key())
						}
						if !bytes.Equal(it.Value(), it.Key()[1:]) {
							errs <- fmt.Errorf("value of %q = %q", it.Key(), it.Value())
						}
						prev = append(prev[:0], it.Key()...)
					}
					if err := it.Close(); err != nil {
						errs <- err
					}
				} else {
					// Atomicity: "k" and "idx" entries are written in one batch.
					v, ok, err := s.Get(b("idx"))
					if err != nil {
						errs <- err
						return
					}
					if ok {
						var i int
						fmt.Sscanf(string(v), "%d", &i)
						if _, ok, err := s.Get(key(i)); err != nil || !ok {
							errs <- fmt.Errorf("idx=%d visible but %q missing (err %v)", i, key(i), err)
						}
					}
				}
			}
		})
	}
	for i := range n {
		var bt kv.Batch
		bt.Put(key(i), key(i)[1:])
		bt.Put(b("idx"), fmt.Appendf(nil, "%d", i))
		if err := s.Write(&bt, kv.WriteOptions{}); err != nil {
			t.Fatalf("Write: %v", err)
		}
	}
	close(done)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := scan(t, s, b("k"), b("l")); len(got) != n {
		t.Fatalf("%d keys after %d writes", len(got), n)
	}
}

// testCloseWhileReading closes the store under running readers: they must
// see errors, never crash (a Go store cannot crash, a cgo one easily can).
func testCloseWhileReading(t *testing.T, open Opener) {
	s := open(t, t.TempDir())
	for i := range 200 {
		put(t, s, fmt.Sprintf("k%03d", i), "v")
	}
	var wg sync.WaitGroup
	started := make(chan struct{}, 4)
	errs := make(chan error, 4)
	for r := range 4 {
		wg.Go(func() {
			started <- struct{}{}
			for {
				var err error
				if r%2 == 0 {
					_, _, err = s.Get(b("k100"))
				} else {
					it := s.NewIter(nil, nil)
					for ok := it.First(); ok; ok = it.Next() {
					}
					err = it.Error()
					_ = it.Close()
				}
				if err != nil {
					if !errors.Is(err, kv.ErrClosed) {
						errs <- fmt.Errorf("reader %d: %w (want kv.ErrClosed)", r, err)
					}
					return
				}
			}
		})
	}
	for range 4 {
		<-started
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
