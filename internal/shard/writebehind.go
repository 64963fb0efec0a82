package shard

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"runtime"
	"slices"
	"unsafe"

	"github.com/kstate/kstate/internal/kv"
)

// Write-behind local commits.
//
// Why: a local commit used to write every batch's staged changes to the
// store, and that write was the largest single cost of a stateful pipeline
// (28% of the count benchmark's CPU, almost all of it RocksDB's memtable
// skip-list insert, ~2.7µs a key; the memtable keeps every version of a hot
// key). Kafka is the source of truth: the changelog holds every committed
// batch, and a store that lags behind its changelog is a supported state —
// restore replays the tail from the offset stored with the data. Kafka
// Streams does the same (a record cache flushed on commit over RocksDB
// without a WAL).
//
// So with ShardOptions.WriteBehindBytes set, Commit keeps the committed
// batch in memory, in the unflushed layer below: one entry per key, a later
// batch's write of a key replacing the earlier one. The layer is written to
// the store (flushed) in one atomic write holding every key's last value
// once, in key order, plus the newest changelog offset, when
//   - it holds more than its share of WriteBehindBytes (a fraction drawn
//     for each layer in [wbMinFill, 1): newFill), or more than wbMaxRecords
//     changelog records were committed since the last flush (this bounds
//     the replay after a crash): together with the committing batch, by
//     the commit, or, with SetBackgroundFlush on (the engine's small
//     batches), the committing batch goes into it, and it is frozen and
//     written by a background goroutine while a new layer takes the next
//     batches (freeze); the next freeze or write waits for that write, so
//     at most one layer is frozen;
//   - the engine is idle (Flush), Close, and before every restore entry
//     point (ApplyChangelog, Wipe, the re-seed), so that those see and
//     write a store that is up to date: the frozen layer's write first,
//     then the layer's, on the shard's goroutine.
//
// Reads see exactly what they saw with write-through: staging → committed
// cache → unflushed layer → frozen layer → store for point reads; scans
// merge staging over the layer over the frozen one over the store
// (wbIter, the batch's reused iterator: the layers do not change during a
// batch). ReadCommitted (any goroutine) takes a copy of both layers' range
// and creates its store iterator under wbMu; a synchronous flush writes and
// empties the layer under wbMu, and a frozen layer is dropped under wbMu
// only after its write, so it sees one committed state.
//
// A crash (SIGKILL) loses the layers; the store holds the state and offset
// of the last completed flush, and restore replays the changelog from
// there: at most about 2 × wbMaxRecords records (plus one batch) more than
// with write-through. While a layer is frozen, the shard holds up to twice
// WriteBehindBytes (the frozen layer does not count against the bound: it
// did, and every commit after a freeze waited for the write).
//
// Layout: an index map (key → the entry's place) whose key strings alias the
// entries' key bytes, and entries (key, value room, value) back to back in
// byte chunks that are reused after each flush. The chunks are memory
// mapped outside the Go heap, like the committed-state cache's (released
// by reset past the few it keeps, and at Close): on the heap their bytes
// counted twice in the process's peak RSS through the garbage collector's
// headroom (35 MiB of ~220 MiB of live heap at 64 partitions;
// docs/BENCHMARKS.md, "Write batches outside the Go heap"). The only
// pointers the garbage collector sees are the map's strings, into those
// chunks, which it ignores.
type wbLayer struct {
	index  map[string]uint64 // key → chunk<<32 | offset of its entry
	chunks [][]byte          // entries back to back; len = bytes used
	cur    int               // the chunk being filled
	used   int64             // bytes charged: entries + index overhead
	recs   int64             // changelog records committed into the layer
	// fill is the fraction of the shard's budget at which this layer is
	// full, drawn in [wbMinFill, 1) for each layer (newFill).
	fill float64
	// items are the refs of the indexed keys' entries in key order, kept
	// sorted as commits add keys (a merge of two sorted lists: a batch's
	// staged keys come in order), so that neither scans nor flushes sort.
	// They hold no pointers: a merge moves 8 bytes a key without write
	// barriers, and the garbage collector does not scan them.
	items, spare, added []uint64
}

const (
	// wbHeader: key length, value room, value length (top bit: deleted).
	wbHeader = 12
	// wbChunk is the size of an entry chunk (a larger entry gets its own).
	wbChunk = 256 << 10
	// wbIndexCost is the bytes charged per indexed key for the map (~40)
	// and the sorted items with their merge buffer (2 × 24).
	wbIndexCost = 96
	wbDeleted   = 1 << 31
	// wbMaxRecords bounds the changelog records committed since the last
	// flush, so a crash replays at most about that many more records
	// (about 0.5 s at the restore rate measured in docs/BENCHMARKS.md).
	wbMaxRecords = 256 << 10
)

// DefaultWriteBehindBytes is the unflushed-layer budget the engine gives
// each shard (see ShardOptions.WriteBehindBytes and docs/benchmarks/history.md,
// "Write-behind local commits").
const DefaultWriteBehindBytes = 4 << 20

func newWBLayer() *wbLayer { return &wbLayer{index: make(map[string]uint64), fill: newFill()} }

// wbMinFill is the least fraction of its budget at which a layer is full.
const wbMinFill = 0.75

// newFill draws a layer's fill fraction at random in [wbMinFill, 1). A key
// spread evenly over the partitions fills every shard's layer at the same
// pace, so with one fixed bound all of an instance's layers filled in the
// same batch, and their writes (tens of ms each) came at once, every few
// seconds: heavy's latency tail at 20,000 rows/s on 2 cores was there
// (docs/BENCHMARKS.md, "Session 42"). Drawn anew for each layer, the
// shards' writes drift apart and stay apart (measured in "Session 43":
// a lower median p99 and peak RSS). The budget still bounds a layer.
func newFill() float64 { return wbMinFill + (1-wbMinFill)*rand.Float64() }

// full reports whether the layer holds its share of bound (bytes; an
// empty layer never does) or wbMaxRecords records.
func (w *wbLayer) full(bound int64) bool {
	return w.used >= max(int64(w.fill*float64(bound)), 1) || w.recs >= wbMaxRecords
}

func (w *wbLayer) empty() bool { return len(w.index) == 0 }

// entry returns the bytes of the entry at ref (header, key, value room).
func (w *wbLayer) entry(ref uint64) []byte {
	c := w.chunks[ref>>32]
	off := uint32(ref)
	kl := binary.LittleEndian.Uint32(c[off:])
	room := binary.LittleEndian.Uint32(c[off+4:])
	return c[off : off+wbHeader+kl+room]
}

func wbKey(e []byte) []byte { return e[wbHeader : wbHeader+binary.LittleEndian.Uint32(e)] }

// wbVal returns the value of an entry (aliasing the chunk) and whether it
// is a tombstone.
func wbVal(e []byte) ([]byte, bool) {
	kl := binary.LittleEndian.Uint32(e)
	vl := binary.LittleEndian.Uint32(e[8:])
	if vl&wbDeleted != 0 {
		return nil, true
	}
	return e[wbHeader+kl : wbHeader+kl+vl], false
}

// get returns key's unflushed value (aliasing the layer: copy it before
// handing it out), whether it is a tombstone, and whether the layer has it.
func (w *wbLayer) get(key []byte) (val []byte, deleted, found bool) {
	ref, ok := w.index[string(key)]
	if !ok {
		return nil, false, false
	}
	val, deleted = wbVal(w.entry(ref))
	return val, deleted, true
}

// put records key's committed value (deleted: a tombstone), replacing an
// earlier one: in place when it fits the entry's room, else in a new entry.
// It copies key and val. A new key goes to added, in the order of the puts:
// callers put a batch's keys in key order and then call mergeAdded.
func (w *wbLayer) put(key, val []byte, deleted bool) {
	ref, ok := w.index[string(key)]
	if ok {
		e := w.entry(ref)
		kl := binary.LittleEndian.Uint32(e)
		if room := binary.LittleEndian.Uint32(e[4:]); len(val) <= int(room) {
			setWBVal(e, kl, val, deleted)
			return
		}
	}
	room := (len(val) + 7) &^ 7
	if room < 8 {
		room = 8
	}
	size := wbHeader + len(key) + room
	if w.cur >= len(w.chunks) || cap(w.chunks[w.cur])-len(w.chunks[w.cur]) < size {
		w.nextChunk(size)
	}
	c := w.chunks[w.cur]
	off := len(c)
	c = c[:off+size]
	w.chunks[w.cur] = c
	e := c[off:]
	binary.LittleEndian.PutUint32(e, uint32(len(key)))
	binary.LittleEndian.PutUint32(e[4:], uint32(room))
	copy(e[wbHeader:], key)
	setWBVal(e, uint32(len(key)), val, deleted)
	w.used += int64(size)
	nref := uint64(w.cur)<<32 | uint64(off)
	if ok {
		w.index[string(key)] = nref // the map keeps its key string (the old entry's bytes, unchanged)
		w.items[w.find(key)] = nref
		return
	}
	k := e[wbHeader : wbHeader+len(key)]
	ks := ""
	if len(k) > 0 {
		ks = unsafe.String(&k[0], len(k))
	}
	w.index[ks] = nref
	w.added = append(w.added, nref)
	w.used += wbIndexCost
}

// find returns the position in items of the first key ≥ key.
func (w *wbLayer) find(key []byte) int {
	i, _ := slices.BinarySearchFunc(w.items, key, w.cmpRef)
	return i
}

// refKey returns the key of the entry at ref (aliasing its chunk).
func (w *wbLayer) refKey(ref uint64) []byte {
	c := w.chunks[ref>>32]
	off := uint32(ref)
	kl := binary.LittleEndian.Uint32(c[off:])
	return c[off+wbHeader : off+wbHeader+kl]
}

// cmpRef compares the key of the entry at ref with key.
func (w *wbLayer) cmpRef(ref uint64, key []byte) int { return bytes.Compare(w.refKey(ref), key) }

// cmpRefs compares the keys of the entries at two refs.
func (w *wbLayer) cmpRefs(a, b uint64) int { return bytes.Compare(w.refKey(a), w.refKey(b)) }

// mergeAdded merges the keys added since the last call (in key order)
// into items. A few keys into many (the small commits of a caught-up
// input: a few keys into a layer of tens of thousands): each added key's
// place is found by a galloping search from the previous one and the items
// between two places are copied as a run, O(k·log(n/k)) comparisons for k
// keys over n items, not one per item of the layer. About as many keys as
// the layer holds (a backlog's large commits): a linear merge.
func (w *wbLayer) mergeAdded() {
	if len(w.added) == 0 {
		return
	}
	if !slices.IsSortedFunc(w.added, w.cmpRefs) {
		slices.SortFunc(w.added, w.cmpRefs) // not the commit path: staged keys are sorted
	}
	out := slices.Grow(w.spare[:0], len(w.items)+len(w.added))
	a := w.items
	if len(w.added)*16 < len(a) {
		for _, b := range w.added {
			i := w.gallop(a, w.refKey(b))
			out = append(append(out, a[:i]...), b)
			a = a[i:]
		}
	} else { // about as many keys as the layer holds: a linear merge
		b := w.added
		for len(a) > 0 && len(b) > 0 {
			if w.cmpRefs(a[0], b[0]) < 0 {
				out, a = append(out, a[0]), a[1:]
			} else {
				out, b = append(out, b[0]), b[1:]
			}
		}
		out = append(out, b...)
	}
	out = append(out, a...)
	w.spare, w.items = w.items[:0], out
	w.added = w.added[:0]
}

// gallop returns the number of refs of a (sorted) whose key is below
// key: probing a[0], a[1], a[3], a[7], … and then a binary search within
// the last step, so a place near the start costs few comparisons.
func (w *wbLayer) gallop(a []uint64, key []byte) int {
	lo, hi := 0, 1
	for hi <= len(a) && w.cmpRef(a[hi-1], key) < 0 {
		lo, hi = hi, 2*hi+1
	}
	hi = min(hi, len(a))
	i, _ := slices.BinarySearchFunc(a[lo:hi], key, w.cmpRef)
	return lo + i
}

func setWBVal(e []byte, kl uint32, val []byte, deleted bool) {
	if deleted {
		binary.LittleEndian.PutUint32(e[8:], wbDeleted)
		return
	}
	copy(e[wbHeader+kl:], val)
	binary.LittleEndian.PutUint32(e[8:], uint32(len(val)))
}

// nextChunk makes w.cur a chunk with room for size bytes: the next reused
// chunk that fits, or a new one.
func (w *wbLayer) nextChunk(size int) {
	for w.cur+1 < len(w.chunks) {
		w.cur++
		if cap(w.chunks[w.cur]) >= size {
			return
		}
	}
	w.chunks = append(w.chunks, allocCacheMem(max(wbChunk, size))[:0])
	w.cur = len(w.chunks) - 1
}

// release returns the chunks' memory; the layer must not be used again.
func (w *wbLayer) release() {
	for _, c := range w.chunks {
		freeCacheMem(c[:cap(c)])
	}
	w.chunks = nil
	clear(w.index)
	w.items, w.spare, w.added = nil, nil, nil
	w.cur, w.used, w.recs = 0, 0, 0
}

// reset empties the layer, keeping its memory. Nothing may alias the
// chunks any more (the flush's store write has returned).
func (w *wbLayer) reset() {
	clear(w.index)
	w.items, w.spare, w.added = w.items[:0], w.spare[:0], w.added[:0]
	for i := range w.chunks {
		w.chunks[i] = w.chunks[i][:0]
	}
	if len(w.chunks) > 4 {
		// Keep a few chunks for the next round; let a burst's go.
		for _, c := range w.chunks[4:] {
			freeCacheMem(c[:cap(c)])
		}
		clear(w.chunks[4:])
		w.chunks = w.chunks[:4]
	}
	w.cur, w.used, w.recs = 0, 0, 0
	w.fill = newFill()
}

// rangeCopy returns copies of the layer's entries in [lower, upper) (nil
// bounds are open), in key order; a tombstone has a nil value.
func (w *wbLayer) rangeCopy(lower, upper []byte) []wbCopy {
	var out []wbCopy
	for _, ref := range w.items[w.find(lower):] {
		kb := w.refKey(ref)
		if !below(kb, upper) {
			break
		}
		v, deleted := wbVal(w.entry(ref))
		c := wbCopy{key: cloneBytes(kb), deleted: deleted}
		if !deleted {
			c.val = cloneBytes(v)
		}
		out = append(out, c)
	}
	return out
}

type wbCopy struct {
	key, val []byte
	deleted  bool
}

// overlayCopies merges two layers' copies (each in key order): upper's
// entry wins on equal keys.
func overlayCopies(lower, upper []wbCopy) []wbCopy {
	if len(lower) == 0 {
		return upper
	}
	if len(upper) == 0 {
		return lower
	}
	out := make([]wbCopy, 0, len(lower)+len(upper))
	for len(lower) > 0 && len(upper) > 0 {
		switch c := bytes.Compare(lower[0].key, upper[0].key); {
		case c < 0:
			out, lower = append(out, lower[0]), lower[1:]
		case c > 0:
			out, upper = append(out, upper[0]), upper[1:]
		default:
			out, lower, upper = append(out, upper[0]), lower[1:], upper[1:]
		}
	}
	return append(append(out, lower...), upper...)
}

// walk passes the layer's entries at items (in key order), merged with the
// staged entries of st (nil: none; staged ones win on equal keys), to add
// in key order. A tombstone's value is nil.
func (w *wbLayer) walk(items []uint64, st *staging, add func(key, value []byte, deleted bool)) {
	var staged []*stagedEntry
	if st != nil {
		staged = st.ordered()
	}
	j := 0
	for _, ref := range items {
		kb := w.refKey(ref)
		for j < len(staged) && bytes.Compare(staged[j].key, kb) < 0 {
			add(staged[j].key, staged[j].val, staged[j].deleted)
			j++
		}
		if j < len(staged) && bytes.Equal(staged[j].key, kb) {
			add(staged[j].key, staged[j].val, staged[j].deleted)
			j++
			continue
		}
		ent := w.entry(ref)
		v, deleted := wbVal(ent)
		add(wbKey(ent), v, deleted)
	}
	for _, e := range staged[j:] {
		add(e.key, e.val, e.deleted)
	}
}

// commitStore makes the finished batch (the staging layer) committed
// locally with next as the changelog offset: written to the store with
// write-through, else kept in the layer. A layer over its bound (before
// this batch) is written with the batch: on this goroutine, or, with
// SetBackgroundFlush on, frozen with the batch in it and written to the
// store by a background goroutine while the loop goes on (freeze): the
// write of a full layer took 20–75 ms on the loop's goroutine, a pause of
// the pipeline every second or so at 20,000 rows/s of the heavy workload
// (docs/BENCHMARKS.md, "Flushes in the background"). The previous frozen
// layer's write must be done before the next freeze or write: at most one
// layer is frozen. On error nothing changed: the store, the layer and the
// staging layer are as before.
func (s *Shard) commitStore(next int64) error {
	if s.wb == nil {
		var b kv.Batch
		s.stage.writeTo(&b)
		b.Put([]byte(offsetKey), binary.BigEndian.AppendUint64(nil, uint64(next)))
		putSince(&b, s.batchStart)
		if err := s.store.Write(&b, kv.WriteOptions{}); err != nil {
			return err
		}
		s.offset, s.stored = next, next
		s.since, s.storedSince = s.batchStart, s.batchStart
		return nil
	}
	// A background write that is done gives its layer up now (a failed
	// one is retried below, before the layer's next freeze).
	s.pollFrozen()
	w := s.wb
	full := w.full(s.opts.WriteBehindBudget.bound(s.opts.WriteBehindBytes))
	if full {
		// At most one layer is frozen: the previous one's write must be
		// done (it usually is: the write takes a fraction of the time the
		// layer takes to fill).
		if err := s.awaitFrozen(); err != nil {
			return err
		}
		if !s.flushInBackground {
			// The layer and the batch, written here (a backlog: see
			// SetBackgroundFlush).
			return s.flushWith(s.stage, next, s.batchStart)
		}
	}
	s.wbMu.Lock()
	n := 0
	for _, e := range s.stage.ordered() {
		w.put(e.key, e.val, e.deleted)
		n++
	}
	w.mergeAdded()
	w.recs += int64(n)
	s.wbMu.Unlock()
	s.offset, s.since = next, s.batchStart
	if full {
		s.freeze()
	}
	return nil
}

// wbFlush is a frozen layer: committed batches up to changelog offset
// next, being written to the store by a background goroutine. Nothing
// changes the layer until it is released; the goroutine and the shard's
// reads only read it.
type wbFlush struct {
	layer *wbLayer
	next  int64
	since int64      // goes with next (sinceKey)
	done  chan error // the write's result; nil once received
	err   error      // the write's error, once received
}

// freeze hands the layer, with the committed offset, to a background
// write and starts a new layer. The shard's reads see the new layer over
// the frozen one over the store until it is retired (the
// store, before or after the write, under the frozen layer is the same
// committed state).
func (s *Shard) freeze() {
	f := &wbFlush{layer: s.wb, next: s.offset, since: s.since, done: make(chan error, 1)}
	s.wbMu.Lock()
	s.frozen, s.wb = f, newWBLayer()
	s.wbMu.Unlock()
	sem := backgroundWrites
	go func() {
		sem.acquire()
		defer sem.release()
		f.done <- s.writeLayer(f.layer, nil, f.next, f.since)
	}()
}

// backgroundWrites bounds the frozen layers an instance writes at once, to
// one per 4 cores (at least one): on a small machine, simultaneous writes
// of several shards' layers took every core from the pipelines at once.
// The writes wait for each other, not the commits: a commit waits only for
// its own shard's previous write, when its next layer is full.
var backgroundWrites = newSemaphore(max(1, runtime.GOMAXPROCS(0)/4))

// semaphore is a counting semaphore.
type semaphore chan struct{}

func newSemaphore(n int) semaphore { return make(semaphore, n) }
func (s semaphore) acquire()       { s <- struct{}{} }
func (s semaphore) release()       { <-s }

// pollFrozen retires the frozen layer if its store write returned
// successfully; a write still running, or failed, leaves it frozen (a
// failed write is retried by awaitFrozen).
func (s *Shard) pollFrozen() {
	f := s.frozen
	if f == nil {
		return
	}
	if f.done != nil {
		select {
		case f.err = <-f.done:
			f.done = nil
		default:
			return
		}
	}
	if f.err == nil {
		s.retireFrozen()
	}
}

// awaitFrozen waits for the frozen layer's store write and retires the
// layer; a failed write is retried here, and if it fails again its error
// is returned and the layer stays frozen.
func (s *Shard) awaitFrozen() error {
	f := s.frozen
	if f == nil {
		return nil
	}
	if f.done != nil {
		f.err = <-f.done
		f.done = nil
	}
	if f.err != nil {
		if f.err = s.writeLayer(f.layer, nil, f.next, f.since); f.err != nil {
			return f.err
		}
	}
	s.retireFrozen()
	return nil
}

// retireFrozen drops the frozen layer, whose write is in the store. Only
// between batches (after resetReads: no iterator of the batch refers to
// the layer); ReadCommitted copies the layer under wbMu, so no reader is
// left once it is dropped under wbMu.
func (s *Shard) retireFrozen() {
	f := s.frozen
	s.wbMu.Lock()
	s.frozen = nil
	s.wbMu.Unlock()
	f.layer.release()
	s.stored, s.storedSince = f.next, f.since
}

// flush writes the frozen layer, then the layer, and the committed offset
// to the store, if they hold anything the store does not.
func (s *Shard) flush() error {
	if s.wb == nil || (s.frozen == nil && s.wb.empty() && s.stored == s.offset) {
		return nil
	}
	s.resetReads() // the write changes the store under the batch's iterator
	if err := s.awaitFrozen(); err != nil {
		return err
	}
	if s.wb.empty() && s.stored == s.offset {
		return nil
	}
	return s.flushWith(nil, s.offset, s.since)
}

// flushWith writes the layer merged with st (nil: none; st wins on equal
// keys) and offset next in one atomic write, and empties the layer. The
// write and the emptying happen under wbMu, so ReadCommitted sees the
// layer over the old store or the new store, never a mix. On error the
// layer is unchanged. No layer may be frozen.
func (s *Shard) flushWith(st *staging, next, since int64) error {
	s.wbMu.Lock()
	defer s.wbMu.Unlock()
	if err := s.writeLayer(s.wb, st, next, since); err != nil {
		return err
	}
	s.wb.reset()
	s.offset, s.stored = next, next
	s.since, s.storedSince = since, since
	return nil
}

// writeLayer writes the layer w merged with the staged entries of st (nil:
// none) and offset next to the store in one atomic write. It only reads
// w, st and the store: the background flush runs it (without st) on its
// own goroutine.
func (s *Shard) writeLayer(w *wbLayer, st *staging, next, since int64) error {
	offset := binary.BigEndian.AppendUint64(nil, uint64(next))
	sinceVal := binary.BigEndian.AppendUint64(nil, uint64(since))
	if ow, ok := s.store.(kv.OrderedWriter); ok {
		// The layer's entries go straight into the store's write: a Batch
		// of them held 80 bytes of operation per entry on the Go heap
		// (14 of the heavy benchmark's 130 MB of live heap during flushes;
		// docs/BENCHMARKS.md, "Flushes without a Batch"). offsetKey sorts
		// after every other key.
		return ow.WriteOrdered(func(add func(key, value []byte, deleted bool)) {
			w.walk(w.items, st, add)
			add([]byte(offsetKey), offset, false)
			if since > 0 {
				add([]byte(sinceKey), sinceVal, false) // after offsetKey
			}
		}, kv.WriteOptions{})
	}
	// A batch of its own, sized exactly, not kept: a flush comes once per
	// WriteBehindBytes of changes, and a batch kept between flushes held
	// its largest flush's operations (80 bytes each, ~13 MiB a shard on
	// the heavy benchmark: 52 of a process's 246 MiB of live heap, doubled
	// in RSS by the GC's headroom) for one allocation per flush.
	var b kv.Batch
	n := len(w.items) + 2
	if st != nil {
		n += st.len()
	}
	b.Grow(n)
	w.walk(w.items, st, func(key, value []byte, deleted bool) {
		if deleted {
			b.Delete(key)
		} else {
			b.Put(key, value)
		}
	})
	b.Put([]byte(offsetKey), offset)
	putSince(&b, since)
	return s.store.Write(&b, kv.WriteOptions{})
}

// frozenLayer is the frozen layer, nil when none; under wbMu from other
// goroutines than the shard's.
func (s *Shard) frozenLayer() *wbLayer {
	if s.frozen == nil {
		return nil
	}
	return s.frozen.layer
}

// SetBackgroundFlush sets how the commits that find the write-behind layer
// full write it: on a background goroutine while the next batches go into
// a new layer (on), or within the commit (off, the default). The engine
// turns it on for the small batches of an application that keeps up with
// its input: there the write paused the pipeline (the tail of the visible
// latency) while a core was idle. In a backlog the batch loop keeps both
// cores busy, and a background write only competes with it (heavy's rate
// was 1–5 % lower; docs/BENCHMARKS.md, "Flushes in the background"). Not
// during a batch's commit.
func (s *Shard) SetBackgroundFlush(on bool) { s.flushInBackground = on }
