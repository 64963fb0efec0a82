package shard

import (
	"github.com/kstate/kstate/state"
)

// ReadCommitted calls each for every committed entry of the store in
// [lower, upper) (a nil bound is open), in key order, until each returns
// false. It reads the store alone, never the staging layer: what it sees
// is the state as of the last Commit (or restore), never a batch in
// progress. Unlike every other method it may be called from any
// goroutine, concurrently with batches; Close waits for it, and after
// Close it fails with state.ErrClosed. The key and value passed to each
// are only valid during the call.
func (s *Shard) ReadCommitted(lower, upper []byte, each func(key, value []byte) bool) error {
	s.readers.RLock()
	defer s.readers.RUnlock()
	if s.readClosed {
		return shardErr("ReadCommitted", state.ErrClosed)
	}
	it := s.store.NewIter(lower, upper)
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		if !each(it.Key(), it.Value()) {
			break
		}
	}
	return shardErr("ReadCommitted", it.Error())
}
