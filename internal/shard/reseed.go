package shard

import (
	"bytes"
	"encoding/binary"

	"github.com/kstate/kstate/changelog"
	"github.com/kstate/kstate/internal/kv"
)

// reseedKey marks a shard whose changelog partition is being re-seeded
// from it (see the engine's restore). Like offsetKey it is local only and
// never changelogged. While it is set, the shard's offset must not be
// trusted: the changelog may hold a partial (aborted) copy at offsets at or
// above it, which a read_committed restore would skip and then report as
// caught up.
const reseedKey = "\xffreseed"

// ReseedPending reports whether a re-seed of the changelog from this shard
// was begun and not finished (a crash in between).
func (s *Shard) ReseedPending() (bool, error) {
	if err := s.checkRestore("ReseedPending"); err != nil {
		return false, err
	}
	if err := s.flush(); err != nil {
		return false, shardErr("ReseedPending", err)
	}
	_, ok, err := s.store.Get([]byte(reseedKey))
	if err != nil {
		return false, shardErr("ReseedPending", err)
	}
	return ok, nil
}

// BeginReseed durably marks the shard as being re-seeded into its
// changelog; EndReseed clears the mark. Call it before anything is
// written to the changelog.
func (s *Shard) BeginReseed() error {
	if err := s.checkRestore("BeginReseed"); err != nil {
		return err
	}
	if err := s.flush(); err != nil {
		return shardErr("BeginReseed", err)
	}
	s.cache.clear()
	var b kv.Batch
	b.Put([]byte(reseedKey), []byte{1})
	s.resetReads()
	if err := s.store.Write(&b, kv.WriteOptions{Sync: true}); err != nil {
		return shardErr("BeginReseed", err)
	}
	return nil
}

// Records returns every changelogged entry of the shard as changelog
// records: the changelog layout entry first (layout.go: ahead of the
// records written in that layout), the other metadata (key space 0x00:
// registry, modes, input offset) last. A re-seed writes them to a new
// changelog partition.
func (s *Shard) Records() ([]changelog.Record, error) {
	if err := s.checkRestore("Records"); err != nil {
		return nil, err
	}
	if err := s.flush(); err != nil {
		return nil, shardErr("Records", err)
	}
	var data, meta []changelog.Record
	it := s.store.NewIter(everythingLower, everythingUpper)
	for ok := it.First(); ok; ok = it.Next() {
		if !changelogged(it.Key()) {
			continue
		}
		r := changelog.Record{Key: cloneBytes(it.Key()), Value: cloneBytes(it.Value())}
		if bytes.Equal(r.Key, layoutKey) {
			data = append(data, r) // meta keys come first: data is still empty
		} else if r.Key[0] == everythingLower[0] {
			meta = append(meta, r)
		} else {
			data = append(data, r)
		}
	}
	err := it.Error()
	if cerr := it.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, shardErr("Records", err)
	}
	return append(data, meta...), nil
}

// EndReseed records that the changelog holds the whole shard up to
// nextOffset: the offset and the cleared mark are written atomically and
// synced.
func (s *Shard) EndReseed(nextOffset int64) error {
	if err := s.checkRestore("EndReseed"); err != nil {
		return err
	}
	if err := s.flush(); err != nil {
		return shardErr("EndReseed", err)
	}
	s.cache.clear()
	var b kv.Batch
	b.Put([]byte(offsetKey), binary.BigEndian.AppendUint64(nil, uint64(nextOffset)))
	// The re-seed committed before this call: every record after it
	// comes later.
	since := s.now().UnixMilli()
	putSince(&b, since)
	b.Delete([]byte(reseedKey))
	s.resetReads()
	if err := s.store.Write(&b, kv.WriteOptions{Sync: true}); err != nil {
		return shardErr("EndReseed", err)
	}
	s.offset, s.stored = nextOffset, nextOffset
	s.since, s.storedSince = since, since
	return nil
}
