package shard

import (
	"fmt"

	"github.com/kstate/kstate/changelog"
	"github.com/kstate/kstate/internal/changelogfmt"
	"github.com/kstate/kstate/internal/keys"
	"github.com/kstate/kstate/state"
)

// TTL.
//
// An entry of a variable with a TTL stores its expiry in the value header
// and has an index entry changelogfmt.TTLKey(expiry, stateKey) so that cleanup
// finds expired entries without scanning the state. An entry is expired
// when expiry <= batch time: an entry written with TTL d at time t is
// readable at t+d-1 and gone at t+d. Reads check the header, so an expired
// entry is invisible at once; Finish then tombstones it (and its index
// entry), so it also leaves the store and the compacted changelog.
//
// Index entries are removed whenever their entry is overwritten or deleted;
// cleanup still re-checks the entry's header, so an index entry that is
// stale for any reason (for example a variable whose TTL an earlier release
// let a restart remove; checkTTL refuses that now) never deletes live data.

// indexValue is the value of TTL index and timer entries: an empty payload
// behind a normal header, so no changelog record is ever empty (Kafka cannot
// tell an empty value from a tombstone).
var indexValue = changelogfmt.EncodeValue(changelog.Header{Expiry: changelog.NoExpiry}, nil)

// expired reports whether an entry with header h is expired in this batch.
func (s *Shard) expired(h changelog.Header) bool {
	return h.Expiry != changelog.NoExpiry && s.batchTime >= 0 && h.Expiry <= s.batchTime
}

// readLive returns the header and payload of a live (present and
// unexpired) entry.
func (s *Shard) readLive(key []byte) (changelog.Header, []byte, bool, error) {
	v, ok, err := s.get(key)
	if err != nil || !ok {
		return changelog.Header{}, nil, false, err
	}
	h, p, err := changelog.DecodeValue(v)
	if err != nil {
		return changelog.Header{}, nil, false, fmt.Errorf("%w: key %x: %w", state.ErrCorrupt, key, err)
	}
	if s.expired(h) {
		return changelog.Header{}, nil, false, nil
	}
	return h, p, true, nil
}

// putEntry stages a state entry. With replacing set, the previous value is
// read so its TTL index entry can be removed (needed only when entries of
// this variable can carry an expiry). schemaID is the payload's schema version.
func (s *Shard) putEntry(key, payload []byte, schemaID uint32, expiry int64, replacing bool) error {
	val := s.stage.appendValue(changelog.Header{SchemaID: schemaID, Expiry: expiry}, payload)
	if err := s.checkRecordSize(key, val); err != nil {
		return err // nothing staged
	}
	if replacing {
		old, ok, err := s.get(key)
		if err != nil {
			return err
		}
		if ok {
			h, _, err := changelog.DecodeValue(old)
			if err != nil {
				return fmt.Errorf("%w: key %x: %w", state.ErrCorrupt, key, err)
			}
			if h.Expiry != changelog.NoExpiry && h.Expiry != expiry {
				s.set(changelogfmt.TTLKey(h.Expiry, key), nil)
			}
		}
	}
	s.setOwned(key, val)
	if expiry != changelog.NoExpiry {
		s.set(changelogfmt.TTLKey(expiry, key), indexValue)
	}
	s.batchStats.RowsUpdated++
	return nil
}

// deleteEntry stages the removal of a state entry whose current stored
// value is old, with its TTL index entry.
func (s *Shard) deleteEntry(key, old []byte) error {
	h, _, err := changelog.DecodeValue(old)
	if err != nil {
		return fmt.Errorf("%w: key %x: %w", state.ErrCorrupt, key, err)
	}
	if h.Expiry != changelog.NoExpiry {
		s.set(changelogfmt.TTLKey(h.Expiry, key), nil)
	}
	s.set(key, nil)
	return nil
}

// entryRef is a state entry found by a scan (copied out of the scan).
type entryRef struct {
	key, val []byte
}

// entries returns every entry (expired ones included) in [lower, upper).
func (s *Shard) entries(lower, upper []byte) ([]entryRef, error) {
	var out []entryRef
	err := s.scan(lower, upper, func(k, v []byte) bool {
		out = append(out, entryRef{cloneBytes(k), cloneBytes(v)})
		return true
	})
	return out, err
}

// deleteRange removes every entry in [lower, upper), expired ones included,
// each counted as a removed row.
func (s *Shard) deleteRange(lower, upper []byte) error {
	es, err := s.entries(lower, upper)
	if err != nil {
		return err
	}
	for _, e := range es {
		if err := s.deleteEntry(e.key, e.val); err != nil {
			return err
		}
		s.batchStats.RowsRemoved++
	}
	return nil
}

// expireTTL tombstones every entry that expired at or before the batch time
// (Finish calls it), using the TTL index instead of a scan of the state.
func (s *Shard) expireTTL() error {
	if s.batchTime < 0 {
		return nil
	}
	idx, err := s.entries(floorKey(changelog.KindTTL, s.ttlFloor.lower()), keys.TTLUpperBound(s.batchTime))
	if err != nil {
		return err
	}
	for _, e := range idx {
		k, err := changelog.DecodeKey(e.key)
		if err != nil {
			return fmt.Errorf("%w: TTL index key %x: %w", state.ErrCorrupt, e.key, err)
		}
		s.set(e.key, nil)
		v, ok, err := s.get(k.StateKey)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		h, _, err := changelog.DecodeValue(v)
		if err != nil {
			return fmt.Errorf("%w: key %x: %w", state.ErrCorrupt, k.StateKey, err)
		}
		if s.expired(h) {
			s.set(k.StateKey, nil)
			if h.Expiry != k.Expiry { // the entry's own index entry, if it differs
				s.set(changelogfmt.TTLKey(h.Expiry, k.StateKey), nil)
			}
			s.batchStats.TTLRemovals++
		}
	}
	return nil
}
