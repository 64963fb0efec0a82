package shard_test

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kstate/kstate/changelog"
	"github.com/kstate/kstate/internal/kv"
	"github.com/kstate/kstate/internal/shard"
	"github.com/kstate/kstate/state"
)

// wbVars are the variables of the write-behind tests: a value, a map and a
// list per grouping key.
type wbVars struct {
	v state.ValueState[int64]
	m state.MapState[string, int64]
	l state.ListState[string]
}

func declareWB(t testing.TB, s *shard.Shard) wbVars {
	t.Helper()
	var w wbVars
	declare(t, s, func() {
		w.v = must[state.ValueState[int64]](t)(shard.NewValueState(s, "v", state.Int64()))
		w.m = must[state.MapState[string, int64]](t)(shard.NewMapState(s, "m", state.String(), state.Int64()))
		w.l = must[state.ListState[string]](t)(shard.NewListState(s, "l", state.String()))
	})
	return w
}

const wbKeys = 40

// wbBatch writes batch i: every third key's value and one map entry, and
// with lists set, appends a list element (a scan of the list, merged over
// the layer).
func wbBatch(t testing.TB, s *shard.Shard, w wbVars, l *log, i int, lists bool) {
	t.Helper()
	commit(t, s, l, int64(i), func() {
		for k := i % 3; k < wbKeys; k += 3 {
			s.SetCurrentKey(fmt.Appendf(nil, "key%02d", k))
			old, _, err := w.v.Get()
			noErr(t, err)
			noErr(t, w.v.Update(old+int64(i)))
			noErr(t, w.m.UpdateValue(fmt.Sprint("e", i%5), int64(i)))
			if i%7 == 0 {
				noErr(t, w.v.Clear()) // a tombstone in the layer
			}
			if lists {
				noErr(t, w.l.AppendValue(fmt.Sprint("x", i)))
			}
		}
	})
}

// dump returns the committed state of s (ReadCommitted: the layer over the
// store) as key → value.
func dump(t testing.TB, s *shard.Shard) map[string]string {
	t.Helper()
	out := map[string]string{}
	noErr(t, s.ReadCommitted(nil, []byte{0xff}, func(k, v []byte) bool {
		out[string(k)] = string(v)
		return true
	}))
	return out
}

// readAll reads every key through the state variables (point reads first,
// then the map's and the list's scans) in a batch that is aborted.
func readAll(t testing.TB, s *shard.Shard, w wbVars) []string {
	t.Helper()
	var out []string
	s.Begin(0)
	defer s.Abort()
	for k := range wbKeys {
		s.SetCurrentKey(fmt.Appendf(nil, "key%02d", k))
		v, ok, err := w.v.Get()
		noErr(t, err)
		e0, ok0, err := w.m.GetValue("e0")
		noErr(t, err)
		out = append(out, fmt.Sprint(k, " v=", v, ok, " e0=", e0, ok0))
	}
	for k := range wbKeys {
		s.SetCurrentKey(fmt.Appendf(nil, "key%02d", k))
		it, err := w.m.Iterator()
		noErr(t, err)
		m := maps.Collect(it)
		l, err := w.l.Get()
		noErr(t, err)
		out = append(out, fmt.Sprint(k, " m=", m, " l=", slices.Collect(l)))
	}
	return out
}

// TestWriteBehindRestartAndCrash commits many batches into the layer
// without a flush, reads everything back, then (a) closes and reopens,
// (b) kills the shard and restores the changelog tail, and compares both
// with a write-through twin that ran the same batches.
func TestWriteBehindRestartAndCrash(t *testing.T) {
	for _, kill := range []bool{false, true} {
		for _, backend := range []kv.Backend{kv.BackendRocksDB, kv.BackendPebble} {
			t.Run(fmt.Sprintf("%s/kill=%v", backend, kill), func(t *testing.T) {
				dir := t.TempDir()
				open := func(wb int64) *shard.Shard {
					s, err := shard.OpenShard(shard.ShardOptions{Dir: dir, StoreBackend: backend, WriteBehindBytes: wb})
					noErr(t, err)
					return s
				}
				s := open(64 << 20)
				twin, err := shard.OpenShard(shard.ShardOptions{Backend: kv.NewMemory()})
				noErr(t, err)
				defer twin.Close()
				w, tw := declareWB(t, s), declareWB(t, twin)
				var l, tl log
				wbBatch(t, s, w, &l, 1, true) // lists: their scans flush
				wbBatch(t, twin, tw, &tl, 1, true)
				flushed := shard.StoredOffsetForTest(s)
				for i := 2; i <= 60; i++ {
					wbBatch(t, s, w, &l, i, false)
					wbBatch(t, twin, tw, &tl, i, false)
				}
				if got := shard.StoredOffsetForTest(s); got != flushed {
					t.Fatalf("stored offset %d, want %d: point-write batches flushed", got, flushed)
				}
				if s.ChangelogOffset() != l.next() {
					t.Fatalf("ChangelogOffset = %d, want the committed %d", s.ChangelogOffset(), l.next())
				}
				n, b := shard.UnflushedForTest(s)
				if n < wbKeys {
					t.Fatalf("layer holds %d keys (%d bytes), want ≥ %d", n, b, wbKeys)
				}
				want := dump(t, twin)
				if got := dump(t, s); !maps.Equal(got, want) {
					t.Fatalf("ReadCommitted with an unflushed layer:\n got %q\nwant %q", got, want)
				}
				wantRead := readAll(t, twin, tw)
				if got := readAll(t, s, w); !slices.Equal(got, wantRead) {
					t.Fatalf("reads:\n got %q\nwant %q", got, wantRead)
				}
				// More batches into the layer (readAll's scans read it, flushing nothing).
				for i := 61; i <= 90; i++ {
					wbBatch(t, s, w, &l, i, false)
					wbBatch(t, twin, tw, &tl, i, false)
				}
				want, wantRead = dump(t, twin), readAll(t, twin, tw)
				if kill {
					stored := shard.StoredOffsetForTest(s)
					if stored >= l.next() {
						t.Fatalf("stored offset %d: nothing unflushed to lose", stored)
					}
					noErr(t, shard.CrashForTest(s))
					s = open(64 << 20)
					if s.ChangelogOffset() != stored {
						t.Fatalf("reopened at offset %d, want the stored %d", s.ChangelogOffset(), stored)
					}
					noErr(t, s.ApplyChangelog(l.recs[stored:], l.next()))
					t.Logf("killed with %d of %d changelog records unflushed", l.next()-stored, l.next())
				} else {
					noErr(t, s.Close())
					s = open(64 << 20)
				}
				defer s.Close()
				if s.ChangelogOffset() != l.next() {
					t.Fatalf("offset after reopen = %d, want %d", s.ChangelogOffset(), l.next())
				}
				if got := dump(t, s); !maps.Equal(got, want) {
					t.Fatalf("after reopen:\n got %q\nwant %q", got, want)
				}
				w = declareWB(t, s)
				if got := readAll(t, s, w); !slices.Equal(got, wantRead) {
					t.Fatalf("reads after reopen:\n got %q\nwant %q", got, wantRead)
				}
			})
		}
	}
}

// TestWriteBehindAbortKeepsCommitted: an Abort drops the open batch only,
// never the committed batches in the layer.
func TestWriteBehindAbortKeepsCommitted(t *testing.T) {
	s, err := shard.OpenShard(shard.ShardOptions{Backend: kv.NewMemory(), WriteBehindBytes: 1 << 20})
	noErr(t, err)
	defer s.Close()
	w := declareWB(t, s)
	var l log
	commit(t, s, &l, 0, func() {}) // the declarations
	for i := 1; i <= 5; i++ {
		commit(t, s, &l, int64(i), func() {
			s.SetCurrentKey([]byte("k"))
			noErr(t, w.v.Update(int64(i)))
		})
	}
	before, _ := shard.UnflushedForTest(s)
	s.Begin(9)
	s.SetCurrentKey([]byte("k"))
	noErr(t, w.v.Update(99))
	s.SetCurrentKey([]byte("new"))
	noErr(t, w.v.Update(98))
	_, err = s.Finish()
	noErr(t, err)
	s.Abort()
	if after, _ := shard.UnflushedForTest(s); after != before || after == 0 {
		t.Fatalf("layer keys %d after Abort, %d before", after, before)
	}
	s.Begin(10)
	s.SetCurrentKey([]byte("k"))
	if v, ok, err := w.v.Get(); err != nil || !ok || v != 5 {
		t.Fatalf("after Abort: k = %d, %v, %v; want the committed 5", v, ok, err)
	}
	s.SetCurrentKey([]byte("new"))
	if _, ok, err := w.v.Get(); err != nil || ok {
		t.Fatalf("after Abort: the aborted key exists (%v, %v)", ok, err)
	}
	s.Abort()
}

// failingStore fails every Write while fail is set.
type failingStore struct {
	kv.Store
	fail   atomic.Bool
	writes atomic.Int64
}

var errDiskFull = errors.New("injected: disk full")

func (f *failingStore) Write(b *kv.Batch, o kv.WriteOptions) error {
	if f.fail.Load() {
		return errDiskFull
	}
	f.writes.Add(1)
	return f.Store.Write(b, o)
}

// openFailingWB opens a shard on a failingStore with a 1-byte write-behind
// budget (bg: full layers written in the background) and returns set,
// which sets key "k"'s value.
func openFailingWB(t *testing.T, bg bool) (*failingStore, *shard.Shard, wbVars, func(int64)) {
	t.Helper()
	fs := &failingStore{Store: kv.NewMemory()}
	s, err := shard.OpenShard(shard.ShardOptions{Backend: noClose{fs}, WriteBehindBytes: 1})
	noErr(t, err)
	s.SetBackgroundFlush(bg)
	w := declareWB(t, s)
	return fs, s, w, func(i int64) {
		s.SetCurrentKey([]byte("k"))
		noErr(t, w.v.Update(i))
	}
}

// checkReopened closes s (which writes its layers) and checks that a
// reopen of its store has l's offset and l's last record.
func checkReopened(t *testing.T, s *shard.Shard, fs *failingStore, l *log) {
	t.Helper()
	noErr(t, s.Close())
	writes := fs.writes.Load()
	s, err := shard.OpenShard(shard.ShardOptions{Backend: noClose{fs}})
	noErr(t, err)
	defer s.Close()
	if s.ChangelogOffset() != l.next() {
		t.Fatalf("offset %d after reopen, want %d", s.ChangelogOffset(), l.next())
	}
	last := l.recs[len(l.recs)-1]
	if v, ok, err := s.Get(last.Key); err != nil || !ok || !bytes.Equal(v, last.Value) {
		t.Fatalf("last committed record not in the store after Close: %q, %v, %v (%d writes)", v, ok, err, writes)
	}
}

// TestWriteBehindFlushFailure: a flush that fails fails the Commit that
// triggered it, with the store's error, and changes nothing: the batch stays
// open (the engine aborts it), the layer keeps the earlier batches, and the
// next commit's flush writes them all.
func TestWriteBehindFlushFailure(t *testing.T) {
	// A 1-byte budget: a commit flushes whenever the layer is not empty.
	fs, s, w, set := openFailingWB(t, false)
	var l log
	commit(t, s, &l, 0, func() { set(1) }) // into the empty layer
	if n, _ := shard.UnflushedForTest(s); n == 0 {
		t.Fatal("the first commit did not stay in the layer")
	}
	s.Begin(1)
	set(2)
	recs, err := s.Finish()
	noErr(t, err)
	fs.fail.Store(true)
	l.append(recs)
	err = s.Commit(l.next())
	wantErr(t, err, errDiskFull, "Commit")
	if s.ChangelogOffset() == l.next() {
		t.Fatal("a failed Commit advanced the offset")
	}
	s.Abort()
	fs.fail.Store(false)
	s.Begin(2)
	s.SetCurrentKey([]byte("k"))
	if v, ok, err := w.v.Get(); err != nil || !ok || v != 1 {
		t.Fatalf("after the failed flush: k = %d, %v, %v; want the committed 1", v, ok, err)
	}
	// A scan reads the layer over the store: no write.
	fs.fail.Store(true)
	_, err = w.m.Iterator()
	noErr(t, err)
	fs.fail.Store(false)
	set(3)
	recs, err = s.Finish()
	noErr(t, err)
	l.append(recs)
	noErr(t, s.Commit(l.next()))
	checkReopened(t, s, fs, &l)
}

// TestWriteBehindBackgroundFlushFailure: a layer's background write that fails is
// retried by the commit that needs the layer next (the one that would
// freeze the layer again); if it fails again, that Commit fails with the
// store's error and changes nothing: the batch stays open (the engine
// aborts it), the layers keep the earlier batches, and a later commit's
// retry writes them all.
func TestWriteBehindBackgroundFlushFailure(t *testing.T) {
	// A 1-byte budget: every commit but the first freezes the layer.
	fs, s, w, set := openFailingWB(t, true)
	var l log
	commit(t, s, &l, 0, func() { set(1) }) // into the empty layer
	commit(t, s, &l, 1, func() { set(2) }) // frozen
	noErr(t, shard.AwaitFlushForTest(s))   // batches 0 and 1 in the store
	stored := shard.StoredOffsetForTest(s)
	commit(t, s, &l, 2, func() { set(3) }) // into the empty layer
	fs.fail.Store(true)
	commit(t, s, &l, 3, func() { set(4) }) // frozen; its background write fails
	commit(t, s, &l, 4, func() { set(5) }) // into the empty layer: no retry yet
	if n, _ := shard.UnflushedForTest(s); n == 0 {
		t.Fatal("the committed batches are in no layer")
	}
	s.Begin(5)
	set(6)
	recs, err := s.Finish()
	noErr(t, err)
	l.append(recs)
	err = s.Commit(l.next()) // would freeze the layer: retries the frozen one's write, which fails
	wantErr(t, err, errDiskFull, "Commit")
	if s.ChangelogOffset() == l.next() {
		t.Fatal("a failed Commit advanced the offset")
	}
	if shard.StoredOffsetForTest(s) != stored {
		t.Fatal("the stored offset moved without a write")
	}
	s.Abort()
	s.Begin(6)
	s.SetCurrentKey([]byte("k"))
	if v, ok, err := w.v.Get(); err != nil || !ok || v != 5 {
		t.Fatalf("after the failed write: k = %d, %v, %v; want the committed 5", v, ok, err)
	}
	// A scan reads the layers over the store: no write.
	_, err = w.m.Iterator()
	noErr(t, err)
	fs.fail.Store(false)
	set(7)
	recs, err = s.Finish()
	noErr(t, err)
	l.append(recs)
	noErr(t, s.Commit(l.next())) // the retry succeeds
	checkReopened(t, s, fs, &l)
}

// TestWriteBehindReadCommittedConsistent reads the committed state from
// another goroutine while batches commit into the layer and flush: every
// read must see one committed batch (every batch sets all keys to its
// number), never a mix of the layer and a store from another moment.
func TestWriteBehindReadCommittedConsistent(t *testing.T) {
	for _, tc := range []struct {
		backend kv.Backend
		bg      bool
	}{{kv.BackendRocksDB, false}, {kv.BackendPebble, false}, {kv.BackendRocksDB, true}, {kv.BackendPebble, true}} {
		backend := tc.backend
		t.Run(fmt.Sprintf("%s/background=%v", backend, tc.bg), func(t *testing.T) {
			s, err := shard.OpenShard(shard.ShardOptions{Dir: t.TempDir(), StoreBackend: backend, WriteBehindBytes: 2 << 10})
			noErr(t, err)
			defer s.Close()
			s.SetBackgroundFlush(tc.bg)
			w := declareWB(t, s)
			var l log
			commit(t, s, &l, 0, func() {})
			done := make(chan struct{})
			var reads, committed atomic.Int64
			errc := make(chan error, 1)
			go func() {
				defer close(errc)
				for {
					select {
					case <-done:
						return
					default:
					}
					lo := committed.Load() // the read must see this batch or a later one
					vals := map[string]int{}
					err := s.ReadCommitted([]byte{0x01}, []byte{0x02}, func(k, v []byte) bool {
						vals[string(v)]++
						return true
					})
					if err != nil {
						errc <- err
						return
					}
					if len(vals) > 1 {
						errc <- fmt.Errorf("one read saw %d different values: %v", len(vals), vals)
						return
					}
					for v := range vals {
						_, p, err := changelog.DecodeValue([]byte(v))
						if err != nil {
							errc <- err
							return
						}
						if n, err := state.Int64().Decode(p); err != nil || n < lo {
							errc <- fmt.Errorf("read batch %d's value (%v) after batch %d committed", n, err, lo)
							return
						}
					}
					reads.Add(1)
				}
			}()
			for i := 1; i <= 300; i++ {
				commit(t, s, &l, int64(i), func() {
					for k := range 50 {
						s.SetCurrentKey(fmt.Appendf(nil, "key%02d", k))
						noErr(t, w.v.Update(int64(i)))
					}
				})
				committed.Store(int64(i))
			}
			close(done)
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
			if reads.Load() == 0 {
				t.Fatal("no read completed")
			}
			t.Logf("%d reads, stored offset %d of %d", reads.Load(), shard.StoredOffsetForTest(s), l.next())
		})
	}
}

// TestWriteBehindBound: the layer stays within its budget plus one batch,
// and a commit over the budget freezes the layer with the batch in it:
// once its background write returned, the store has everything.
func TestWriteBehindBound(t *testing.T) {
	const budget = 16 << 10
	s, err := shard.OpenShard(shard.ShardOptions{Backend: kv.NewMemory(), WriteBehindBytes: budget})
	noErr(t, err)
	defer s.Close()
	w := declareWB(t, s)
	var l log
	flushes, maxBytes := 0, int64(0)
	for i := range 200 {
		before := shard.StoredOffsetForTest(s)
		commit(t, s, &l, int64(i), func() {
			for k := range 20 { // 20 new keys a batch
				s.SetCurrentKey(fmt.Appendf(nil, "b%03dk%02d", i, k))
				noErr(t, w.v.Update(int64(i)))
			}
		})
		noErr(t, shard.AwaitFlushForTest(s)) // the frozen layer, written in the background, goes
		_, b := shard.UnflushedForTest(s)
		maxBytes = max(maxBytes, b)
		if shard.StoredOffsetForTest(s) != before {
			flushes++
			if b != 0 || shard.StoredOffsetForTest(s) != l.next() {
				t.Fatalf("batch %d flushed: layer %d bytes, stored offset %d of %d", i, b, shard.StoredOffsetForTest(s), l.next())
			}
		}
	}
	// One batch of 20 keys is well under 8 KiB.
	if maxBytes > budget+8<<10 {
		t.Fatalf("layer reached %d bytes, budget %d", maxBytes, budget)
	}
	if flushes < 5 {
		t.Fatalf("%d flushes in 200 batches of 20 new keys with a %d-byte budget", flushes, budget)
	}
	t.Logf("%d flushes, layer at most %d bytes", flushes, maxBytes)
}

// TestWriteBehindEstimateDuringFlush: Estimate, called from another
// goroutine (a metrics scrape) while the committed batches kept in memory
// are flushed, counts them wherever they are, in the layer or in the
// store. Before, it read the store's estimate before it locked the layer:
// a flush in between moved the entries from the layer into the store
// after the one read and before the other, and the estimate missed them
// all (kstate_state_keys read 0 after a run's first idle flush, in
// integration's TestMetricsRealBroker under make test's load).
func TestWriteBehindEstimateDuringFlush(t *testing.T) {
	const keys, rounds = 200, 20
	missed := 0
	for round := range rounds {
		s, err := shard.OpenShard(shard.ShardOptions{Dir: t.TempDir(), WriteBehindBytes: 64 << 20})
		noErr(t, err)
		w := declareWB(t, s)
		commit(t, s, nil, 0, func() {
			for k := range keys {
				s.SetCurrentKey(fmt.Appendf(nil, "key%03d", k))
				noErr(t, w.v.Update(int64(k)))
			}
		})
		if n, _ := shard.UnflushedForTest(s); n < keys {
			t.Fatalf("round %d: %d keys kept in memory after the commit, want %d (write-behind)", round, n, keys)
		}
		if e, err := s.Estimate(); err == nil && e.Entries < 0 {
			noErr(t, s.Close())
			t.Skip("the store has no estimate of its entries (Pebble)")
		}
		var low atomic.Int64
		low.Store(1 << 62)
		done, stopped := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(stopped)
			for {
				e, err := s.Estimate()
				if err == nil && e.Entries < low.Load() {
					low.Store(e.Entries)
				}
				select {
				case <-done:
					return
				default:
				}
			}
		}()
		for range 3 { // let the estimates run before the flush, too
			_, _ = s.Estimate()
		}
		noErr(t, s.Flush())
		for range 3 {
			_, _ = s.Estimate()
		}
		close(done)
		<-stopped
		if got := low.Load(); got < keys {
			missed++
			t.Errorf("round %d: an estimate during the flush counted %d entries, want at least the %d committed keys", round, got, keys)
		}
		noErr(t, s.Close())
	}
	if missed > 0 {
		t.Logf("%d of %d rounds missed the flushed entries", missed, rounds)
	}
}

// gatedStore holds every Write until open is closed, once gate is set.
type gatedStore struct {
	kv.Store
	gate    atomic.Bool
	open    chan struct{}
	started chan struct{} // a held Write started (buffered)
}

func (g *gatedStore) Write(b *kv.Batch, o kv.WriteOptions) error {
	if g.gate.Load() {
		g.started <- struct{}{}
		<-g.open
	}
	return g.Store.Write(b, o)
}

// TestWriteBehindBackgroundFlush: a full layer is written to the store
// by a background goroutine. While that write is held, commits go on into
// a new layer without waiting for it, and every read (point reads, scans,
// ReadCommitted, Estimate) sees the new layer over the frozen one over the
// store; the commit that fills the new layer waits for the write; Close
// writes both; a reopen has every batch.
func TestWriteBehindBackgroundFlush(t *testing.T) {
	g := &gatedStore{Store: kv.NewMemory(), open: make(chan struct{}), started: make(chan struct{}, 4)}
	const budget = 4 << 10
	s, err := shard.OpenShard(shard.ShardOptions{Backend: noClose{g}, WriteBehindBytes: budget})
	noErr(t, err)
	s.SetBackgroundFlush(true)
	w := declareWB(t, s)
	var l log
	put := func(batch int, keys ...string) {
		commit(t, s, &l, int64(batch), func() {
			for _, k := range keys {
				s.SetCurrentKey([]byte(k))
				noErr(t, w.v.Update(int64(batch)))
				noErr(t, w.m.UpdateValue(k, int64(batch)))
			}
		})
	}
	var first []string // in the layer that is frozen
	for i := range 60 {
		first = append(first, fmt.Sprintf("a%02d", i))
	}
	put(1, first...)
	g.gate.Store(true)
	stored := shard.StoredOffsetForTest(s)
	froze := make(chan struct{})
	go func() {
		defer close(froze)
		put(2, "a00", "b") // the layer is over the budget: frozen with this batch, written in the background
	}()
	select {
	case <-g.started:
	case <-time.After(10 * time.Second):
		t.Fatal("no write of the full layer")
	}
	select {
	case <-froze:
	case <-time.After(10 * time.Second):
		t.Fatal("the commit that froze the layer waited for its write")
	}
	// The write is held: commits go on into the new layer.
	done := make(chan struct{})
	go func() {
		defer close(done)
		put(3, "a01", "c")
		put(4, "d")
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("a commit waited for the background write of the frozen layer")
	}
	if shard.StoredOffsetForTest(s) != stored {
		t.Fatal("the stored offset moved before the write returned")
	}
	want := map[string]int64{"a00": 2, "a01": 3, "a02": 1, "a59": 1, "b": 2, "c": 3, "d": 4}
	check := func(when string) {
		t.Helper()
		s.Begin(10)
		defer s.Abort()
		for k, v := range want {
			s.SetCurrentKey([]byte(k))
			if got, ok, err := w.v.Get(); err != nil || !ok || got != v {
				t.Fatalf("%s: %s = %d, %v, %v; want %d", when, k, got, ok, err, v)
			}
			it, err := w.m.Iterator() // a scan, merged over both layers
			noErr(t, err)
			n := 0
			for mk, mv := range it {
				if mk != k || mv != v {
					t.Fatalf("%s: map of %s has %s=%d; want %s=%d", when, k, mk, mv, k, v)
				}
				n++
			}
			if n != 1 {
				t.Fatalf("%s: map of %s has %d entries", when, k, n)
			}
		}
	}
	check("while the frozen layer is written")
	// ReadCommitted sees every key of both layers over the store.
	keys := 0
	noErr(t, s.ReadCommitted(nil, []byte{0xff}, func(k, v []byte) bool { keys++; return true }))
	if keys < 2*(len(first)+3) {
		t.Fatalf("ReadCommitted saw %d entries while the frozen layer is written, want at least %d", keys, 2*(len(first)+3))
	}
	if e, err := s.Estimate(); err != nil || e.Entries < int64(len(first)) {
		t.Fatalf("Estimate %+v, %v while the frozen layer is written", e, err)
	}
	// The commit that freezes the next layer waits for the held write.
	var next []string
	for i := range 60 {
		next = append(next, fmt.Sprintf("e%02d", i))
	}
	put(5, next...)
	g.gate.Store(false)
	waited := make(chan struct{})
	go func() {
		defer close(waited)
		put(6, "a02") // the layer is full: waits for the frozen layer's write
	}()
	select {
	case <-waited:
		t.Fatal("a freeze did not wait for the previous frozen layer's write")
	case <-time.After(100 * time.Millisecond):
	}
	close(g.open)
	<-waited
	want["a02"] = 6
	for _, k := range next {
		want[k] = 5
	}
	noErr(t, shard.AwaitFlushForTest(s))
	if got := shard.StoredOffsetForTest(s); got != l.next() {
		t.Fatalf("stored offset %d after the writes, want %d", got, l.next())
	}
	check("after the writes")
	put(7, "f")
	want["f"] = 7
	noErr(t, s.Close()) // writes the layer
	s, err = shard.OpenShard(shard.ShardOptions{Backend: noClose{g}, WriteBehindBytes: budget})
	noErr(t, err)
	defer s.Close()
	if s.ChangelogOffset() != l.next() {
		t.Fatalf("offset %d after reopen, want %d", s.ChangelogOffset(), l.next())
	}
	w = declareWB(t, s)
	check("after reopen")
}
