package shard

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"iter"
	"slices"

	"github.com/kstate/kstate/changelog"
	"github.com/kstate/kstate/state"
)

// Packed lists and maps (state.Packed).
//
// A packed variable keeps a grouping key's whole list or map as one stored
// value under the variable's state key with an empty suffix (the key a
// ValueState uses), so a change writes one store key and one changelog
// record instead of one per element or entry. Every write rewrites the
// whole value: it suits small collections (a key's last few values, a
// handful of aggregates), not long ones.
//
// The payload, behind the usual value header (its schema id is the value
// schema version of every element; there is no expiry):
//
//	list: element*                   element = uvarint(len) | encoded value
//	map:  entry*, by encoded key     entry   = uvarint(len) | encoded user key | uvarint(len) | encoded value
//
// An empty list or map is no value at all (the key is deleted). The
// registry records the kinds kindPackedList and kindPackedMap, so declaring
// a variable packed that was stored unpacked (or the reverse) fails at
// start-up with state.ErrKindChanged, as does a build that does not know
// the layout.
const (
	kindPackedList = "packed list"
	kindPackedMap  = "packed map"
)

// errPackedTTL: per-element expiry is what a TTL means for lists and maps,
// and a packed value has one header.
var errPackedTTL = errors.New("state: Packed and WithTTL together: a packed list or map has no per-element expiry (drop one of the two options)")

// errBadPacked is a packed payload whose lengths do not add up.
var errBadPacked = fmt.Errorf("%w: a packed item overruns the value", changelog.ErrBadValue)

// IsPackedKind reports whether kind (VarInfo.Kind) is a packed list or map.
func IsPackedKind(kind string) bool { return kind == kindPackedList || kind == kindPackedMap }

// packedOpts reports whether opts ask for the packed layout.
func packedOpts(opts []state.Option) bool {
	var o state.Options
	for _, opt := range opts {
		opt(&o)
	}
	return o.Packed
}

// appendItem appends one length-prefixed item to dst.
func appendItem(dst, b []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}

// nextItem splits p's first length-prefixed item off.
func nextItem(p []byte) (item, rest []byte, err error) {
	n, w := binary.Uvarint(p)
	if w <= 0 || n > uint64(len(p)-w) {
		return nil, nil, errBadPacked
	}
	end := w + int(n)
	return p[w:end:end], p[end:], nil
}

// packedBase is what packed lists and maps share: the key's one value.
type packedBase struct {
	varBase
	buf []byte // the payload being built (putEntry copies it)
	// memo is the current key's value as the last read or write left it,
	// while the shard's read generation (TimerGen: it changes at every
	// batch boundary, restore and savepoint rollback) is the same: a
	// handler's several operations on one key's map or list then look it
	// up once. Only this variable writes its keys (a packed value has no
	// TTL to expire it).
	memo struct {
		valid, ok bool
		gen       uint64
		key       []byte // the grouping key
		h         changelog.Header
		p         []byte
	}
}

// read returns the current key's live value, valid until the next write.
func (b *packedBase) read() (changelog.Header, []byte, bool, error) {
	m := &b.memo
	if m.valid && m.gen == b.s.TimerGen() && bytes.Equal(m.key, b.s.key) {
		return m.h, m.p, m.ok, nil
	}
	h, p, ok, err := b.s.readLive(b.stateKey(nil))
	if err != nil {
		m.valid = false
		return h, nil, false, err
	}
	b.remember(h, p, ok)
	return h, m.p, ok, nil
}

// remember makes (h, p, ok) the memo of the current key's value.
func (b *packedBase) remember(h changelog.Header, p []byte, ok bool) {
	m := &b.memo
	m.valid, m.ok, m.gen, m.h = true, ok, b.s.TimerGen(), h
	m.key = append(m.key[:0], b.s.key...)
	m.p = append(m.p[:0], p...)
}

// current reports whether a value with header h was written under the
// variable's current schema version (its items can be copied as they are).
func (b *packedBase) current(h changelog.Header) bool {
	id := h.SchemaID
	if id == 0 && len(b.schemas) > 0 {
		id = 1
	}
	return id == b.schemaID
}

// write stores payload as the key's value, or deletes the key when it is
// empty.
func (b *packedBase) write(payload []byte) error {
	b.memo.valid = false // until the write is staged
	key := b.stateKey(nil)
	if len(payload) == 0 {
		old, ok, err := b.s.get(key)
		if err != nil || !ok {
			return err
		}
		if err := b.s.deleteEntry(key, old); err != nil {
			return err
		}
		b.s.batchStats.RowsRemoved++
		b.remember(changelog.Header{}, nil, false)
		return nil
	}
	if err := b.s.putEntry(key, payload, b.schemaID, changelog.NoExpiry, false); err != nil {
		return err
	}
	b.remember(changelog.Header{SchemaID: b.schemaID, Expiry: changelog.NoExpiry}, payload, true)
	return nil
}

// exists reports whether the current key has a value.
func (b *packedBase) exists(op string) (bool, error) {
	if err := b.check(op, false); err != nil {
		return false, err
	}
	_, _, ok, err := b.read()
	return ok, b.err(op, err)
}

// clear removes the current key's value.
func (b *packedBase) clear() error {
	if err := b.check("Clear", true); err != nil {
		return err
	}
	return b.err("Clear", b.write(nil))
}

// packedList is a ListState kept as one value per key.
type packedList[T any] struct {
	packedBase
	enc     encoder[T]
	dec     *decoder[T]
	nilable bool
}

func newPackedList[T any](s *Shard, name string, c state.Codec[T], opts []state.Option) (state.ListState[T], error) {
	b, err := s.declare("ListState", kindPackedList, name, schemaOf(c), "", []any{c}, opts)
	if err != nil {
		return nil, err
	}
	return &packedList[T]{packedBase: packedBase{varBase: b}, enc: newEncoder(c),
		dec: newDecoder(name, c, b.schemas, b.schemaID), nilable: nilable[T]()}, nil
}

// Exists reports whether the current key's list has an element.
func (l *packedList[T]) Exists() (bool, error) { return l.exists("Exists") }

// Get returns the current key's elements in insertion order.
func (l *packedList[T]) Get() (iter.Seq[T], error) {
	if err := l.check("Get", false); err != nil {
		return nil, err
	}
	h, p, ok, err := l.read()
	if err != nil || !ok {
		return slices.Values([]T(nil)), l.err("Get", err)
	}
	out, err := l.decodeAll(h, p, nil)
	if err != nil {
		return nil, l.err("Get", err)
	}
	return slices.Values(out), nil
}

// decodeAll appends the elements of payload p (header h) to out.
func (l *packedList[T]) decodeAll(h changelog.Header, p []byte, out []T) ([]T, error) {
	for i := 0; len(p) > 0; i++ {
		item, rest, err := nextItem(p)
		if err != nil {
			return nil, fmt.Errorf("%w: key %x: %w", state.ErrCorrupt, l.stateKey(nil), err)
		}
		v, err := l.dec.decode(h, item)
		if err != nil {
			return nil, fmt.Errorf("element %d: %w", i, err)
		}
		out, p = append(out, v), rest
	}
	return out, nil
}

// appendAll appends the items of vs to l.buf, rejecting nil elements.
func (l *packedList[T]) appendAll(vs []T) error {
	for i, v := range vs {
		if l.nilable && isNil(v) {
			return fmt.Errorf("%w (element %d)", state.ErrNilValue, i)
		}
		e, err := l.enc.encode(v)
		if err != nil {
			return fmt.Errorf("element %d: %w", i, err)
		}
		l.buf = appendItem(l.buf, e)
	}
	return nil
}

// Put replaces the current key's list with vs.
func (l *packedList[T]) Put(vs []T) error {
	if err := l.check("Put", true); err != nil {
		return err
	}
	if len(vs) == 0 {
		return l.err("Put", state.ErrEmptyList)
	}
	l.buf = l.buf[:0]
	if err := l.appendAll(vs); err != nil {
		return l.err("Put", err)
	}
	return l.err("Put", l.write(l.buf))
}

// AppendValue appends v to the current key's list.
func (l *packedList[T]) AppendValue(v T) error { return l.appendList("AppendValue", []T{v}) }

// AppendList appends vs (not empty) to the current key's list.
func (l *packedList[T]) AppendList(vs []T) error {
	if len(vs) == 0 {
		if err := l.check("AppendList", true); err != nil {
			return err
		}
		return l.err("AppendList", state.ErrEmptyList)
	}
	return l.appendList("AppendList", vs)
}

func (l *packedList[T]) appendList(op string, vs []T) error {
	if err := l.check(op, true); err != nil {
		return err
	}
	h, p, ok, err := l.read()
	if err != nil {
		return l.err(op, err)
	}
	l.buf = l.buf[:0]
	switch {
	case !ok:
	case l.current(h):
		l.buf = append(l.buf, p...)
	default:
		// Written under an older schema: the whole value is rewritten under
		// the current one.
		old, err := l.decodeAll(h, p, nil)
		if err != nil {
			return l.err(op, err)
		}
		if err := l.appendAll(old); err != nil {
			return l.err(op, err)
		}
	}
	if err := l.appendAll(vs); err != nil {
		return l.err(op, err)
	}
	return l.err(op, l.write(l.buf))
}

// Clear removes the current key's list.
func (l *packedList[T]) Clear() error { return l.clear() }

// packedMap is a MapState kept as one value per key.
type packedMap[K, V any] struct {
	packedBase
	kc         state.Codec[K]
	kenc       encoder[K]
	venc       encoder[V]
	dec        *decoder[V]
	knil, vnil bool
	kb         []byte // the encoded user key of the operation
}

func newPackedMap[K, V any](s *Shard, name string, kc state.Codec[K], vc state.Codec[V], opts []state.Option) (state.MapState[K, V], error) {
	b, err := s.declare("MapState", kindPackedMap, name, schemaOf(vc), schemaOf(kc), []any{kc, vc}, opts)
	if err != nil {
		return nil, err
	}
	return &packedMap[K, V]{packedBase: packedBase{varBase: b}, kc: kc, kenc: newEncoder(kc), venc: newEncoder(vc),
		dec: newDecoder(name, vc, b.schemas, b.schemaID), knil: nilable[K](), vnil: nilable[V]()}, nil
}

// userKey encodes k into m.kb.
func (m *packedMap[K, V]) userKey(k K) ([]byte, error) {
	if m.knil && isNil(k) {
		return nil, fmt.Errorf("%w (map key)", state.ErrNilValue)
	}
	b, err := m.kenc.appendTo(m.kb[:0], k)
	if err != nil {
		return nil, fmt.Errorf("encode map key: %w", err)
	}
	m.kb = b
	return b, nil
}

// each calls fn with every entry of payload p, in key order, until fn
// returns false.
func (m *packedMap[K, V]) each(p []byte, fn func(ek, ev []byte) bool) error {
	for len(p) > 0 {
		ek, rest, err := nextItem(p)
		if err == nil {
			var ev []byte
			if ev, rest, err = nextItem(rest); err == nil {
				if !fn(ek, ev) {
					return nil
				}
				p = rest
				continue
			}
		}
		return fmt.Errorf("%w: key %x: %w", state.ErrCorrupt, m.stateKey(nil), err)
	}
	return nil
}

// lookup returns the encoded value of ek in the current key's map.
func (m *packedMap[K, V]) lookup(ek []byte) (changelog.Header, []byte, bool, error) {
	h, p, ok, err := m.read()
	if err != nil || !ok {
		return h, nil, false, err
	}
	var val []byte
	found := false
	err = m.each(p, func(k, v []byte) bool {
		switch c := bytes.Compare(k, ek); {
		case c == 0:
			val, found = v, true
			return false
		case c > 0:
			return false
		}
		return true
	})
	return h, val, found, err
}

// Exists reports whether the current key's map has an entry.
func (m *packedMap[K, V]) Exists() (bool, error) { return m.exists("Exists") }

// GetValue returns the value of k, or ok=false when absent.
func (m *packedMap[K, V]) GetValue(k K) (V, bool, error) {
	var zero V
	if err := m.check("GetValue", false); err != nil {
		return zero, false, err
	}
	ek, err := m.userKey(k)
	if err != nil {
		return zero, false, m.err("GetValue", err)
	}
	h, ev, ok, err := m.lookup(ek)
	if err != nil || !ok {
		return zero, false, m.err("GetValue", err)
	}
	v, err := m.dec.decode(h, ev)
	if err != nil {
		return zero, false, m.err("GetValue", err)
	}
	return v, true, nil
}

// ContainsKey reports whether k has an entry.
func (m *packedMap[K, V]) ContainsKey(k K) (bool, error) {
	if err := m.check("ContainsKey", false); err != nil {
		return false, err
	}
	ek, err := m.userKey(k)
	if err != nil {
		return false, m.err("ContainsKey", err)
	}
	_, _, ok, err := m.lookup(ek)
	return ok, m.err("ContainsKey", err)
}

// UpdateValue sets k to v.
func (m *packedMap[K, V]) UpdateValue(k K, v V) error {
	if err := m.check("UpdateValue", true); err != nil {
		return err
	}
	ek, err := m.userKey(k)
	if err != nil {
		return m.err("UpdateValue", err)
	}
	if m.vnil && isNil(v) {
		return m.err("UpdateValue", state.ErrNilValue)
	}
	nv, err := m.venc.encode(v)
	if err != nil {
		return m.err("UpdateValue", err)
	}
	return m.err("UpdateValue", m.rewrite(ek, nv, true))
}

// RemoveKey removes k; a no-op when absent.
func (m *packedMap[K, V]) RemoveKey(k K) error {
	if err := m.check("RemoveKey", true); err != nil {
		return err
	}
	ek, err := m.userKey(k)
	if err != nil {
		return m.err("RemoveKey", err)
	}
	return m.err("RemoveKey", m.rewrite(ek, nil, false))
}

// rewrite writes the current key's map with ek set to nv (put) or removed
// (!put). It writes nothing when that changes nothing: a put of the bytes
// already stored under the current schema, or a removal of an absent key.
func (m *packedMap[K, V]) rewrite(ek, nv []byte, put bool) error {
	h, p, ok, err := m.read()
	if err != nil {
		return err
	}
	cur := !ok || m.current(h)
	m.buf = m.buf[:0]
	done, changed := false, false
	add := func(k, v []byte) error {
		if !cur {
			// Written under an older schema: every value is rewritten
			// under the current one.
			old, err := m.dec.decode(h, v)
			if err != nil {
				return err
			}
			e, err := m.venc.appendTo(nil, old)
			if err != nil {
				return err
			}
			v = e
		}
		m.buf = appendItem(appendItem(m.buf, k), v)
		return nil
	}
	var ferr error
	err = m.each(p, func(k, v []byte) bool {
		c := bytes.Compare(k, ek)
		if c >= 0 && !done {
			done = true
			if c == 0 && put && cur && bytes.Equal(v, nv) {
				return false // unchanged
			}
			changed = put || c == 0
			if put {
				m.buf = appendItem(appendItem(m.buf, ek), nv)
			}
			if c == 0 {
				return true // the old entry is replaced or removed
			}
		}
		if ferr = add(k, v); ferr != nil {
			return false
		}
		return true
	})
	switch {
	case err != nil:
		return err
	case ferr != nil:
		return ferr
	case !done && put:
		m.buf = appendItem(appendItem(m.buf, ek), nv)
		changed = true
	}
	if !changed {
		if put {
			m.s.batchStats.RowsUpdated++ // counted as the write it stands for
		}
		return nil
	}
	return m.write(m.buf)
}

// entries decodes the current key's map; either codec may be skipped.
func (m *packedMap[K, V]) entries(op string, keys, vals bool) ([]K, []V, error) {
	if err := m.check(op, false); err != nil {
		return nil, nil, err
	}
	h, p, ok, err := m.read()
	if err != nil || !ok {
		return nil, nil, m.err(op, err)
	}
	ks, vs, err := decodeEntries(m.kc, m.dec, keys, vals, func(fn func(changelog.Header, []byte, []byte) bool) error {
		return m.each(p, func(ek, ev []byte) bool { return fn(h, ek, ev) })
	})
	if err != nil {
		return nil, nil, m.err(op, err)
	}
	return ks, vs, nil
}

// Iterator returns the entries ordered by encoded user key.
func (m *packedMap[K, V]) Iterator() (iter.Seq2[K, V], error) {
	ks, vs, err := m.entries("Iterator", true, true)
	if err != nil {
		return nil, err
	}
	return pairs(ks, vs), nil
}

// Keys returns the user keys in Iterator order.
func (m *packedMap[K, V]) Keys() (iter.Seq[K], error) {
	ks, _, err := m.entries("Keys", true, false)
	if err != nil {
		return nil, err
	}
	return slices.Values(ks), nil
}

// Values returns the values in Iterator order.
func (m *packedMap[K, V]) Values() (iter.Seq[V], error) {
	_, vs, err := m.entries("Values", false, true)
	if err != nil {
		return nil, err
	}
	return slices.Values(vs), nil
}

// Clear removes the current key's map.
func (m *packedMap[K, V]) Clear() error { return m.clear() }
