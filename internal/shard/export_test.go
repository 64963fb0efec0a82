package shard

import "github.com/kstate/kstate/internal/kv"

// CrashForTest drops s as a killed process would: the committed batches
// kept in memory by write-behind are lost, then the store is closed (a
// store closed or not is the same to a reopen: its writes were made).
func CrashForTest(s *Shard) error {
	// A background write of a frozen layer lands before the crash (a
	// store shared with the next open must not change after it).
	if f := s.frozen; f != nil {
		if f.done != nil {
			<-f.done
		}
		f.layer.release()
		s.frozen = nil
	}
	s.wb = nil
	return s.Close()
}

// StoredOffsetForTest is the changelog offset in the store (a restore
// after a crash starts there).
func StoredOffsetForTest(s *Shard) int64 { return s.stored }

// UnflushedForTest returns the keys and charged bytes of the write-behind
// layer and the frozen one (keys in both count twice).
func UnflushedForTest(s *Shard) (keys int, bytes int64) {
	if s.wb == nil {
		return 0, 0
	}
	keys, bytes = len(s.wb.index), s.wb.used
	if f := s.frozenLayer(); f != nil {
		keys, bytes = keys+len(f.index), bytes+f.used
	}
	return keys, bytes
}

// AwaitFlushForTest waits for the background write of a frozen
// write-behind layer and retires it (its error, if any, is returned).
func AwaitFlushForTest(s *Shard) error { return s.awaitFrozen() }

// OffsetKeyForTest is the store key of the shard's changelog offset.
const OffsetKeyForTest = offsetKey

// PrefetchAllForTest makes Prefetch read ahead every variable the shard
// has read past its cache so far, for any number of grouping keys.
func PrefetchAllForTest(s *Shard) { s.pre.force = true }

// PrefetchServedForTest is how many reads prefetched values answered.
func PrefetchServedForTest(s *Shard) int { return s.pre.served }

// PrefetchCapableForTest reports whether s's store reads many keys at once
// (kv.MultiGetter), which Prefetch needs.
func PrefetchCapableForTest(s *Shard) bool {
	_, ok := s.store.(kv.MultiGetter)
	return ok
}

// CachedForTest reports whether s has a committed-state cache.
func CachedForTest(s *Shard) bool { return s.cache != nil }

// SetBackgroundWritesForTest bounds the frozen layers written at once to
// n, until the returned function restores the bound.
func SetBackgroundWritesForTest(n int) (restore func()) {
	old := backgroundWrites
	backgroundWrites = newSemaphore(n)
	return func() { backgroundWrites = old }
}

// CacheModeForTest returns the shard's sparse verdict and whether its
// cache bypass (shardCache.bypass) is applied.
func CacheModeForTest(s *Shard) (sparse, bypass bool) {
	return s.cache.sparse.Load(), s.cache.bypass.Load()
}

// CacheWindowForTest is the lookups over which the sparse verdict is taken.
const CacheWindowForTest = cacheWindow
