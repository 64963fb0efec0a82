package rescale

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"slices"

	"github.com/cockroachdb/pebble/v2"
)

// Key spaces of a Store, each a one-byte prefix then a big-endian
// partition number, so that one range holds one partition in key order.
const (
	spaceSource = 's' // A's partition, changelog key → value
	spaceOut    = 'o' // B's partition, new changelog key → A's partition (4 bytes), value
	spaceGroup  = 'g' // B's partition, len(group) (4 bytes), group, A's partition (4 bytes) → nothing
)

const (
	storeBatchBytes = 4 << 20
	storeMemTable   = 16 << 20
	storeCache      = 16 << 20
)

// Store is A's changelog spilled to a temporary Pebble database, so that a
// rescale holds in memory only what does not grow with the state (the
// variable registries, the merged metadata, pending skips and counts):
// Put loads A's entries, Build routes them into B's partitions on disk,
// and Each streams one partition of B in key order. Its records are the
// ones Build (in memory) would plan, in the same order.
type Store struct {
	dir   string
	db    *pebble.DB
	batch *pebble.Batch
	parts map[int32]bool
	b     *builder
	plan  *Plan
}

// OpenStore creates a Store in a new directory under dir (the system's
// temporary directory if empty); Close removes it.
func OpenStore(dir string) (*Store, error) {
	d, err := os.MkdirTemp(dir, "kstate-rescale-")
	if err != nil {
		return nil, fmt.Errorf("rescale: temporary store: %w", err)
	}
	c := pebble.NewCache(storeCache)
	defer c.Unref()
	db, err := pebble.Open(d, &pebble.Options{
		Cache:              c,
		MemTableSize:       storeMemTable,
		DisableWAL:         true,
		FormatMajorVersion: pebble.FormatNewest,
		Logger:             quietLogger{},
	})
	if err != nil {
		_ = os.RemoveAll(d)
		return nil, fmt.Errorf("rescale: temporary store %s: %w", d, err)
	}
	return &Store{dir: d, db: db, batch: db.NewBatch(), parts: map[int32]bool{}}, nil
}

// quietLogger discards Pebble's log lines; a fatal one panics, as Pebble
// expects.
type quietLogger struct{}

func (quietLogger) Infof(string, ...any)  {}
func (quietLogger) Errorf(string, ...any) {}
func (quietLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf("rescale: pebble fatal error: "+format, args...))
}

// Close releases the store and removes its directory.
func (s *Store) Close() error {
	if s.batch != nil {
		_ = s.batch.Close()
		s.batch = nil
	}
	err := s.db.Close()
	if rerr := os.RemoveAll(s.dir); err == nil {
		err = rerr
	}
	if err != nil {
		return fmt.Errorf("rescale: close temporary store %s: %w", s.dir, err)
	}
	return nil
}

// AddPartition declares partition p of A (which may hold no entry).
func (s *Store) AddPartition(p int32) { s.parts[p] = true }

// Put applies one changelog record of A's partition p, in log order: the
// last value of a key is kept, a nil value deletes it (the compaction
// view). It keeps no reference to key or value.
func (s *Store) Put(p int32, key, value []byte) error {
	s.parts[p] = true
	k := spaceKey(spaceSource, p, len(key))
	k = append(k, key...)
	var err error
	if value == nil {
		err = s.batch.Delete(k, nil)
	} else {
		err = s.batch.Set(k, value, nil)
	}
	if err != nil {
		return fmt.Errorf("rescale: temporary store: %w", err)
	}
	return s.flushIf(storeBatchBytes)
}

func (s *Store) flushIf(size int) error {
	if s.batch.Len() < size {
		return nil
	}
	if err := s.batch.Commit(pebble.NoSync); err != nil {
		return fmt.Errorf("rescale: temporary store: %w", err)
	}
	s.batch.Reset()
	return nil
}

func spaceKey(space byte, p int32, extra int) []byte {
	k := make([]byte, 5, 5+extra)
	k[0] = space
	binary.BigEndian.PutUint32(k[1:], uint32(p))
	return k
}

// each calls fn with every key (without its space prefix) and value of one
// partition's range, which are valid only during the call.
func (s *Store) each(space byte, p int32, fn func(k, v []byte) (bool, error)) error {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: spaceKey(space, p, 0), UpperBound: spaceKey(space, p+1, 0)})
	if err != nil {
		return fmt.Errorf("rescale: temporary store: %w", err)
	}
	for valid := it.First(); valid; valid = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			_ = it.Close()
			return fmt.Errorf("rescale: temporary store: %w", err)
		}
		more, err := fn(it.Key()[5:], v)
		if err != nil || !more {
			_ = it.Close()
			return err
		}
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("rescale: temporary store: %w", err)
	}
	return nil
}

// Build is Build for the entries Put (every partition added is one of A's),
// with the routed entries kept on disk: the plan's Records stay nil (Each
// yields them), its counts are set.
func (s *Store) Build(n int, offsets []int64) (*Plan, error) {
	if err := s.flushIf(0); err != nil {
		return nil, err
	}
	parts := make([]int32, 0, len(s.parts))
	for p := range s.parts {
		parts = append(parts, p)
	}
	slices.Sort(parts)
	b, err := newBuilder(parts, n, offsets)
	if err != nil {
		return nil, err
	}
	// Pass 1: registries, and every id in use.
	for _, p := range parts {
		if err := s.each(spaceSource, p, func(k, v []byte) (bool, error) { return true, b.scan(p, k, v) }); err != nil {
			return nil, err
		}
	}
	if err := b.resolve(); err != nil {
		return nil, err
	}
	// Pass 2: route every entry, rewriting ids, into B's key spaces.
	entries, moved := make([]int, n), make([]int, n)
	for _, p := range parts {
		err := s.each(spaceSource, p, func(k, v []byte) (bool, error) {
			nk, group, to, ok, err := b.route(p, k, v)
			if err != nil || !ok {
				return err == nil, err
			}
			ok2 := spaceKey(spaceOut, to, len(nk))
			ok2 = append(ok2, nk...)
			val := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(v)), uint32(p))
			if err := s.batch.Set(ok2, append(val, v...), nil); err != nil {
				return false, err
			}
			gk := spaceKey(spaceGroup, to, 8+len(group))
			gk = binary.BigEndian.AppendUint32(gk, uint32(len(group)))
			gk = binary.BigEndian.AppendUint32(append(gk, group...), uint32(p))
			if err := s.batch.Set(gk, nil, nil); err != nil {
				return false, err
			}
			entries[to]++
			if p != to {
				moved[to]++
			}
			return true, s.flushIf(storeBatchBytes)
		})
		if err != nil {
			return nil, err
		}
	}
	if err := s.flushIf(0); err != nil {
		return nil, err
	}
	if err := b.finishMeta(); err != nil {
		return nil, err
	}
	for p := range int32(n) {
		pp := PartitionPlan{Partition: p, InputOffset: offsets[p], Entries: entries[p], Moved: moved[p]}
		// A key's entries must all come from one partition of A, or two
		// partitions' state of one key would be mixed. Sorted, a grouping
		// key's entries are adjacent, by A's partition.
		var last []byte
		var lastFrom int32
		err := s.each(spaceGroup, p, func(k, _ []byte) (bool, error) {
			g := k[4 : len(k)-4]
			from := int32(binary.BigEndian.Uint32(k[len(k)-4:]))
			if last != nil && bytes.Equal(g, last) {
				if from != lastFrom {
					return false, errTwoPartitions(string(g), lastFrom, from)
				}
				return true, nil
			}
			last, lastFrom = append(last[:0], g...), from
			if last == nil {
				last = []byte{}
			}
			pp.Keys++
			if from != p {
				pp.KeysMoved++
			}
			return true, nil
		})
		if err != nil {
			return nil, err
		}
		pp.RecordCount = pp.Entries + len(b.extra(p))
		b.plan.Partitions = append(b.plan.Partitions, pp)
	}
	s.b, s.plan = b, b.plan
	return b.plan, nil
}

// Each calls fn with partition p of B's records in key order (as Build
// would plan them: its routed entries, the merged metadata, p's pending
// skips and input offset), until fn returns false. It needs Build first.
// The entries are fn's to keep.
func (s *Store) Each(p int32, fn func(Entry) bool) error {
	if s.b == nil {
		return fmt.Errorf("rescale: Store.Each before Build")
	}
	extra := s.b.extra(p)
	more := true
	err := s.each(spaceOut, p, func(k, v []byte) (bool, error) {
		for len(extra) > 0 && bytes.Compare(extra[0].Key, k) < 0 {
			if more = fn(extra[0]); !more {
				return false, nil
			}
			extra = extra[1:]
		}
		more = fn(Entry{Key: bytes.Clone(k), Value: bytes.Clone(v[4:])})
		return more, nil
	})
	if err != nil || !more {
		return err
	}
	for _, e := range extra {
		if !fn(e) {
			return nil
		}
	}
	return nil
}
