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
// its own entry, keyed by a sequence number: Put writes 0..n-1, appends
// continue after the greatest sequence present (expired or not), so key
// order is insertion order and appending never rewrites existing elements.
//
// Finding "the greatest sequence present" costs a store read, so the shard
// remembers each list's next sequence for the rest of the batch once a Get,
// Put, append or Clear of that list has established it (Shard.listTail):
// the common read-then-append reads the store once. The stored format is
// unchanged; nothing of the tail is persisted.
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
}

// NewListState declares a ListState (only during Init).
func NewListState[T any](s *Shard, name string, c state.Codec[T], opts ...state.Option) (state.ListState[T], error) {
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
	err := l.s.scan(prefix, end, func(k, v []byte) bool {
		seen = true
		lastSeq, lastValid = listSeq(prefix, k)
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
	old, err := l.s.entries(prefix, keys.PrefixEnd(prefix))
	if err != nil {
		return l.err("Put", err)
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
