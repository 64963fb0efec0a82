package shard

import (
	"bytes"

	"github.com/kstate/kstate/state"
)

// ReadCommitted calls each for every committed entry of the store in
// [lower, upper) (a nil bound is open), in key order, until each returns
// false. It reads the committed state alone (the write-behind layer over
// the store), never the staging layer: what it sees is the state as of the
// last Commit (or restore), never a batch in progress. Unlike every other
// method it may be called from any goroutine, concurrently with batches;
// Close waits for it, and after Close it fails with state.ErrClosed. The
// key and value passed to each are only valid during the call.
func (s *Shard) ReadCommitted(lower, upper []byte, each func(key, value []byte) bool) error {
	s.readers.RLock()
	defer s.readers.RUnlock()
	if s.readClosed {
		return shardErr("ReadCommitted", state.ErrClosed)
	}
	// The layer's range is copied and the store iterator created under
	// wbMu: a commit changes the layer, and a flush writes the store and
	// empties the layer, under wbMu, so both show the same committed state
	// (a RocksDB or Pebble iterator reads the store as of its creation).
	// A frozen layer being written to the store (writebehind.go) is
	// copied too: under it, the store before or after its write is the
	// same committed state.
	s.wbMu.Lock()
	it := s.store.NewIter(lower, upper)
	var layer []wbCopy
	if s.frozen != nil && !s.frozen.layer.empty() {
		layer = s.frozen.layer.rangeCopy(lower, upper)
	}
	if s.wb != nil && !s.wb.empty() {
		layer = overlayCopies(layer, s.wb.rangeCopy(lower, upper))
	}
	s.wbMu.Unlock()
	defer it.Close()
	ok := it.First()
	for {
		var c int
		switch {
		case !ok && len(layer) == 0:
			return shardErr("ReadCommitted", it.Error())
		case !ok:
			c = 1
		case len(layer) == 0:
			c = -1
		default:
			c = bytes.Compare(it.Key(), layer[0].key)
		}
		if c < 0 {
			if !each(it.Key(), it.Value()) {
				break
			}
			ok = it.Next()
			continue
		}
		if c == 0 {
			ok = it.Next() // the layer shadows the store
		}
		e := layer[0]
		layer = layer[1:]
		if !e.deleted && !each(e.key, e.val) {
			break
		}
	}
	return shardErr("ReadCommitted", it.Error())
}
