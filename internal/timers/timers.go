package timers

import (
	"bytes"
	"errors"
	"fmt"
	"slices"

	"github.com/kstate/kstate/state"

	"github.com/kstate/kstate/changelog"
	"github.com/kstate/kstate/internal/changelogfmt"
	"github.com/kstate/kstate/internal/keys"
	"github.com/kstate/kstate/internal/shard"
)

// Timer is one registered timer: the encoded grouping key it belongs to and
// its expiry, in milliseconds (processing time or event time, by the
// application's time mode).
type Timer struct {
	Key    []byte
	Expiry int64
}

// Stats are cumulative timer counters of committed batches.
type Stats struct {
	Registered int64
	Deleted    int64
}

// Timers is the durable timer set of one shard. Every timer has two index
// entries: changelogfmt.TimerKey (expiry, key) to fire in order, changelogged
// with the batch like state, and changelogfmt.TimerByKey (key, expiry) to list
// one key's timers, which is local (the shard leaves it out of the changelog
// and a restore derives it from the first). All operations are staged in the
// shard's batch.
type Timers struct {
	s *shard.Shard

	// known is the last List result, kept up to date by this Timers' own
	// Register and Delete of that key: the common "list my timers, delete
	// them, register a new one" of one handler call then reads the store
	// once instead of once per call. It is trusted only while the shard's
	// TimerGen is what it was after the last update (no other writer of
	// the timer key spaces, no batch boundary, restore or rollback since).
	known struct {
		valid    bool
		gen      uint64
		key      []byte
		expiries []int64 // ascending
	}
	// kbuf, bbuf and ebuf are scratch for keys and bounds: the shard copies
	// the keys it stages and keeps no bound past a scan.
	kbuf, bbuf, ebuf []byte
}

// timerKey returns changelogfmt.TimerKey(expiry, key) in t.kbuf.
func (t *Timers) timerKey(expiry int64, key []byte) []byte {
	t.kbuf = keys.AppendTimerKey(t.kbuf[:0], expiry, key)
	return t.kbuf
}

// byKey returns changelogfmt.TimerByKey(key, expiry) in t.bbuf.
func (t *Timers) byKey(key []byte, expiry int64) []byte {
	t.bbuf = keys.AppendTimerByKey(t.bbuf[:0], key, expiry)
	return t.bbuf
}

// New returns the timers of shard s.
func New(s *shard.Shard) *Timers { return &Timers{s: s} }

// value is stored under both index keys: an empty payload behind a normal
// value header, so no changelog record is empty (Kafka cannot tell an empty
// value from a tombstone).
var value = changelogfmt.EncodeValue(changelog.Header{Expiry: changelog.NoExpiry}, nil)

// Register adds the timer (key, expiry); a no-op when it exists.
func (t *Timers) Register(key []byte, expiry int64) error {
	ok, err := t.exists(key, expiry)
	if err != nil || ok {
		return opErr("Register", key, expiry, err)
	}
	gen := t.s.TimerGen()
	// The TimerKey put is what the shard counts as a registration.
	if err := t.s.Put(t.timerKey(expiry, key), value); err != nil {
		t.known.valid = false
		return opErr("Register", key, expiry, err)
	}
	if err := t.s.Put(t.byKey(key, expiry), value); err != nil {
		t.known.valid = false
		return opErr("Register", key, expiry, err)
	}
	t.changed(key, expiry, true, gen)
	return nil
}

// Delete removes the timer (key, expiry); a no-op when it does not exist.
func (t *Timers) Delete(key []byte, expiry int64) error {
	ok, err := t.exists(key, expiry)
	if err != nil || !ok {
		return opErr("Delete", key, expiry, err)
	}
	gen := t.s.TimerGen()
	if err := t.s.Delete(t.timerKey(expiry, key)); err != nil {
		t.known.valid = false
		return opErr("Delete", key, expiry, err)
	}
	if err := t.s.Delete(t.byKey(key, expiry)); err != nil {
		t.known.valid = false
		return opErr("Delete", key, expiry, err)
	}
	t.changed(key, expiry, false, gen)
	return nil
}

// Exists reports whether the timer (key, expiry) is registered.
func (t *Timers) Exists(key []byte, expiry int64) (bool, error) {
	ok, err := t.exists(key, expiry)
	return ok, opErr("Exists", key, expiry, err)
}

func (t *Timers) exists(key []byte, expiry int64) (bool, error) {
	if es, ok := t.cached(key); ok {
		_, found := slices.BinarySearch(es, expiry)
		return found, nil
	}
	_, ok, err := t.s.Get(t.timerKey(expiry, key))
	return ok, err
}

// cached returns key's expiries when the List cache holds them.
func (t *Timers) cached(key []byte) ([]int64, bool) {
	k := &t.known
	if !k.valid || k.gen != t.s.TimerGen() || !bytes.Equal(k.key, key) {
		return nil, false
	}
	return k.expiries, true
}

// remember caches key's expiries (ascending) as of now.
func (t *Timers) remember(key []byte, expiries []int64) {
	k := &t.known
	k.valid, k.gen = true, t.s.TimerGen()
	k.key = append(k.key[:0], key...)
	k.expiries = append(k.expiries[:0], expiries...)
}

// changed updates the cache after this Timers added (add) or removed
// expiry of key; gen is the shard's TimerGen before those writes. A cache
// of another key, or one that was stale before the writes, is dropped.
func (t *Timers) changed(key []byte, expiry int64, add bool, gen uint64) {
	k := &t.known
	if !k.valid || k.gen != gen || !bytes.Equal(k.key, key) {
		k.valid = false
		return
	}
	i, found := slices.BinarySearch(k.expiries, expiry)
	switch {
	case add && !found:
		k.expiries = slices.Insert(k.expiries, i, expiry)
	case !add && found:
		k.expiries = slices.Delete(k.expiries, i, i+1)
	}
	k.gen = t.s.TimerGen()
}

// List returns the expiries of key's timers, ascending.
func (t *Timers) List(key []byte) ([]int64, error) {
	if es, ok := t.cached(key); ok {
		if len(es) == 0 {
			return nil, nil
		}
		return slices.Clone(es), nil
	}
	// A key's timers: the prefix is never all 0xff (its kind byte is not).
	prefix := keys.AppendTimerByKeyPrefix(t.bbuf[:0], key)
	end, _ := keys.AppendPrefixEnd(t.ebuf[:0], prefix)
	t.bbuf, t.ebuf = prefix, end
	var out []int64
	var derr error
	err := t.s.Scan(prefix, end, func(k, _ []byte) bool {
		dk, err := changelog.DecodeKey(k)
		if err != nil {
			derr = err
			return false
		}
		out = append(out, dk.Expiry)
		return true
	})
	if err == nil {
		err = derr
	}
	if err != nil {
		return nil, wrap(fmt.Sprintf("List(key %q)", key), err)
	}
	t.remember(key, out)
	return out, nil
}

// Expired returns every timer with expiry ≤ threshold, ordered by expiry,
// then by key bytes. It does not remove them: the engine deletes each one
// once its handler returned.
func (t *Timers) Expired(threshold int64) ([]Timer, error) {
	var out []Timer
	var derr error
	// Start at the shard's timer floor, not at the start of the timer space:
	// fired timers leave tombstones there that a store like RocksDB would
	// step over on every call until compaction.
	lower := changelogfmt.TimerKey(t.s.TimerFloor(), nil)
	err := t.s.Scan(lower, keys.TimerUpperBound(threshold), func(k, _ []byte) bool {
		dk, err := changelog.DecodeKey(k)
		if err != nil {
			derr = err
			return false
		}
		out = append(out, Timer{Key: append([]byte{}, dk.GroupKey...), Expiry: dk.Expiry})
		return true
	})
	if err == nil {
		err = derr
	}
	if err != nil {
		return nil, wrap(fmt.Sprintf("Expired(%d)", threshold), err)
	}
	return out, nil
}

// Stats returns the cumulative counters of committed batches.
func (t *Timers) Stats() Stats {
	st := t.s.Stats()
	return Stats{Registered: st.TimersRegistered, Deleted: st.TimersDeleted}
}

func opErr(op string, key []byte, expiry int64, err error) error {
	if err == nil {
		return nil
	}
	return wrap(fmt.Sprintf("%s(key %q, expiry %d)", op, key, expiry), err)
}

func wrap(op string, err error) error {
	var ve *state.VarError
	if errors.As(err, &ve) && ve.Var == "" {
		err = ve.Err // drop the shard-level wrapper: this error names the timer call
	}
	return &state.VarError{Kind: "Timers", Op: op, Err: err}
}
