package shard

import (
	"bytes"
	"encoding/binary"
	"slices"
	"strings"
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
//   - it holds more than WriteBehindBytes, or more than wbMaxRecords
//     changelog records were committed since the last flush (this bounds
//     the replay after a crash);
//   - a scan needs a store iterator (scans then merge staging over the
//     store, exactly as before: the layer is empty while an iterator lives);
//   - Close, and before every restore entry point (ApplyChangelog, Wipe,
//     the re-seed), so that those see and write a store that is up to date.
//
// Reads see exactly what they saw with write-through: staging → committed
// cache → unflushed layer → store for point reads; scans flush first.
// ReadCommitted (any goroutine) takes a copy of the layer's range and
// creates its store iterator under wbMu, and a flush writes and empties the
// layer under wbMu, so it sees one committed state.
//
// A crash (SIGKILL) loses the layer; the store holds the state and offset of
// the last flush, and restore replays the changelog from there: at most
// wbMaxRecords records (plus one batch) more than with write-through.
//
// Layout: an index map (key → the entry's place) whose key strings alias the
// entries' key bytes, and entries (key, value room, value) back to back in
// byte chunks that are reused after each flush. The only pointers the
// garbage collector follows are the map's strings, into a few large chunks.
type wbLayer struct {
	index  map[string]uint64 // key → chunk<<32 | offset of its entry
	chunks [][]byte          // entries back to back; len = bytes used
	cur    int               // the chunk being filled
	used   int64             // bytes charged: entries + index overhead
	recs   int64             // changelog records committed into the layer
	// kinds has bit min(k, 31) set when the layer holds a key of kind k
	// (its first byte): a scan of other kinds need not flush.
	kinds uint32
}

const (
	// wbHeader: key length, value room, value length (top bit: deleted).
	wbHeader = 12
	// wbChunk is the size of an entry chunk (a larger entry gets its own).
	wbChunk = 256 << 10
	// wbIndexCost is the bytes charged per indexed key for the map.
	wbIndexCost = 48
	wbDeleted   = 1 << 31
	// wbMaxRecords bounds the changelog records committed since the last
	// flush, so a crash replays at most about that many more records
	// (about 0.5 s at the restore rate measured in docs/BENCHMARKS.md).
	wbMaxRecords = 256 << 10
)

// DefaultWriteBehindBytes is the unflushed-layer budget the engine gives
// each shard (see ShardOptions.WriteBehindBytes and docs/BENCHMARKS.md).
const DefaultWriteBehindBytes = 4 << 20

func newWBLayer() *wbLayer { return &wbLayer{index: make(map[string]uint64)} }

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
// It copies key and val.
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
		return
	}
	k := e[wbHeader : wbHeader+len(key)]
	ks := ""
	if len(k) > 0 {
		ks = unsafe.String(&k[0], len(k))
	}
	w.index[ks] = nref
	w.used += wbIndexCost + int64(len(key))
	w.kinds |= 1 << min(key[0], 31)
}

// overlaps reports whether the layer may hold a key in [lower, upper) (nil
// bounds are open): whether it holds a key of a kind the range touches.
func (w *wbLayer) overlaps(lower, upper []byte) bool {
	if w.kinds == 0 {
		return false
	}
	lo, hi := 0, 31
	if len(lower) > 0 {
		lo = int(min(lower[0], 31))
	}
	if upper != nil {
		switch {
		case len(upper) == 0:
			return false
		case len(upper) == 1 && upper[0] == 0:
			return false
		case len(upper) == 1:
			hi = int(min(upper[0]-1, 31)) // [.., {k}) ends before kind k
		default:
			hi = int(min(upper[0], 31))
		}
	}
	if lo > hi {
		return false
	}
	mask := uint32(1<<(hi+1)-1) &^ uint32(1<<lo-1)
	return w.kinds&mask != 0
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
	w.chunks = append(w.chunks, make([]byte, 0, max(wbChunk, size)))
	w.cur = len(w.chunks) - 1
}

// wbItem is one indexed key and its entry, for sorting.
type wbItem struct {
	key string
	ref uint64
}

// sorted returns the layer's entries in key order; items is reused.
func (w *wbLayer) sorted(items []wbItem) []wbItem {
	items = items[:0]
	for k, ref := range w.index {
		items = append(items, wbItem{k, ref})
	}
	slices.SortFunc(items, func(a, b wbItem) int { return strings.Compare(a.key, b.key) })
	return items
}

// reset empties the layer, keeping its memory. Nothing may alias the
// chunks any more (the flush's store write has returned).
func (w *wbLayer) reset() {
	clear(w.index)
	for i := range w.chunks {
		w.chunks[i] = w.chunks[i][:0]
	}
	if len(w.chunks) > 4 {
		// Keep a few chunks for the next round; let a burst's go.
		clear(w.chunks[4:])
		w.chunks = w.chunks[:4]
	}
	w.cur, w.used, w.recs, w.kinds = 0, 0, 0, 0
}

// rangeCopy returns copies of the layer's entries in [lower, upper) (nil
// bounds are open), in key order; a tombstone has a nil value.
func (w *wbLayer) rangeCopy(lower, upper []byte) []wbCopy {
	var out []wbCopy
	for k, ref := range w.index {
		kb := unsafe.Slice(unsafe.StringData(k), len(k))
		if (lower != nil && bytes.Compare(kb, lower) < 0) || !below(kb, upper) {
			continue
		}
		v, deleted := wbVal(w.entry(ref))
		c := wbCopy{key: cloneBytes(kb), deleted: deleted}
		if !deleted {
			c.val = cloneBytes(v)
		}
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b wbCopy) int { return bytes.Compare(a.key, b.key) })
	return out
}

type wbCopy struct {
	key, val []byte
	deleted  bool
}

// addTo appends the layer's entries, merged with the staged entries of st
// (nil: none; staged ones win on equal keys), to b in key order.
func (w *wbLayer) addTo(b *kv.Batch, items []wbItem, st *staging) {
	var e *stagedEntry
	if st != nil {
		e = st.first()
	}
	for _, it := range items {
		kb := unsafe.Slice(unsafe.StringData(it.key), len(it.key))
		for e != nil && bytes.Compare(e.key, kb) < 0 {
			addStaged(b, e)
			e = e.next[0]
		}
		if e != nil && bytes.Equal(e.key, kb) {
			addStaged(b, e)
			e = e.next[0]
			continue
		}
		ent := w.entry(it.ref)
		if v, deleted := wbVal(ent); deleted {
			b.Delete(wbKey(ent))
		} else {
			b.Put(wbKey(ent), v)
		}
	}
	for ; e != nil; e = e.next[0] {
		addStaged(b, e)
	}
}

func addStaged(b *kv.Batch, e *stagedEntry) {
	if e.deleted {
		b.Delete(e.key)
	} else {
		b.Put(e.key, e.val)
	}
}

// commitStore makes the finished batch (the staging layer) committed
// locally with next as the changelog offset: written to the store with
// write-through, else kept in the layer, or written with the layer when
// the layer is over a bound. On error nothing changed: the store, the
// layer and the staging layer are as before.
func (s *Shard) commitStore(next int64) error {
	if s.wb == nil {
		var b kv.Batch
		s.stage.writeTo(&b)
		b.Put([]byte(offsetKey), binary.BigEndian.AppendUint64(nil, uint64(next)))
		if err := s.store.Write(&b, kv.WriteOptions{}); err != nil {
			return err
		}
		s.offset, s.stored = next, next
		return nil
	}
	w := s.wb
	if w.used >= s.opts.WriteBehindBytes || w.recs >= wbMaxRecords {
		return s.flushWith(s.stage, next)
	}
	s.wbMu.Lock()
	n := 0
	for e := s.stage.first(); e != nil; e = e.next[0] {
		w.put(e.key, e.val, e.deleted)
		n++
	}
	w.recs += int64(n)
	s.wbMu.Unlock()
	s.offset = next
	return nil
}

// flush writes the layer and the committed offset to the store, if it
// has anything the store does not.
func (s *Shard) flush() error {
	if s.wb == nil || (s.wb.empty() && s.stored == s.offset) {
		return nil
	}
	return s.flushWith(nil, s.offset)
}

// flushWith writes the layer merged with st (nil: none; st wins on equal
// keys) and offset next in one atomic write, and empties the layer. The
// write and the emptying happen under wbMu, so ReadCommitted sees the
// layer over the old store or the new store, never a mix. On error the
// layer is unchanged.
func (s *Shard) flushWith(st *staging, next int64) error {
	w := s.wb
	s.wbMu.Lock()
	defer s.wbMu.Unlock()
	s.wbItems = w.sorted(s.wbItems)
	b := &s.wbBatch
	b.Reset()
	n := len(s.wbItems) + 1
	if st != nil {
		n += st.len()
	}
	b.Grow(n)
	w.addTo(b, s.wbItems, st)
	b.Put([]byte(offsetKey), binary.BigEndian.AppendUint64(nil, uint64(next)))
	err := s.store.Write(b, kv.WriteOptions{})
	clear(s.wbItems) // drop the key strings: the chunks are reused
	clear(b.Ops())   // and the batch's slices of them and of staged values
	b.Reset()
	if err != nil {
		return err
	}
	w.reset()
	s.offset, s.stored = next, next
	return nil
}

// errIter is an iterator that has failed before its first step.
type errIter struct{ err error }

func (errIter) First() bool        { return false }
func (errIter) Last() bool         { return false }
func (errIter) Next() bool         { return false }
func (errIter) Prev() bool         { return false }
func (errIter) SeekGE([]byte) bool { return false }
func (errIter) SeekLT([]byte) bool { return false }
func (errIter) Valid() bool        { return false }
func (errIter) Key() []byte        { return nil }
func (errIter) Value() []byte      { return nil }
func (i errIter) Error() error     { return i.err }
func (errIter) Close() error       { return nil }
