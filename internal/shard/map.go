package shard

import (
	"fmt"
	"iter"
	"slices"

	"github.com/kstate/kstate/changelog"
	"github.com/kstate/kstate/internal/keys"
	"github.com/kstate/kstate/state"
)

// MapState holds a map from K to V per grouping key. Each entry is its own
// shard entry keyed by the encoded user key, so iteration is ordered by the
// encoded key bytes: natural order for the built-in order-preserving codecs.
type mapState[K, V any] struct {
	varBase
	kc         state.Codec[K]
	vc         state.Codec[V]
	kenc       encoder[K]
	venc       encoder[V]
	dec        *decoder[V]
	knil, vnil bool

	// probe is what GetValue learned about the current key's whole map;
	// see getLive.
	probe mapProbe
}

// mapProbe remembers, for one map prefix and one read generation of the
// shard (TimerGen: it changes at every batch boundary, restore, re-seed and
// savepoint rollback, and on timer writes), whether a GetValue missed and
// whether the merged view (staged writes over the store) holds no live
// entry at all under the prefix. Only this mapState writes under its
// prefixes, and every write of it drops the probe, so "empty" stays true
// for as long as the prefix and generation match.
type mapProbe struct {
	prefix  []byte
	gen     uint64
	missed  bool // a GetValue of this prefix and generation found nothing
	scanned bool // the prefix was scanned (once per prefix and generation)
	empty   bool // the scan found no live entry under prefix
	gets    int  // getLive calls for this prefix and generation
	// complete: read holds every live entry under prefix (a scan saw at
	// most maxMapRead of them, and every write since was remembered), so
	// an entry not in read is absent.
	complete bool

	// read is what GetValue found for entries of this prefix and
	// generation (live entries only; see UpdateValue): read[i] is entry
	// key buf[o[0]:o[1]] with header hs[i] and payload buf[o[1]:o[2]].
	// Every write of an entry of this mapState updates or forgets its
	// line, so a line is always the entry's value in the merged view.
	read []readLine
	buf  []byte
}

type readLine struct {
	o [3]int
	h changelog.Header
}

// maxMapRead bounds the entries of one key's map remembered per
// generation (the aggregate-per-field pattern reads a few).
const maxMapRead = 16

// lookup returns the remembered header and payload of entry key.
func (pr *mapProbe) lookup(key []byte) (changelog.Header, []byte, bool) {
	for _, r := range pr.read {
		if string(pr.buf[r.o[0]:r.o[1]]) == string(key) {
			return r.h, pr.buf[r.o[1]:r.o[2]], true
		}
	}
	return changelog.Header{}, nil, false
}

// remember records entry key's live value (replacing an earlier line).
func (pr *mapProbe) remember(key []byte, h changelog.Header, p []byte) {
	pr.forget(key)
	if len(pr.read) >= maxMapRead {
		return
	}
	start := len(pr.buf)
	pr.buf = append(append(pr.buf, key...), p...)
	pr.read = append(pr.read, readLine{o: [3]int{start, start + len(key), len(pr.buf)}, h: h})
}

// forget drops entry key's line (its buffer bytes stay until the next
// generation or prefix).
func (pr *mapProbe) forget(key []byte) {
	for i, r := range pr.read {
		if string(pr.buf[r.o[0]:r.o[1]]) == string(key) {
			pr.read = append(pr.read[:i], pr.read[i+1:]...)
			return
		}
	}
}

// NewMapState declares a MapState (only during Init).
func NewMapState[K, V any](s *Shard, name string, kc state.Codec[K], vc state.Codec[V], opts ...state.Option) (state.MapState[K, V], error) {
	if packedOpts(opts) {
		return newPackedMap(s, name, kc, vc, opts)
	}
	b, err := s.declare("MapState", kindMap, name, schemaOf(vc), schemaOf(kc), []any{kc, vc}, opts)
	if err != nil {
		return nil, err
	}
	return &mapState[K, V]{varBase: b, kc: kc, vc: vc, kenc: newEncoder(kc), venc: newEncoder(vc),
		dec: newDecoder(name, vc, b.schemas, b.schemaID), knil: nilable[K](), vnil: nilable[V]()}, nil
}

func (m *mapState[K, V]) entryKey(k K) ([]byte, error) {
	if m.knil && isNil(k) {
		return nil, fmt.Errorf("%w (map key)", state.ErrNilValue)
	}
	key, err := m.kenc.appendTo(m.keyHead(), k)
	if err != nil {
		return nil, fmt.Errorf("encode map key: %w", err)
	}
	m.kbuf = key
	return key, nil // valid until the next entryKey or stateKey call
}

// Exists reports whether the current key's map has a (non-expired) entry.
func (m *mapState[K, V]) Exists() (bool, error) {
	if err := m.check("Exists", false); err != nil {
		return false, err
	}
	found := false
	err := m.walk(func(changelog.Header, []byte, []byte) bool { found = true; return false })
	return found, m.err("Exists", err)
}

// GetValue returns the value of k, or ok=false when absent.
func (m *mapState[K, V]) GetValue(k K) (V, bool, error) {
	var zero V
	if err := m.check("GetValue", false); err != nil {
		return zero, false, err
	}
	key, err := m.entryKey(k)
	if err != nil {
		return zero, false, m.err("GetValue", err)
	}
	h, p, ok, err := m.getLive(key)
	if err != nil || !ok {
		return zero, false, m.err("GetValue", err)
	}
	v, err := m.dec.decode(h, p)
	if err != nil {
		return zero, false, m.err("GetValue", err)
	}
	return v, true, nil
}

// getLive is readLive of one entry of the current key's map, for GetValue.
//
// Why: a processor that reads several entries of a key's map (an aggregate
// per field, like the bench's heavy processor) pays a store lookup for each
// one, and for a key without state each one misses (on RocksDB a memtable
// search and a bloom probe per file, plus the committed-state cache's miss
// and fill). After the first miss of a prefix, one scan of the whole prefix
// (a seek of the batch's reused iterator) answers whether the map is empty;
// if it is, the remaining reads of that key in the batch need no store
// lookup at all. The same scan runs on the second read of a prefix in a
// batch's generation and remembers every live entry of a map of at most
// maxMapRead entries ("complete"): the remaining reads of the key's map
// need no store lookup either (issue #29 item 5: the heavy processor's four
// fields were four RocksDB Gets, a quarter of its profile). A processor
// that reads one entry per key never scans.
func (m *mapState[K, V]) getLive(key []byte) (changelog.Header, []byte, bool, error) {
	prefix := key[:stateKeyHeader+len(m.s.key)] // m.prefix() without its allocation
	pr := &m.probe
	gen := m.s.TimerGen()
	same := pr.gen == gen && len(pr.prefix) == len(prefix) && string(pr.prefix) == string(prefix)
	if !same {
		pr.prefix = append(pr.prefix[:0], prefix...)
		pr.gen, pr.missed, pr.scanned, pr.empty, pr.complete, pr.gets = gen, false, false, false, false, 0
		pr.read, pr.buf = pr.read[:0], pr.buf[:0]
	}
	pr.gets++
	if pr.empty {
		return changelog.Header{}, nil, false, nil
	}
	if pr.complete {
		h, p, ok := pr.lookup(key)
		return h, p, ok, nil
	}
	// The second read of a key's map in a generation (or a miss) scans
	// the whole prefix once: one iterator seek answers the remaining
	// reads of a small map (the heavy processor's four fields) instead of
	// a store lookup each. A map of more than maxMapRead entries is not
	// "complete" and keeps its point reads.
	fill := m.s.inBatch // lines are remembered only within a batch
	if (pr.missed || (fill && pr.gets > 1)) && !pr.scanned {
		pr.scanned = true
		n := 0
		var kbuf []byte
		if err := m.walk(func(h changelog.Header, ek, p []byte) bool {
			n++
			if !fill || n > maxMapRead {
				return false
			}
			kbuf = append(append(kbuf[:0], prefix...), ek...)
			pr.remember(kbuf, h, p)
			return true
		}); err != nil {
			m.dropProbe()
			return changelog.Header{}, nil, false, err
		}
		// The walk runs no user code and stages nothing: gen is unchanged.
		if n == 0 {
			pr.empty = true
			return changelog.Header{}, nil, false, nil
		}
		if fill && n <= maxMapRead {
			pr.complete = true
			h, p, ok := pr.lookup(key)
			return h, p, ok, nil
		}
	}
	h, p, ok, err := m.s.readLive(key)
	if err == nil && !ok {
		pr.missed = true
	}
	if err == nil && ok && m.s.inBatch {
		pr.remember(key, h, p)
	}
	return h, p, ok, err
}

// stateKeyHeader is the length of a state key before the grouping key
// (varBase.stateKey): kind, variable id, grouping key length.
const stateKeyHeader = 9

// dropProbe forgets what getLive learned: the map is about to be written.
func (m *mapState[K, V]) dropProbe() {
	m.probe.prefix, m.probe.complete = m.probe.prefix[:0], false
	m.probe.read, m.probe.buf = m.probe.read[:0], m.probe.buf[:0]
}

// unchanged reports whether entry key's value in the merged view is, byte
// for byte, payload p under header h, as far as this generation's reads of
// the current key's map know (false when they do not know).
func (m *mapState[K, V]) unchanged(key []byte, h changelog.Header, p []byte) bool {
	pr := &m.probe
	if pr.gen != m.s.TimerGen() || len(pr.prefix) == 0 || len(key) < len(pr.prefix) ||
		string(key[:len(pr.prefix)]) != string(pr.prefix) {
		return false
	}
	oh, op, ok := pr.lookup(key)
	return ok && oh == h && string(op) == string(p)
}

// wrote keeps the probe true after UpdateValue wrote entry key: the map
// has an entry (no longer "empty", nor "missed"), and key's line holds the
// new value.
func (m *mapState[K, V]) wrote(key []byte, h changelog.Header, p []byte) {
	pr := &m.probe
	if pr.gen != m.s.TimerGen() || len(pr.prefix) == 0 || len(key) < len(pr.prefix) ||
		string(key[:len(pr.prefix)]) != string(pr.prefix) {
		m.dropProbe()
		return
	}
	pr.missed, pr.empty = false, false
	if !pr.complete {
		pr.scanned = false
	}
	pr.remember(key, h, p)
	if pr.complete {
		if _, _, ok := pr.lookup(key); !ok {
			pr.complete, pr.scanned = false, false // read is full: no longer every entry
		}
	}
}

// ContainsKey reports whether k has a (non-expired) entry.
func (m *mapState[K, V]) ContainsKey(k K) (bool, error) {
	if err := m.check("ContainsKey", false); err != nil {
		return false, err
	}
	key, err := m.entryKey(k)
	if err != nil {
		return false, m.err("ContainsKey", err)
	}
	_, _, ok, err := m.getLive(key)
	return ok, m.err("ContainsKey", err)
}

// UpdateValue sets k to v (and resets that entry's TTL).
func (m *mapState[K, V]) UpdateValue(k K, v V) error {
	if err := m.check("UpdateValue", true); err != nil {
		return err
	}
	key, err := m.entryKey(k)
	if err != nil {
		return m.err("UpdateValue", err)
	}
	if m.vnil && isNil(v) {
		return m.err("UpdateValue", state.ErrNilValue)
	}
	p, err := m.venc.encode(v) // putEntry copies it
	if err != nil {
		return m.err("UpdateValue", err)
	}
	exp, err := m.newExpiry()
	if err != nil {
		return m.err("UpdateValue", err)
	}
	h := changelog.Header{SchemaID: m.schemaID, Expiry: exp}
	if m.unchanged(key, h, p) {
		// The entry already holds exactly these bytes (same payload,
		// schema version and expiry, so its TTL is already the fresh
		// one): writing it again would change nothing in the shard but
		// add a changelog record. Counted as the write it stands for.
		m.s.batchStats.RowsUpdated++
		return nil
	}
	if err := m.s.putEntry(key, p, m.schemaID, exp, m.ttl != 0); err != nil {
		m.dropProbe()
		return m.err("UpdateValue", err)
	}
	m.wrote(key, h, p)
	return nil
}

// walk calls fn with the header, encoded user key and payload of every live entry.
func (m *mapState[K, V]) walk(fn func(h changelog.Header, ek, p []byte) bool) error {
	prefix, end := m.scanBounds() // fn runs no state operation of m
	var derr error
	err := m.s.scan(prefix, end, func(k, v []byte) bool {
		h, p, err := changelog.DecodeValue(v)
		if err != nil {
			derr = fmt.Errorf("%w: key %x: %w", state.ErrCorrupt, k, err)
			return false
		}
		if m.s.expired(h) {
			return true
		}
		return fn(h, k[len(prefix):], p)
	})
	if err == nil {
		err = derr
	}
	return err
}

// collect decodes the live entries; either codec may be skipped.
func (m *mapState[K, V]) collect(op string, keys, vals bool) ([]K, []V, error) {
	if err := m.check(op, false); err != nil {
		return nil, nil, err
	}
	ks, vs, err := decodeEntries(m.kc, m.dec, keys, vals, m.walk)
	if err != nil {
		return nil, nil, m.err(op, err)
	}
	return ks, vs, nil
}

// decodeEntries decodes the entries walk passes (header, encoded user key,
// payload): the keys with kc and the values with dec; either may be
// skipped.
func decodeEntries[K, V any](kc state.Codec[K], dec *decoder[V], keys, vals bool, walk func(func(h changelog.Header, ek, p []byte) bool) error) ([]K, []V, error) {
	var ks []K
	var vs []V
	var derr error
	err := walk(func(h changelog.Header, ek, p []byte) bool {
		if keys {
			k, err := kc.Decode(ek)
			if err != nil {
				derr = fmt.Errorf("decode map key: %w", err)
				return false
			}
			ks = append(ks, k)
		}
		if vals {
			v, err := dec.decode(h, p)
			if err != nil {
				derr = err
				return false
			}
			vs = append(vs, v)
		}
		return true
	})
	if err == nil {
		err = derr
	}
	return ks, vs, err
}

// pairs yields ks[i], vs[i] in order.
func pairs[K, V any](ks []K, vs []V) iter.Seq2[K, V] {
	return func(yield func(K, V) bool) {
		for i := range ks {
			if !yield(ks[i], vs[i]) {
				return
			}
		}
	}
}

// Iterator returns the current key's (non-expired) entries ordered by
// encoded user key. Entries are decoded eagerly (errors are reported here).
func (m *mapState[K, V]) Iterator() (iter.Seq2[K, V], error) {
	ks, vs, err := m.collect("Iterator", true, true)
	if err != nil {
		return nil, err
	}
	return pairs(ks, vs), nil
}

// Keys returns the user keys in Iterator order.
func (m *mapState[K, V]) Keys() (iter.Seq[K], error) {
	ks, _, err := m.collect("Keys", true, false)
	if err != nil {
		return nil, err
	}
	return slices.Values(ks), nil
}

// Values returns the values in Iterator order.
func (m *mapState[K, V]) Values() (iter.Seq[V], error) {
	_, vs, err := m.collect("Values", false, true)
	if err != nil {
		return nil, err
	}
	return slices.Values(vs), nil
}

// RemoveKey removes k; a no-op when absent.
func (m *mapState[K, V]) RemoveKey(k K) error {
	if err := m.check("RemoveKey", true); err != nil {
		return err
	}
	m.dropProbe()
	key, err := m.entryKey(k)
	if err != nil {
		return m.err("RemoveKey", err)
	}
	old, ok, err := m.s.get(key)
	if err != nil || !ok {
		return m.err("RemoveKey", err)
	}
	if err := m.s.deleteEntry(key, old); err != nil {
		return m.err("RemoveKey", err)
	}
	m.s.batchStats.RowsRemoved++
	return nil
}

// Clear removes the current key's whole map.
func (m *mapState[K, V]) Clear() error {
	if err := m.check("Clear", true); err != nil {
		return err
	}
	m.dropProbe()
	prefix := m.prefix()
	return m.err("Clear", m.s.deleteRange(prefix, keys.PrefixEnd(prefix)))
}
