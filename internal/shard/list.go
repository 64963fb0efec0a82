package shard

import (
	"encoding/binary"
	"fmt"
	"iter"
	"slices"

	"github.com/kstate/kstate/changelog"
	"github.com/kstate/kstate/internal/changelogfmt"
	"github.com/kstate/kstate/internal/keys"
	"github.com/kstate/kstate/state"
)

// ListState holds an ordered list of T per grouping key. Each element is
// its own entry, keyed by a sequence number: Put writes 0..n-1 (or keeps a
// run of the old list and appends after it, below), appends continue after
// the greatest sequence present (expired or not), so key order is insertion
// order and appending never rewrites existing elements.
//
// Finding "the greatest sequence present" costs a store read, so the shard
// remembers each list's next sequence for the rest of the batch once a Get,
// Put, append or Clear of that list has established it (Shard.listTail):
// the common read-then-append reads the store once. The stored format is
// unchanged; nothing of the tail is persisted.
//
// A Put reads the list's old entries to replace them. When a Get of the
// same list ran earlier in the same read generation (the common
// read-modify-Put), the entries it saw are reused (listMemo) instead of a
// second scan. A Put whose new list keeps a run of the old one (a sliding
// window: drop the first elements, append new ones) deletes the dropped
// head and appends after the old tail instead of rewriting every position,
// when that stages fewer writes; elements left in place are byte for byte
// what the full rewrite would have written (same payload, schema version
// and expiry), so the list read back is the same, only its sequence
// numbers differ (they were never contiguous under a TTL either).
type listState[T any] struct {
	varBase
	c       state.Codec[T]
	enc     encoder[T]
	dec     *decoder[T]
	nilable bool
	seqKey  []byte // scratch for element keys (the staging layer copies them)
	// ebuf, offs and eps are scratch for encodeAll (write copies the
	// encodings).
	ebuf []byte
	offs []int
	eps  [][]byte
	memo listMemo
}

// listMemo is every entry (expired ones included) of one list as the last
// Get saw it, for one read generation of the shard (TimerGen: it changes at
// every batch boundary, restore, re-seed and savepoint rollback). Only this
// listState writes under its prefixes, and each of its writes drops the
// memo, so while prefix and generation match it is the merged view.
type listMemo struct {
	valid  bool
	gen    uint64
	prefix []byte
	buf    []byte   // keys and values back to back
	offs   [][4]int // per entry: key start, key end, value start, value end
	refs   []entryRef
}

// maxListMemo bounds the entries a Get remembers: a longer list is
// rescanned by Put (the memo is for short lists read and rewritten whole).
const maxListMemo = 64

// add appends one entry; false once the list is too long to remember.
func (m *listMemo) add(k, v []byte) bool {
	if len(m.offs) >= maxListMemo {
		return false
	}
	ks := len(m.buf)
	m.buf = append(m.buf, k...)
	vs := len(m.buf)
	m.buf = append(m.buf, v...)
	m.offs = append(m.offs, [4]int{ks, vs, vs, len(m.buf)})
	return true
}

// entries returns the remembered entries of prefix in generation gen, or
// ok=false. The refs alias the memo's buffer: valid until the next Get.
func (m *listMemo) entries(prefix []byte, gen uint64) ([]entryRef, bool) {
	if !m.valid || m.gen != gen || string(m.prefix) != string(prefix) {
		return nil, false
	}
	m.refs = m.refs[:0]
	for _, o := range m.offs {
		m.refs = append(m.refs, entryRef{m.buf[o[0]:o[1]:o[1]], m.buf[o[2]:o[3]:o[3]]})
	}
	return m.refs, true
}

// NewListState declares a ListState (only during Init).
func NewListState[T any](s *Shard, name string, c state.Codec[T], opts ...state.Option) (state.ListState[T], error) {
	if packedOpts(opts) {
		return newPackedList(s, name, c, opts)
	}
	b, err := s.declare("ListState", kindList, name, schemaOf(c), "", []any{c}, opts)
	if err != nil {
		return nil, err
	}
	return &listState[T]{varBase: b, c: c, enc: newEncoder(c), dec: newDecoder(name, c, b.schemas, b.schemaID), nilable: nilable[T]()}, nil
}

// Exists reports whether the current key's list has a (non-expired) element.
func (l *listState[T]) Exists() (bool, error) {
	if err := l.check("Exists", false); err != nil {
		return false, err
	}
	found := false
	var derr error
	prefix, end := l.scanBounds()
	err := l.s.scan(prefix, end, func(k, v []byte) bool {
		h, _, err := changelog.DecodeValue(v)
		if err != nil {
			derr = fmt.Errorf("%w: key %x: %w", state.ErrCorrupt, k, err)
			return false
		}
		found = !l.s.expired(h)
		return !found
	})
	if err == nil {
		err = derr
	}
	return found, l.err("Exists", err)
}

// Get returns the current key's (non-expired) elements in insertion order;
// an empty sequence when there are none. Elements are decoded eagerly, so
// decoding errors are reported here and the sequence may be used after the
// batch moves on.
func (l *listState[T]) Get() (iter.Seq[T], error) {
	if err := l.check("Get", false); err != nil {
		return nil, err
	}
	var out []T
	var derr error
	prefix, end := l.scanBounds() // setListTail copies prefix
	// The greatest element seen, expired or not (k is only valid during fn).
	seen, lastSeq, lastValid := false, uint64(0), false
	memo := &l.memo
	memo.valid, memo.buf, memo.offs = false, memo.buf[:0], memo.offs[:0]
	fits := true
	err := l.s.scan(prefix, end, func(k, v []byte) bool {
		seen = true
		lastSeq, lastValid = listSeq(prefix, k)
		fits = fits && memo.add(k, v)
		h, p, err := changelog.DecodeValue(v)
		if err != nil {
			derr = fmt.Errorf("%w: key %x: %w", state.ErrCorrupt, k, err)
			return false
		}
		if l.s.expired(h) {
			return true
		}
		val, err := l.dec.decode(h, p)
		if err != nil {
			derr = err
			return false
		}
		out = append(out, val)
		return true
	})
	if err == nil {
		err = derr
	}
	if err != nil {
		return nil, l.err("Get", err)
	}
	// The scan saw the whole list: remember where an append goes, so that
	// the common read-then-append does no second store read.
	switch {
	case !seen:
		l.s.setListTail(prefix, 0)
	case lastValid:
		l.s.setListTail(prefix, lastSeq+1)
	}
	if fits && l.s.inBatch {
		memo.valid, memo.gen, memo.prefix = true, l.s.TimerGen(), append(memo.prefix[:0], prefix...)
	}
	return slices.Values(out), nil
}

// encodeAll encodes vs, rejecting an empty list and nil elements before
// anything is staged. The encodings are in l's scratch buffers, valid until
// the next encodeAll (write copies them).
func (l *listState[T]) encodeAll(vs []T) ([][]byte, error) {
	if len(vs) == 0 {
		return nil, state.ErrEmptyList
	}
	buf, offs := l.ebuf[:0], l.offs[:0]
	for i, v := range vs {
		if l.nilable && isNil(v) {
			return nil, fmt.Errorf("%w (element %d)", state.ErrNilValue, i)
		}
		var err error
		if buf, err = l.enc.appendTo(buf, v); err != nil {
			return nil, fmt.Errorf("element %d: %w", i, err)
		}
		offs = append(offs, len(buf)) // buf may still move: slice it after
	}
	ps, start := l.eps[:0], 0
	for _, end := range offs {
		ps = append(ps, buf[start:end:end])
		start = end
	}
	l.ebuf, l.offs, l.eps = buf, offs, ps
	return ps, nil
}

// Put replaces the current key's list with vs (all with a fresh TTL).
func (l *listState[T]) Put(vs []T) error {
	if err := l.check("Put", true); err != nil {
		return err
	}
	ps, err := l.encodeAll(vs)
	if err != nil {
		return l.err("Put", err)
	}
	exp, err := l.newExpiry()
	if err != nil {
		return l.err("Put", err)
	}
	prefix := l.prefix()
	l.s.dropListTail(prefix)
	old, known := l.memo.entries(prefix, l.s.TimerGen())
	if !known {
		if old, err = l.s.entries(prefix, keys.PrefixEnd(prefix)); err != nil {
			return l.err("Put", err)
		}
	}
	// Any return below leaves the list written (or the batch failing): the
	// memo no longer describes it. old stays readable (the buffer is only
	// reused by the next Get).
	l.memo.valid = false
	h := changelog.Header{SchemaID: l.schemaID, Expiry: exp}
	if k, next, ok, err := l.shift(prefix, old, ps, h); err != nil {
		return l.err("Put", err)
	} else if ok {
		for _, e := range old[:k] {
			if err := l.s.deleteEntry(e.key, e.val); err != nil {
				return l.err("Put", err)
			}
		}
		kept := len(old) - k
		if err := l.write(prefix, next, ps[kept:], exp); err != nil {
			return l.err("Put", err)
		}
		// Counted as the rewrite would count them: the list's rows.
		l.s.batchStats.RowsUpdated += int64(kept)
		l.s.batchStats.RowsRemoved += int64(max(0, len(old)-len(ps)))
		l.s.setListTail(prefix, next+uint64(len(ps)-kept))
		return nil
	}
	for _, e := range old {
		if seq, ok := listSeq(prefix, e.key); ok && seq < uint64(len(ps)) {
			// Overwritten below: only its TTL index entry has to go.
			h, _, err := changelog.DecodeValue(e.val)
			if err != nil {
				return l.err("Put", fmt.Errorf("%w: key %x: %w", state.ErrCorrupt, e.key, err))
			}
			if h.Expiry != changelog.NoExpiry && h.Expiry != exp {
				l.s.set(changelogfmt.TTLKey(h.Expiry, e.key), nil)
			}
			continue
		}
		if err := l.s.deleteEntry(e.key, e.val); err != nil {
			return l.err("Put", err)
		}
		l.s.batchStats.RowsRemoved++
	}
	if err := l.write(prefix, 0, ps, exp); err != nil {
		return l.err("Put", err)
	}
	l.s.setListTail(prefix, uint64(len(ps)))
	return nil
}

// shift decides whether Put can keep a run of the old list in place: the
// old entries from index k on (k >= 1) are, byte for byte, what Put would
// write as the first len(old)-k new elements (payload under header h), so
// deleting old[:k] and writing the remaining new elements after the old
// tail (seq next on) leaves the same list. It reports ok only when that
// stages fewer writes than the rewrite at 0..n-1 (n writes plus a delete
// per old element at or past n).
func (l *listState[T]) shift(prefix []byte, old []entryRef, ps [][]byte, h changelog.Header) (k int, next uint64, ok bool, err error) {
	if len(old) < 2 {
		return 0, 0, false, nil
	}
	last, valid := listSeq(prefix, old[len(old)-1].key)
	if !valid {
		return 0, 0, false, nil
	}
	rewrite := len(ps)
	for _, e := range old {
		seq, valid := listSeq(prefix, e.key)
		if !valid {
			return 0, 0, false, nil
		}
		if seq >= uint64(len(ps)) {
			rewrite++
		}
	}
	// The smallest k whose run matches: it keeps the most elements.
	for k = 1; k < len(old) && len(old)-k <= len(ps); k++ {
		cost := k + len(ps) - (len(old) - k)
		if cost >= rewrite {
			continue
		}
		match := true
		for i, e := range old[k:] {
			eh, p, derr := changelog.DecodeValue(e.val)
			if derr != nil {
				return 0, 0, false, fmt.Errorf("%w: key %x: %w", state.ErrCorrupt, e.key, derr)
			}
			if eh != h || string(p) != string(ps[i]) {
				match = false
				break
			}
		}
		if match {
			return k, last + 1, true, nil
		}
	}
	return 0, 0, false, nil
}

// AppendValue appends v to the current key's list.
func (l *listState[T]) AppendValue(v T) error { return l.append("AppendValue", []T{v}) }

// AppendList appends vs (not empty) to the current key's list.
func (l *listState[T]) AppendList(vs []T) error { return l.append("AppendList", vs) }

func (l *listState[T]) append(op string, vs []T) error {
	if err := l.check(op, true); err != nil {
		return err
	}
	ps, err := l.encodeAll(vs)
	if err != nil {
		return l.err(op, err)
	}
	exp, err := l.newExpiry()
	if err != nil {
		return l.err(op, err)
	}
	l.memo.valid = false
	prefix, end := l.scanBounds() // write and setListTail copy prefix
	next, known := l.s.listTail(prefix)
	if !known {
		last, ok, err := l.s.last(prefix, end)
		if err != nil {
			return l.err(op, err)
		}
		if ok {
			seq, valid := listSeq(prefix, last)
			if !valid {
				return l.err(op, fmt.Errorf("%w: list element key %x", state.ErrCorrupt, last))
			}
			next = seq + 1
		}
	}
	if err := l.write(prefix, next, ps, exp); err != nil {
		return l.err(op, err)
	}
	l.s.setListTail(prefix, next+uint64(len(ps)))
	return nil
}

// write stages elements at seq, seq+1, ... (fresh keys: no old index to
// clean). An element over MaxRecordBytes is refused (ErrValueTooLarge),
// with the elements after it; those before it stay staged (the failing
// call's changes are discarded or its batch fails).
func (l *listState[T]) write(prefix []byte, seq uint64, ps [][]byte, exp int64) error {
	for i, p := range ps {
		l.seqKey = binary.BigEndian.AppendUint64(append(l.seqKey[:0], prefix...), seq+uint64(i))
		key := l.seqKey
		val := l.s.stage.appendValue(changelog.Header{SchemaID: l.schemaID, Expiry: exp}, p) // a copy
		if err := l.s.checkRecordSize(key, val); err != nil {
			return err
		}
		l.s.setOwned(key, val)
		if exp != changelog.NoExpiry {
			l.s.set(changelogfmt.TTLKey(exp, key), indexValue)
		}
		l.s.batchStats.RowsUpdated++
	}
	return nil
}

// Clear removes the current key's list.
func (l *listState[T]) Clear() error {
	if err := l.check("Clear", true); err != nil {
		return err
	}
	l.memo.valid = false
	prefix := l.prefix()
	l.s.dropListTail(prefix)
	if err := l.s.deleteRange(prefix, keys.PrefixEnd(prefix)); err != nil {
		return l.err("Clear", err)
	}
	l.s.setListTail(prefix, 0)
	return nil
}

func listSeq(prefix, key []byte) (uint64, bool) {
	if len(key) != len(prefix)+8 {
		return 0, false
	}
	return binary.BigEndian.Uint64(key[len(prefix):]), true
}
