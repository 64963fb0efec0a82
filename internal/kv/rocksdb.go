//go:build cgo && !kstate_nocgo

package kv

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/linxGnu/grocksdb"
)

// rocksStore implements Store on one RocksDB database (default column family).
type rocksStore struct {
	dir string

	// mu is held shared by every operation that touches a C handle (store
	// and iterator methods) and exclusively by Close. Without it, a Get or
	// an iterator step racing with Close would dereference freed C memory
	// and crash the process instead of returning ErrClosed.
	mu struct {
		sync.RWMutex
		closed bool
	}

	db    *grocksdb.DB
	opts  *grocksdb.Options
	bbto  *grocksdb.BlockBasedTableOptions
	cache *grocksdb.Cache       // nil with a shared cache (RocksOptions.Memory)
	ro    *grocksdb.ReadOptions // for Get; read-only after open, so shared by readers
	// roSorted is ro for GetSorted, without filling the block cache: see
	// GetSorted.
	roSorted *grocksdb.ReadOptions
	wo       [4]*grocksdb.WriteOptions // indexed by woIndex(Sync, DisableWAL)
	fo       *grocksdb.FlushOptions

	// insertHints: opened with RocksOptions.InsertHints.
	insertHints bool

	// memtableFilter: the store's memtables have a whole-key bloom filter,
	// and it holds one of memtableFilters' slots until free.
	memtableFilter bool

	// w serialises writers: it guards the reused write batch buffer and the
	// "memtable holds WAL-less data" flag.
	w struct {
		sync.Mutex
		rep   batchRep // the batch being written, serialized (rocksdb_fast.go)
		order []int32  // the batch's operations in key order (rocksdb_sort.go)
		// unloggedInMemtable is true after a DisableWAL write until the next
		// flush. A WAL write in that state flushes first, because on a crash
		// RocksDB would replay the later WAL write but lose the earlier
		// WAL-less one: the shard would hold a changelog offset past state it
		// never persisted. Flushing keeps what survives a crash a prefix of
		// the writes.
		unloggedInMemtable bool
		// failed is the first write's I/O error ("IO error: ", a disk
		// full): later writes return it without calling RocksDB, whose
		// log writer (7.8) can abort the process on a write after a failed
		// append (an assertion in WritableFileWriter, seen once in CI in
		// TestRocksDBDiskFull). RocksDB refuses writes after such an error
		// anyway until the store is reopened.
		failed error
		// probe samples the values written to turn the block compression
		// off while they do not compress, and on again (compressprobe.go);
		// nil when the compression was chosen explicitly. compression is
		// the option's value when on.
		probe       *compressProbe
		compression string
	}

	// iters tracks open iterators so Close can destroy them before the DB:
	// RocksDB aborts if a DB is closed with live iterators.
	iters struct {
		sync.Mutex
		m map[*rocksIter]struct{}
	}
}

func woIndex(o WriteOptions) int {
	i := 0
	if o.Sync {
		i |= 1
	}
	if o.DisableWAL {
		i |= 2
	}
	return i
}

// OpenRocksDB opens (creating by default) the RocksDB store in dir.
func OpenRocksDB(dir string, o RocksOptions) (Store, error) {
	if err := o.ensureDefaults(); err != nil {
		return nil, err
	}
	if o.ReadOnly {
		o.ErrorIfMissing = true
	}
	if !o.ErrorIfMissing {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("kv: open rocksdb %s: %w", dir, err)
		}
	}
	candidates := []Compression{o.Compression}
	if o.Compression == CompressionDefault {
		candidates = []Compression{CompressionLZ4, CompressionSnappy}
	}
	var err error
	for _, c := range candidates {
		var s *rocksStore
		s, err = openRocks(dir, o, c)
		if err == nil {
			return s, nil
		}
		// RocksDB validates the compression at open ("Compression type LZ4
		// is not linked with the binary"); only that error is worth a retry.
		if !strings.Contains(strings.ToLower(err.Error()), "compression") {
			break
		}
	}
	return nil, err
}

func openRocks(dir string, o RocksOptions, c Compression) (*rocksStore, error) {
	s := &rocksStore{dir: dir}
	s.bbto = grocksdb.NewDefaultBlockBasedTableOptions()
	s.opts = grocksdb.NewDefaultOptions()
	if o.Memory != nil {
		if err := o.Memory.apply(s.bbto, s.opts); err != nil {
			s.opts.Destroy()
			s.bbto.Destroy()
			return nil, fmt.Errorf("kv: open rocksdb %s: %w", dir, err)
		}
	} else {
		s.cache = grocksdb.NewLRUCache(uint64(o.BlockCacheSize))
		s.bbto.SetBlockCache(s.cache)
	}
	if o.BloomBitsPerKey > 0 {
		s.bbto.SetFilterPolicy(grocksdb.NewBloomFilterFull(o.BloomBitsPerKey)) // ownership moves to bbto
	}
	// Keep index and filter blocks in the cache (bounded memory) and pin the
	// L0 ones, which every read consults.
	s.bbto.SetCacheIndexAndFilterBlocks(true)
	s.bbto.SetPinL0FilterAndIndexBlocksInCache(true)

	s.opts.SetBlockBasedTableFactory(s.bbto)
	s.opts.SetCreateIfMissing(!o.ErrorIfMissing)
	s.opts.SetWriteBufferSize(uint64(o.WriteBufferSize))
	if o.Memory != nil {
		// A memtable holds at least one arena block (by default 1 MiB with
		// memtables of 8 MiB or more) as soon as it is written. With many stores on one
		// budget those floors alone can exceed the write budget, and then
		// every write flushes a near-empty memtable (96 stores on 16 MiB
		// of write buffers: ~100x slower). Small blocks keep the floor low.
		s.opts.SetArenaBlockSize(sharedArenaBlock)
	}
	// Not under a shared budget: the filter is sized from WriteBufferSize
	// and allocated from the memtable's arena when the memtable is
	// created, so 16 stores on a few MiB of write buffers would each
	// charge 1.3 MiB to it before their first write, and every write
	// would then flush. And not past maxMemtableFilters stores of the
	// process (memtableFilters).
	if o.Memory == nil && !o.ReadOnly && memtableFilters.take() {
		s.memtableFilter = true
		s.opts.SetMemtableWholeKeyFiltering(true)
		s.opts.SetMemTablePrefixBloomSizeRatio(memtableBloomRatio)
	}
	if o.InsertHints && !o.ReadOnly {
		s.insertHints = true
		setInsertHints(s.opts)
	}
	s.opts.SetMaxBackgroundJobs(o.MaxBackgroundJobs)
	boundWALPreallocation(s.opts)
	s.opts.SetKeepLogFileNum(uint(o.KeepLogFiles))
	if !o.InfoLogFile {
		discardInfoLog(s.opts)
	}
	s.opts.SetLevelCompactionDynamicLevelBytes(true)
	s.opts.SetCompression(grocksCompression(c))
	if o.Compression == CompressionDefault && !o.ReadOnly {
		s.w.probe, s.w.compression = newCompressProbe(), rocksCompressionName(c)
	}
	// Compact tombstone-dense files early: a file in which some run of
	// deleteWindow consecutive entries holds deleteTrigger deletions is
	// marked for compaction when written, and compacting it towards the
	// last level drops the deletions. Scans step over every deleted entry
	// inside their range until then (timer churn: moved and fired timers,
	// closed sessions' maps and lists; issue #25).
	s.opts.AddCompactOnDeletionCollectorFactory(deleteWindow, deleteTrigger)

	s.ro = grocksdb.NewDefaultReadOptions()
	s.roSorted = grocksdb.NewDefaultReadOptions()
	s.roSorted.SetFillCache(false)
	for i := range s.wo {
		wo := grocksdb.NewDefaultWriteOptions()
		wo.SetSync(i&1 != 0)
		wo.DisableWAL(i&2 != 0)
		s.wo[i] = wo
	}
	s.fo = grocksdb.NewDefaultFlushOptions()
	s.fo.SetWait(true)
	s.iters.m = make(map[*rocksIter]struct{})

	var db *grocksdb.DB
	var err error
	if o.ReadOnly {
		db, err = grocksdb.OpenDbForReadOnly(s.opts, dir, false)
	} else {
		db, err = grocksdb.OpenDb(s.opts, dir)
	}
	if err != nil {
		s.free()
		return nil, fmt.Errorf("kv: open rocksdb %s (compression %v): %w", dir, c, err)
	}
	s.db = db
	return s, nil
}

// rocksCompressionName is c's name in RocksDB's options (SetOptions).
func rocksCompressionName(c Compression) string {
	switch c {
	case CompressionNone:
		return "kNoCompression"
	case CompressionSnappy:
		return "kSnappyCompression"
	case CompressionZSTD:
		return "kZSTD"
	}
	return "kLZ4Compression"
}

func grocksCompression(c Compression) grocksdb.CompressionType {
	switch c {
	case CompressionNone:
		return grocksdb.NoCompression
	case CompressionSnappy:
		return grocksdb.SnappyCompression
	case CompressionZSTD:
		return grocksdb.ZSTDCompression
	}
	return grocksdb.LZ4Compression
}

// free destroys every C object except the DB. The block-based table options
// own the filter policy; the cache is reference counted by RocksDB, so
// destroying our handle after the DB is closed releases it. A shared cache
// (RocksOptions.Memory) is not ours: s.cache is nil then.
func (s *rocksStore) free() {
	s.fo.Destroy()
	for _, wo := range s.wo {
		wo.Destroy()
	}
	s.ro.Destroy()
	s.roSorted.Destroy()
	s.opts.Destroy()
	s.bbto.Destroy()
	if s.cache != nil {
		s.cache.Destroy()
	}
	if s.memtableFilter {
		memtableFilters.give()
		s.memtableFilter = false
	}
}

func (s *rocksStore) Get(key []byte) ([]byte, bool, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.mu.closed {
		return nil, false, fmt.Errorf("%w: get from %s", ErrClosed, s.dir)
	}
	v, ok, err := rocksGet(s.db, s.ro, key)
	if err != nil {
		return nil, false, fmt.Errorf("kv: rocksdb get %q: %w", key, err)
	}
	return v, ok, nil
}

// GetSorted implements MultiGetter with RocksDB's batched MultiGet. The
// data blocks it reads do not fill the block cache: the shard reads a
// batch ahead only when the batch's keys miss the committed-state cache,
// a state larger than the caches whose blocks are seldom read again before
// they are evicted. Filling the cache with them cost an allocation, an
// insert and an eviction per block, and kept every shard's cache full (32
// MiB) for about 12 % of the blocks read at 10M keys (docs/BENCHMARKS.md,
// "Reads ahead without filling the block cache"). Index and filter blocks
// enter the cache when a table is opened, and Get and scans still fill it.
func (s *rocksStore) GetSorted(keys [][]byte, limit int, fn func(i int, value []byte, ok bool)) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.mu.closed {
		return fmt.Errorf("%w: get from %s", ErrClosed, s.dir)
	}
	if err := rocksMultiGet(s.db, s.roSorted, keys, limit, fn); err != nil {
		return fmt.Errorf("kv: rocksdb multi-get of %d keys: %w", len(keys), err)
	}
	return nil
}

func (s *rocksStore) Write(b *Batch, o WriteOptions) error {
	if err := o.check(); err != nil {
		return err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.mu.closed {
		return fmt.Errorf("%w: write to %s", ErrClosed, s.dir)
	}
	if b == nil || b.Len() == 0 {
		return nil
	}
	s.w.Lock()
	defer s.w.Unlock()
	if err := s.flushUnlogged(o); err != nil {
		return err
	}
	rep := &s.w.rep
	defer rep.release()
	ops := b.Ops()
	if p := s.w.probe; p != nil {
		for _, op := range ops {
			if op.Kind == OpPut {
				p.add(op.Value)
			}
		}
	}
	if inKeyOrder(ops) { // a write-behind flush, a sorted commit: no order to build
		rep.buildOrdered(ops, nil)
		return s.write(o, rep, len(ops))
	}
	if order, ok := sortedLast(ops, s.w.order); ok {
		if cap(order) <= maxKeptOrder {
			s.w.order = order[:0]
		} else {
			s.w.order = nil // not kept for ever: see batchRep
		}
		rep.buildOrdered(ops, order)
		return s.write(o, rep, len(ops))
	}
	// A DeleteRange's open end depends on the puts before it, so the ends
	// are resolved first, for the rep's size.
	ends := make([][]byte, len(ops))
	size := batchRepHeader
	var maxPut []byte // largest key put so far in this batch, for open-ended DeleteRange
	for i, op := range ops {
		switch op.Kind {
		case OpPut:
			if bytes.Compare(op.Key, maxPut) > 0 {
				maxPut = op.Key
			}
		case OpDelete:
		case OpDeleteRange:
			if s.insertHints {
				if err := checkHintedRange(op.Key); err != nil {
					return err
				}
			}
			end := op.End
			if end == nil {
				end = s.endAfterLast(maxPut)
			}
			// RocksDB rejects or misbehaves on inverted ranges; an empty
			// range deletes nothing, so skip it.
			if end == nil || bytes.Compare(op.Key, end) >= 0 {
				continue
			}
			ends[i] = end
		default:
			return fmt.Errorf("%w: unknown batch op kind %d", ErrInvalidOptions, op.Kind)
		}
		size += repSize(op, ends[i])
	}
	rep.reset(size)
	for i, op := range ops {
		switch op.Kind {
		case OpPut:
			rep.put(op.Key, op.Value)
		case OpDelete:
			rep.delete(op.Key)
		case OpDeleteRange:
			if ends[i] != nil {
				rep.deleteRange(op.Key, ends[i])
			}
		}
	}
	return s.write(o, rep, len(ops))
}

// WriteOrdered implements OrderedWriter: the operations go straight into
// the write's rep (off the Go heap when large, as Write's), with no Batch.
func (s *rocksStore) WriteOrdered(walk func(add func(key, value []byte, deleted bool)), o WriteOptions) error {
	if err := o.check(); err != nil {
		return err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.mu.closed {
		return fmt.Errorf("%w: write to %s", ErrClosed, s.dir)
	}
	size, n := batchRepHeader, 0
	var prev []byte
	ordered := true
	walk(func(key, value []byte, deleted bool) {
		if n > 0 && bytes.Compare(prev, key) >= 0 {
			ordered = false
		}
		prev = key
		op := Op{Kind: OpPut, Key: key, Value: value}
		if deleted {
			op = Op{Kind: OpDelete, Key: key}
		}
		size += repSize(op, nil)
		n++
	})
	if !ordered {
		return fmt.Errorf("%w: WriteOrdered's keys are not in strictly increasing order", ErrInvalidOptions)
	}
	if n == 0 {
		return nil
	}
	s.w.Lock()
	defer s.w.Unlock()
	if err := s.flushUnlogged(o); err != nil {
		return err
	}
	rep := &s.w.rep
	defer rep.release()
	rep.reset(size)
	probe := s.w.probe
	walk(func(key, value []byte, deleted bool) {
		if deleted {
			rep.delete(key)
		} else {
			rep.put(key, value)
			if probe != nil {
				probe.add(value)
			}
		}
	})
	if len(rep.buf) != size || int(rep.count) != n {
		return fmt.Errorf("%w: WriteOrdered's walk passed other operations the second time (%d ops, %d bytes; then %d, %d)",
			ErrInvalidOptions, n, size, rep.count, len(rep.buf))
	}
	return s.write(o, rep, n)
}

// flushUnlogged flushes the memtable before a logged write when it holds
// WAL-less writes, so that what a crash keeps is a prefix of the writes.
// Every write starts with it, so it also returns the store's earlier write
// failure (s.w.failed) before anything reaches RocksDB. Called with s.w
// held.
func (s *rocksStore) flushUnlogged(o WriteOptions) error {
	if s.w.failed != nil {
		return s.w.failed
	}
	if !o.DisableWAL && s.w.unloggedInMemtable {
		if err := s.db.Flush(s.fo); err != nil {
			return fmt.Errorf("kv: rocksdb flush of WAL-less writes before a logged write: %w", err)
		}
		s.w.unloggedInMemtable = false
	}
	return nil
}

// write applies the serialized batch of n operations. Called with s.w held.
func (s *rocksStore) write(o WriteOptions, rep *batchRep, n int) error {
	if err := rocksWrite(s.db, s.wo[woIndex(o)], rep.bytes()); err != nil {
		err = fmt.Errorf("kv: rocksdb write of %d ops: %w", n, err)
		if strings.Contains(err.Error(), "IO error: ") {
			s.w.failed = fmt.Errorf("kv: rocksdb store %s refuses writes after a failed one (reopen it): %w", s.dir, err)
		}
		return err
	}
	if o.DisableWAL {
		s.w.unloggedInMemtable = true
	}
	s.adaptCompression()
	return nil
}

// adaptCompression applies the probe's verdict (called with s.w held). A
// failed SetOptions leaves the store's compression as it is, for good.
func (s *rocksStore) adaptCompression() {
	p := s.w.probe
	if p == nil {
		return
	}
	on, changed := p.verdict()
	if !changed {
		return
	}
	name := "kNoCompression"
	if on {
		name = s.w.compression
	}
	if err := s.db.SetOptions([]string{"compression"}, []string{name}); err != nil {
		s.w.probe = nil
	}
}

// endAfterLast returns an exclusive end just past the greater of the last
// stored key and maxPut, so that DeleteRange(start, nil) reaches the end of
// the key space (RocksDB has no open-ended range delete). It returns nil when
// there is nothing to delete. Called with s.w held, so no writer can add a
// larger key meanwhile.
func (s *rocksStore) endAfterLast(maxPut []byte) []byte {
	it := s.db.NewIterator(s.ro)
	defer it.Close()
	it.SeekToLast()
	last := maxPut
	if it.Valid() {
		if k := it.Key().Data(); bytes.Compare(k, last) > 0 {
			last = k
		}
	}
	if last == nil {
		return nil
	}
	end := make([]byte, len(last)+1) // last+0x00 is the immediate successor of last
	copy(end, last)
	return end
}

func (s *rocksStore) Checkpoint(dir string) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.mu.closed {
		return fmt.Errorf("%w: checkpoint of %s", ErrClosed, s.dir)
	}
	cp, err := s.db.NewCheckpoint()
	if err != nil {
		return fmt.Errorf("kv: rocksdb checkpoint of %s: %w", s.dir, err)
	}
	defer cp.Destroy()
	// logSizeForFlush 0 always flushes the memtable first, so writes made
	// with DisableWAL (restore) are in the checkpoint too.
	if err := cp.CreateCheckpoint(dir, 0); err != nil {
		return fmt.Errorf("kv: rocksdb checkpoint of %s into %s: %w", s.dir, dir, err)
	}
	return nil
}

func (s *rocksStore) Estimate() (Estimate, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.mu.closed {
		return Estimate{}, fmt.Errorf("%w: estimate of %s", ErrClosed, s.dir)
	}
	sst, _ := s.db.GetIntProperty("rocksdb.live-sst-files-size")
	mem, _ := s.db.GetIntProperty("rocksdb.cur-size-all-mem-tables")
	entries, _ := s.db.GetIntProperty("rocksdb.estimate-num-keys")
	return Estimate{Bytes: int64(sst + mem), Entries: int64(entries)}, nil
}

func (s *rocksStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return nil
	}
	s.mu.closed = true
	s.iters.Lock()
	for it := range s.iters.m {
		it.destroy()
	}
	clear(s.iters.m)
	s.iters.Unlock()
	var err error
	if s.w.unloggedInMemtable {
		// RocksDB also flushes unlogged data on close, but silently; flush
		// explicitly so a failure to persist restored state is reported.
		if ferr := s.db.Flush(s.fo); ferr != nil {
			err = fmt.Errorf("kv: rocksdb flush on close of %s: %w", s.dir, ferr)
		}
	}
	s.db.Close()
	s.free()
	return err
}

// walPreallocBlock bounds the disk RocksDB reserves ahead of a store's
// write-ahead log (boundWALPreallocation).
const walPreallocBlock = 4 << 20

// boundWALPreallocation: RocksDB reserves (fallocate) the WAL in blocks of
// 1.1 × the memtable size (70 MiB with 64 MiB memtables) at a
// store's first logged write, and a shard is a store per partition: 256
// partitions reserved 18 GB of disk for a few MB of logs (issue #29, many
// partitions). max_total_wal_size caps that block; with one column family
// per store it changes nothing else (it forces flushes of other column
// families only). Kept apart from the memory options (issue #29: many
// partitions; the memory defaults are tuned separately).
func boundWALPreallocation(opts *grocksdb.Options) {
	opts.SetMaxTotalWalSize(walPreallocBlock)
}
