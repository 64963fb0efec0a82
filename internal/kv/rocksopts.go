package kv

import (
	"fmt"
	"sync"
)

// Compression selects the block compression of a RocksDB store.
type Compression uint8

const (
	// CompressionDefault is LZ4, or Snappy when librocksdb was built without LZ4.
	// LZ4 is chosen because state values are small and read often: it
	// decompresses faster than Snappy at a similar ratio.
	CompressionDefault Compression = iota
	CompressionNone
	CompressionSnappy
	CompressionLZ4
	CompressionZSTD
)

func (c Compression) String() string {
	switch c {
	case CompressionDefault:
		return "default"
	case CompressionNone:
		return "none"
	case CompressionSnappy:
		return "snappy"
	case CompressionLZ4:
		return "lz4"
	case CompressionZSTD:
		return "zstd"
	}
	return fmt.Sprintf("compression(%d)", uint8(c))
}

// RocksOptions tune a RocksDB store. The zero value works; every field
// documents the default it overrides.
type RocksOptions struct {
	// BlockCacheSize is the LRU cache of uncompressed blocks, in bytes,
	// overriding the default of 32 MiB (defaultBlockCache). The cache is per store (per shard):
	// with many partitions per process, size it down, or set Memory.
	// Ignored when Memory is set.
	BlockCacheSize int64
	// Memory, when set, replaces the store's own block cache with the
	// shared one and adds the store's memtables to the shared write-buffer
	// budget, overriding the default of nil (a cache of BlockCacheSize and
	// memtables bounded only by WriteBufferSize, per store). It must not be
	// closed before the open (it may be closed before the store).
	Memory *SharedMemory
	// BloomBitsPerKey sizes the whole-key bloom filter, overriding the
	// default of 10 bits per key (~1% false positives), which lets a point
	// Get of an absent key (the common case for new grouping keys) skip
	// reading data blocks. A negative value disables the filter.
	BloomBitsPerKey float64
	// WriteBufferSize is the memtable size in bytes, overriding the default
	// of 32 MiB (defaultWriteBuffer).
	// With Memory set, a memtable is also flushed early when all the stores'
	// memtables together reach the shared write-buffer budget.
	WriteBufferSize int64
	// MaxBackgroundJobs bounds concurrent flushes and compactions, overriding
	// the default of 2.
	MaxBackgroundJobs int
	// Compression overrides the default CompressionDefault (LZ4, else Snappy).
	// An explicitly chosen algorithm that librocksdb lacks fails the open.
	Compression Compression
	// InfoLogFile writes RocksDB's info LOG file in the store directory,
	// overriding the default of no LOG file. Off by default because RocksDB
	// 7.8's file logger aborts the process (SIGABRT) on a full disk instead
	// of letting the write error surface (see discardInfoLog); turn it on
	// only to diagnose RocksDB itself.
	InfoLogFile bool
	// KeepLogFiles is how many RocksDB info LOG files are kept in the store
	// directory when InfoLogFile is set, overriding the default of 3
	// (RocksDB's own default of 1000 slowly fills the disk of a
	// long-running shard).
	KeepLogFiles int
	// ErrorIfMissing fails the open when dir holds no database, instead of
	// the default of creating the directory and an empty database.
	ErrorIfMissing bool
	// InsertHints makes a memtable insert start from where the last insert
	// of a key with the same first byte went, instead of the default of a
	// search from the skip list's top (see setInsertHints). It suits a
	// store whose batches write keys in order within each first byte, as a
	// shard's do. Such a store refuses a DeleteRange whose start key is not
	// empty and does not begin with 0x00 (ErrInvalidOptions); a shard's only
	// range deletion (Wipe) starts at 0x00.
	InsertHints bool
	// ReadOnly opens the database read-only (RocksDB's OpenForReadOnly:
	// no lock taken, a view as of the open, writes fail), overriding the
	// default of read-write. Another process may keep the database open
	// for writing meanwhile: the state reader uses it. Implies
	// ErrorIfMissing.
	ReadOnly bool
}

const (
	// defaultBlockCache is a RocksDB store's block cache. 64 MiB until
	// session 35: a state much larger than it reads nearly every block from
	// the OS (4 shards at 10M keys hit it for ~12 % of their reads), and
	// its 64 MiB per shard were a quarter of that run's peak RSS; since
	// reads of such a state are read ahead in batches (shard.Prefetch), a
	// miss costs less. A state that fits the cache (the count and heavy
	// benchmarks) never fills it. docs/BENCHMARKS.md, "Reads ahead and a
	// 32 MiB block cache".
	defaultBlockCache = 32 << 20
	defaultBloomBits  = 10
	// defaultWriteBuffer is a RocksDB store's memtable size: a store holds
	// up to two (one filling, one flushing). 64 MiB until session 31: a
	// shard rewrites its hot keys, so its memtable fills with versions a
	// flush drops, and 4 shards' memtables were about a quarter of the
	// heavy benchmark's peak RSS. 32 MiB took 95 MB off it (685 → 590 MB)
	// and 45–96 MB off the 3M-key state's, with the rate level and 2–4 %
	// more CPU, the count workload level (docs/BENCHMARKS.md, "32 MiB
	// memtables"). 16 MiB had cost count 6–11 % more CPU in session 19,
	// before the memtable insert hints.
	defaultWriteBuffer  = 32 << 20
	defaultBGJobs       = 2
	defaultKeepLogFiles = 3
	sharedArenaBlock    = 64 << 10
	// memtableBloomRatio sizes each memtable's whole-key bloom filter as
	// a share of the memtable (0.02 of 32 MiB: ~10 bits a key at half a
	// million small entries). A point read of a key the memtable does not hold
	// (a new grouping key, or one last written before the memtable's
	// switch: nearly every read of a state larger than memory) then skips
	// the memtable's skip list search, which was half of RocksDB's Get on
	// the big workload (docs/BENCHMARKS.md, "State larger than memory").
	// Stores on a shared budget (RocksOptions.Memory) have none, and
	// neither have the stores opened while maxMemtableFilters others
	// with one are open.
	memtableBloomRatio = 0.02
	// maxMemtableFilters bounds the stores of a process whose memtables
	// have the filter. RocksDB zeroes a memtable's filter when it creates
	// the memtable, so each costs 0.02 of it in resident memory (1.3 MiB
	// with 64 MiB memtables; twice while a full memtable flushes) whatever
	// the store holds: 64 shards of a small state took 176 MiB of peak RSS
	// instead of 94 with 64 MiB memtables (rssbench,
	// docs/BENCHMARKS.md, "Session 26"). The first stores opened keep it:
	// an instance with few partitions, where each shard's state is large
	// and the filter pays, has it on all of them.
	maxMemtableFilters = 8

	// A RocksDB file is compacted early when deleteTrigger of some
	// deleteWindow consecutive entries (in key order) are deletions: half
	// of them. A key space of moved or fired timers, or of closed
	// sessions, reaches it; a space of live values being updated does not.
	deleteWindow  = 4096
	deleteTrigger = 2048
)

func (o *RocksOptions) ensureDefaults() error {
	if o.BlockCacheSize < 0 || o.WriteBufferSize < 0 || o.MaxBackgroundJobs < 0 || o.KeepLogFiles < 0 {
		return fmt.Errorf("%w: negative RocksOptions size or count: %+v", ErrInvalidOptions, *o)
	}
	if o.Compression > CompressionZSTD {
		return fmt.Errorf("%w: unknown %v", ErrInvalidOptions, o.Compression)
	}
	if o.BlockCacheSize == 0 {
		o.BlockCacheSize = defaultBlockCache
	}
	if o.BloomBitsPerKey == 0 {
		o.BloomBitsPerKey = defaultBloomBits
	}
	if o.WriteBufferSize == 0 {
		o.WriteBufferSize = defaultWriteBuffer
	}
	if o.MaxBackgroundJobs == 0 {
		o.MaxBackgroundJobs = defaultBGJobs
	}
	if o.KeepLogFiles == 0 {
		o.KeepLogFiles = defaultKeepLogFiles
	}
	return nil
}

// memtableFilters counts the open stores of the process whose memtables
// have the whole-key bloom filter (at most maxMemtableFilters).
var memtableFilters filterSlots

type filterSlots struct {
	mu   sync.Mutex
	used int
}

// take reserves a slot; false when all maxMemtableFilters are used.
func (f *filterSlots) take() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.used >= maxMemtableFilters {
		return false
	}
	f.used++
	return true
}

// give returns a slot taken by take.
func (f *filterSlots) give() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.used--
}
