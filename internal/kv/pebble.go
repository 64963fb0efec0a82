package kv

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// PebbleOptions tune a Pebble store. The zero value works; every field
// documents the default it overrides.
type PebbleOptions struct {
	// BlockCacheSize is the cache of uncompressed blocks, in bytes,
	// overriding the default of 16 MiB (defaultPebbleBlockCache), beside
	// the memtables (pebbleMemtableReserve). Ignored when Memory is set.
	BlockCacheSize int64
	// Memory, when set, makes the store use the budget's shared Pebble block
	// cache instead of its own, overriding the default of nil. Pebble
	// reserves the store's memtables from it (up to two of WriteBufferSize),
	// so the blocks it holds are the budget less the shards' memtables. It
	// must not be closed before the open.
	Memory *SharedMemory
	// WriteBufferSize is the memtable size in bytes, overriding the default
	// of 32 MiB (defaultPebbleWriteBuffer), or with Memory a sixteenth of
	// the budget within [1 MiB, 32 MiB] (sharedPebbleMemtable).
	WriteBufferSize int64
	// ErrorIfMissing fails the open when dir holds no database, instead of
	// the default of creating the directory and an empty database.
	ErrorIfMissing bool
	// ReadOnly opens the database read-only, overriding the default of
	// read-write: no lock is taken (another process may keep the database
	// open for writing: the state reader uses it), the view is as of the
	// open, writes fail. Implies ErrorIfMissing. A writer's compaction may
	// delete a file the reader has not opened yet: the reader then fails
	// with an error (never wrong data) and can be run again.
	ReadOnly bool
}

// pebbleStore implements Store on one Pebble database.
type pebbleStore struct {
	dir string

	// mu is held shared by every operation on the database and its
	// iterators and exclusively by Close: Pebble panics on use after Close,
	// and this turns that race into ErrClosed.
	mu struct {
		sync.RWMutex
		closed bool
	}
	db *pebble.DB

	// w serialises writers (the open-ended DeleteRange reads the last key).
	w sync.Mutex
	// probe samples the values written (under w) to turn the block
	// compression off while they do not compress, and on again
	// (compressprobe.go); uncompressed is its verdict, which the levels'
	// Compression reads at every table written. nil when read-only.
	probe        *compressProbe
	uncompressed atomic.Bool

	// bgErr is the last background (flush or compaction) error, cleared by
	// the next successful flush. Pebble does not fail writes while its
	// flushes fail (a full disk): it retries them and, once the memtables
	// are full, stalls every writer until one succeeds. A Write that finds
	// bgErr set fails at once with it instead, so a full disk surfaces as
	// an error, as it does with RocksDB. A write that entered the stall
	// before the first flush failed still waits until space returns.
	bgErr atomic.Pointer[error]
	// failed is set when a write was given up (see Write); inflight counts
	// commits still running in Pebble, which Close waits for (bounded).
	failed   atomic.Pointer[error]
	inflight sync.WaitGroup

	// iters tracks open iterators: Pebble's Close fails on leaked ones, so
	// the store's Close closes them first.
	iters struct {
		sync.Mutex
		m map[*pebbleIter]struct{}
	}
}

// quietLogger discards Pebble's informational and error log lines (WAL
// recovery on every open, background errors that also reach the caller as
// returned errors); a fatal one still stops the process, as Pebble expects.
type quietLogger struct{}

func (quietLogger) Infof(string, ...any)  {}
func (quietLogger) Errorf(string, ...any) {}
func (quietLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf("kv: pebble fatal error: "+format, args...))
}

// noLockFS is the default file system without directory locks, for
// read-only opens beside a writer (Pebble locks even read-only opens).
type noLockFS struct{ vfs.FS }

func (noLockFS) Lock(string) (io.Closer, error) { return io.NopCloser(nil), nil }

// OpenPebble opens (creating by default) the Pebble store in dir.
func OpenPebble(dir string, o PebbleOptions) (Store, error) {
	if o.BlockCacheSize < 0 || o.WriteBufferSize < 0 {
		return nil, fmt.Errorf("%w: negative PebbleOptions size: %+v", ErrInvalidOptions, o)
	}
	if o.BlockCacheSize == 0 {
		o.BlockCacheSize = defaultPebbleBlockCache
	}
	if o.WriteBufferSize == 0 {
		o.WriteBufferSize = defaultPebbleWriteBuffer
		if o.Memory != nil {
			o.WriteBufferSize = sharedPebbleMemtable(o.Memory.Bytes())
		}
	}
	if o.ReadOnly {
		o.ErrorIfMissing = true
	}
	s := &pebbleStore{dir: dir}
	s.iters.m = make(map[*pebbleIter]struct{})
	opts := &pebble.Options{
		ErrorIfNotExists:   o.ErrorIfMissing,
		ReadOnly:           o.ReadOnly,
		MemTableSize:       uint64(o.WriteBufferSize),
		FormatMajorVersion: pebble.FormatNewest,
		Logger:             quietLogger{},
		EventListener: &pebble.EventListener{
			BackgroundError: func(err error) { s.bgErr.Store(&err) },
			FlushEnd: func(fi pebble.FlushInfo) {
				if fi.Err == nil {
					s.bgErr.Store(nil)
				}
			},
		},
	}
	// A 10-bit bloom filter on every level (Pebble has none by default), as
	// the RocksDB backend has: a Get of an absent key (a new grouping key)
	// then skips reading data blocks. Levels inherit L0's policy.
	opts.Levels[0].FilterPolicy = bloom.FilterPolicy(defaultBloomBits)
	if !o.ReadOnly {
		s.probe = newCompressProbe()
		compression := func() *sstable.CompressionProfile {
			if s.uncompressed.Load() {
				return sstable.NoCompression
			}
			return sstable.SnappyCompression // Pebble's default
		}
		for i := range opts.Levels {
			opts.Levels[i].Compression = compression
		}
	}
	if o.ReadOnly {
		opts.FS = noLockFS{vfs.Default}
	}
	if o.Memory != nil {
		c, err := o.Memory.pebbleCache()
		if err != nil {
			return nil, fmt.Errorf("kv: open pebble %s: %w", dir, err)
		}
		opts.Cache = c // Open takes its own reference
	} else {
		size := o.BlockCacheSize
		if !o.ReadOnly { // a reader writes no memtable (it may replay a WAL into one)
			size += pebbleMemtableReserve(o.WriteBufferSize)
		}
		c := pebble.NewCache(size)
		defer c.Unref() // the DB holds its own reference
		opts.Cache = c
	}
	if o.ErrorIfMissing {
		// Pebble creates a missing directory before ErrorIfNotExists is
		// checked; refuse first, so a typo never leaves an empty directory.
		if _, err := os.Stat(dir); err != nil {
			return nil, fmt.Errorf("kv: open pebble %s: %w", dir, err)
		}
	}
	db, err := pebble.Open(dir, opts)
	if err != nil {
		return nil, fmt.Errorf("kv: open pebble %s: %w", dir, err)
	}
	s.db = db
	return s, nil
}

func (s *pebbleStore) Get(key []byte) ([]byte, bool, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.mu.closed {
		return nil, false, fmt.Errorf("%w: get from %s", ErrClosed, s.dir)
	}
	v, closer, err := s.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("kv: pebble get %q: %w", key, err)
	}
	out := append([]byte{}, v...)
	if err := closer.Close(); err != nil {
		return nil, false, fmt.Errorf("kv: pebble get %q: %w", key, err)
	}
	return out, true, nil
}

// GetSorted implements MultiGetter with one Pebble iterator over the
// sorted keys: each key is a SeekPrefixGE (the whole key is the prefix),
// which in increasing order moves each level's iterator on from where the
// last key left it instead of seeking the level's files again, as a Get
// does. It reads the bottom level's bloom filters too (UseL6Filters),
// which a Get leaves out: the shard reads ahead when a batch's keys miss
// its caches, a state larger than memory, where a new grouping key is
// absent from every level and most keys are in the bottom one.
func (s *pebbleStore) GetSorted(keys [][]byte, limit int, fn func(i int, value []byte, ok bool)) (err error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.mu.closed {
		return fmt.Errorf("%w: get from %s", ErrClosed, s.dir)
	}
	if len(keys) == 0 {
		return nil
	}
	it, err := s.db.NewIter(&pebble.IterOptions{KeyTypes: pebble.IterKeyTypePointsOnly, UseL6Filters: true})
	if err != nil {
		return fmt.Errorf("kv: pebble multi-get of %d keys: %w", len(keys), err)
	}
	defer func() {
		if cerr := it.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("kv: pebble multi-get of %d keys: %w", len(keys), cerr)
		}
	}()
	total := 0
	for i, k := range keys {
		if !it.SeekPrefixGE(k) || !bytes.Equal(it.Key(), k) {
			if err := it.Error(); err != nil {
				return fmt.Errorf("kv: pebble multi-get %q: %w", k, err)
			}
			fn(i, nil, false)
			continue
		}
		v, err := it.ValueAndErr()
		if err != nil {
			return fmt.Errorf("kv: pebble multi-get %q: %w", k, err)
		}
		if total+len(v) > limit {
			continue // read with Get
		}
		total += len(v)
		fn(i, v, true)
	}
	return nil
}

// Write applies b in one Pebble batch. DisableWAL has no per-write
// equivalent in Pebble: such writes go to the WAL without an fsync (a crash
// may lose them, as with RocksDB), which keeps what survives a crash a
// prefix of the writes (the property RocksDB needs a flush for when
// WAL-less and logged writes mix). Logged writes are always synced (below).
func (s *pebbleStore) Write(b *Batch, o WriteOptions) error {
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
	if err := s.failedErr(); err != nil {
		return err
	}
	if e := s.bgErr.Load(); e != nil {
		return fmt.Errorf("kv: pebble write of %d ops to %s refused: a background flush failed (writes would stall until it succeeds): %w", b.Len(), s.dir, *e)
	}
	pb := s.db.NewBatch()
	var maxPut []byte // largest key put so far in this batch, for open-ended DeleteRange
	for _, op := range b.Ops() {
		var err error
		switch op.Kind {
		case OpPut:
			err = pb.Set(op.Key, op.Value, nil)
			if s.probe != nil {
				s.probe.add(op.Value)
			}
			if bytes.Compare(op.Key, maxPut) > 0 {
				maxPut = op.Key
			}
		case OpDelete:
			err = pb.Delete(op.Key, nil)
		case OpDeleteRange:
			end := op.End
			if end == nil {
				if end, err = s.endAfterLast(maxPut); err != nil {
					pb.Close()
					return err
				}
			}
			if end == nil || bytes.Compare(op.Key, end) >= 0 {
				continue // empty or inverted: nothing to delete
			}
			err = pb.DeleteRange(op.Key, end, nil)
		default:
			pb.Close()
			return fmt.Errorf("%w: unknown batch op kind %d", ErrInvalidOptions, op.Kind)
		}
		if err != nil {
			pb.Close()
			return fmt.Errorf("kv: pebble batch of %d ops: %w", b.Len(), err)
		}
	}
	// A logged write is synced even without Sync: Pebble keeps unsynced
	// WAL records in its own buffer (until 32 KiB accumulate), where a
	// process crash loses them and a read-only open beside the writer (the
	// state reader) cannot see them; RocksDB hands them to the OS at once.
	// Syncing gives the same guarantees as RocksDB's unsynced write, at the
	// cost of an fsync per logged write (one per committed batch).
	if s.probe != nil {
		if on, changed := s.probe.verdict(); changed {
			s.uncompressed.Store(!on)
		}
	}
	wo := pebble.Sync
	if o.DisableWAL {
		wo = pebble.NoSync
	}
	// The commit runs in its own goroutine so that a write stalled behind
	// failing flushes (a full disk) can be given up: see commitStallLimit.
	done := make(chan error, 1)
	s.inflight.Add(1)
	go func() {
		defer s.inflight.Done()
		defer pb.Close()
		defer func() {
			// Pebble treats a failed WAL write as fatal (Logger.Fatalf,
			// which panics here): the store is unusable from then on.
			if r := recover(); r != nil {
				err := fmt.Errorf("kv: pebble write to %s failed; the store must be reopened: %v", s.dir, r)
				s.fail(err)
				done <- err
			}
		}()
		done <- pb.Commit(wo)
	}()
	var stalledSince time.Time
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			if err != nil {
				return fmt.Errorf("kv: pebble write of %d ops to %s: %w", b.Len(), s.dir, err)
			}
			return nil
		case now := <-tick.C:
			e := s.bgErr.Load()
			if e == nil {
				stalledSince = time.Time{}
				continue
			}
			if stalledSince.IsZero() {
				stalledSince = now
			} else if now.Sub(stalledSince) >= commitStallLimit {
				err := fmt.Errorf("kv: pebble write of %d ops to %s stalled behind failing flushes; the store must be reopened (the write may still apply, whole, if the flush succeeds): %w", b.Len(), s.dir, *e)
				s.fail(err)
				return err
			}
		}
	}
}

// defaultPebbleWriteBuffer and defaultPebbleBlockCache are a Pebble
// store's memtable size and its cache of blocks beside its memtables
// (pebbleMemtableReserve). With a state larger than memory (10M keys of
// 200 bytes, 4 shards) 32 MiB memtables and a 16 MiB cache cost 0–6 % of
// the rate of 64 MiB and 32 MiB for a third less peak RSS, 715–745 against
// 1,070–1,130 MB, level with Kafka Streams'; 16 MiB memtables cost a fifth
// of the rate (docs/BENCHMARKS.md, "Pebble's memory (session 46)").
// (Session 32 measured 32 MiB memtables 19 % slower, while the cache held
// no block: every extra level-0 table's filter was read from its file.)
const (
	defaultPebbleWriteBuffer = 32 << 20
	defaultPebbleBlockCache  = 16 << 20
)

// pebbleMemtableReserve is the share of a store's own block cache that
// Pebble takes for its memtables of memtableSize bytes: Pebble reserves
// every memtable it allocates from the block cache (a writing store holds
// two: the one being filled and the one being flushed, or the flushed one
// it keeps to reuse), and the cache keeps blocks only within what is left.
// Without this share a cache smaller than two memtables held no block at
// all once the memtables had grown to full size: every filter, index and
// data block was read from its file and checksummed again on every use
// (about 40 % of a 10M-key run's CPU; docs/BENCHMARKS.md, "Pebble's block
// cache, and its reads ahead"). With it the store keeps BlockCacheSize of blocks beside full
// memtables, and its memory stays within BlockCacheSize plus two
// memtables, as RocksDB's does; while its memtables are smaller (a store
// that writes little), blocks may use their unused share.
func pebbleMemtableReserve(memtableSize int64) int64 { return 2 * memtableSize }

// sharedPebbleMemtable is the memtable size of a Pebble store on a shared
// budget of bytes: a sixteenth of it, within [1 MiB, defaultPebbleWriteBuffer].
// Pebble reserves every store's memtables from the shared cache (two a
// store, as above), so with the default size a budget below two memtables
// a shard held no block at all, and every read went to the files. At a
// sixteenth, four shards writing at full speed hold half the budget in
// memtables, as RocksDB's write-buffer manager holds theirs to half; a
// shard that writes little grows its memtables only as far as it needs.
func sharedPebbleMemtable(bytes int64) int64 {
	return min(max(bytes/16, 1<<20), defaultPebbleWriteBuffer)
}

// commitStallLimit is how long a write may wait while background flushes
// keep failing before it is given up and the store marked failed.
const commitStallLimit = time.Second

// fail marks the store unusable: every later operation returns err.
func (s *pebbleStore) fail(err error) { s.failed.CompareAndSwap(nil, &err) }

func (s *pebbleStore) failedErr() error {
	if e := s.failed.Load(); e != nil {
		return *e
	}
	return nil
}

// endAfterLast returns an exclusive end just past the greater of the last
// stored key and maxPut (Pebble has no open-ended range delete), or nil
// when there is nothing to delete. Called with s.w held.
func (s *pebbleStore) endAfterLast(maxPut []byte) ([]byte, error) {
	it, err := s.db.NewIter(nil)
	if err != nil {
		return nil, fmt.Errorf("kv: pebble iterator: %w", err)
	}
	last := maxPut
	if it.Last() && bytes.Compare(it.Key(), last) > 0 {
		last = append([]byte{}, it.Key()...)
	}
	if err := it.Close(); err != nil {
		return nil, fmt.Errorf("kv: pebble iterator: %w", err)
	}
	if last == nil {
		return nil, nil
	}
	end := make([]byte, len(last)+1) // last+0x00 is the immediate successor of last
	copy(end, last)
	return end, nil
}

// Checkpoint flushes the WAL (NoSync and "DisableWAL" writes are in it) and
// writes an openable copy (hard links where possible) into dir.
func (s *pebbleStore) Checkpoint(dir string) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.mu.closed {
		return fmt.Errorf("%w: checkpoint of %s", ErrClosed, s.dir)
	}
	if err := s.db.Checkpoint(dir, pebble.WithFlushedWAL()); err != nil {
		return fmt.Errorf("kv: pebble checkpoint of %s into %s: %w", s.dir, dir, err)
	}
	return nil
}

func (s *pebbleStore) Close() error {
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
	if ferr := s.failedErr(); ferr != nil {
		// A commit may still be stalled inside Pebble (or Pebble hit a
		// fatal WAL error): wait a little, then abandon the database rather
		// than hang the caller; its files stay locked until the process exits.
		closed := make(chan error, 1)
		go func() {
			s.inflight.Wait()
			defer func() {
				if r := recover(); r != nil {
					closed <- fmt.Errorf("kv: pebble close of %s: %v", s.dir, r)
				}
			}()
			closed <- s.db.Close()
		}()
		select {
		case err := <-closed:
			if err != nil {
				return fmt.Errorf("kv: pebble close of %s after a failed write (%v): %w", s.dir, ferr, err)
			}
		case <-time.After(5 * time.Second):
			return fmt.Errorf("kv: pebble close of %s abandoned (the database did not close after a failed write): %w", s.dir, ferr)
		}
		return nil
	}
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("kv: pebble close of %s: %w", s.dir, err)
	}
	return nil
}

// NewIter returns an iterator over [lower, upper). The bounds are copied.
func (s *pebbleStore) NewIter(lower, upper []byte) Iterator {
	it := &pebbleIter{s: s}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.mu.closed {
		it.err = fmt.Errorf("%w: new iterator on %s", ErrClosed, s.dir)
		it.closed = true
		return it
	}
	// An empty range is answered here, but the Pebble iterator is created
	// all the same: a SetBounds to a non-empty range must see the store as
	// of NewIter.
	it.setBounds(lower, upper)
	var o *pebble.IterOptions
	if !it.empty { // Pebble is not asked to make sense of an inverted range
		o = &pebble.IterOptions{LowerBound: it.lower, UpperBound: it.upper}
	}
	pi, err := s.db.NewIter(o)
	if err != nil {
		it.err = fmt.Errorf("kv: pebble iterator on %s: %w", s.dir, err)
		return it
	}
	it.it = pi
	s.iters.Lock()
	s.iters.m[it] = struct{}{}
	s.iters.Unlock()
	return it
}

// pebbleIter wraps a Pebble iterator; safe against a concurrent Close of its
// store (not for concurrent use by several goroutines).
type pebbleIter struct {
	s            *pebbleStore
	it           *pebble.Iterator // nil once destroyed
	lower, upper []byte           // nil: open (non-nil bounds are the iterator's copies)
	lbuf, ubuf   []byte           // the copies' buffers, reused by SetBounds
	returned     uint64           // entries the Pebble iterator returned
	skipped      uint64           // DeletesSkipped as of the last count

	empty bool
	iterState
}

// setBounds records [lower, upper) in the iterator's buffers.
func (i *pebbleIter) setBounds(lower, upper []byte) {
	i.lower, i.upper = nil, nil
	if len(lower) > 0 {
		i.lbuf = append(i.lbuf[:0], lower...)
		i.lower = i.lbuf
	}
	if upper != nil {
		i.ubuf = append(i.ubuf[:0], upper...)
		i.upper = i.ubuf[:len(upper):len(upper)]
		if i.upper == nil {
			i.upper = []byte{}
		}
	}
	i.empty = upper != nil && (len(upper) == 0 || bytes.Compare(lower, upper) >= 0)
}

// SetBounds changes the range to [lower, upper) (Pebble's SetBounds, which
// keeps the iterator's view of the store) and unpositions the iterator.
func (i *pebbleIter) SetBounds(lower, upper []byte) {
	i.valid, i.key, i.value = false, nil, nil
	if i.closed || i.err != nil {
		return
	}
	i.s.mu.RLock()
	defer i.s.mu.RUnlock()
	if i.s.mu.closed || i.it == nil {
		return
	}
	i.setBounds(lower, upper)
	if !i.empty {
		i.it.SetBounds(i.lower, i.upper) // Pebble copies them
	}
}

// DeletesSkipped counts the internal entries Pebble visited and did not
// return: tombstones and superseded versions.
func (i *pebbleIter) DeletesSkipped() uint64 {
	i.s.mu.RLock()
	defer i.s.mu.RUnlock()
	i.countSkipped()
	return i.skipped
}

// countSkipped updates skipped from the live Pebble iterator's stats;
// callers hold s.mu.
func (i *pebbleIter) countSkipped() {
	if i.it == nil {
		return
	}
	if points := i.it.Stats().InternalStats.PointCount; points > i.returned {
		i.skipped = points - i.returned
	}
}

// destroy closes the Pebble iterator; callers hold s.mu.
func (i *pebbleIter) destroy() {
	if i.it != nil {
		i.countSkipped()
		if err := i.it.Close(); err != nil && i.err == nil {
			i.err = fmt.Errorf("kv: pebble iterator: %w", err)
		}
		i.it = nil
	}
}

// step runs one positioning call under the store's read lock. Key and value
// are copied: callers may keep them past the next positioning call, as with
// the RocksDB backend.
func (i *pebbleIter) step(move func(it *pebble.Iterator) bool) bool {
	i.valid, i.key, i.value = false, nil, nil
	if i.closed || i.err != nil {
		return false
	}
	i.s.mu.RLock()
	defer i.s.mu.RUnlock()
	if i.s.mu.closed {
		i.err = fmt.Errorf("%w: iterator used after close of %s", ErrClosed, i.s.dir)
		return false
	}
	if i.empty || i.it == nil {
		return false
	}
	ok := move(i.it) && i.it.Valid()
	if ok {
		i.returned++
	}
	if !ok {
		if err := i.it.Error(); err != nil {
			i.err = fmt.Errorf("kv: pebble iterator: %w", err)
		}
		return false
	}
	v, err := i.it.ValueAndErr()
	if err != nil {
		i.err = fmt.Errorf("kv: pebble iterator value: %w", err)
		return false
	}
	k := i.it.Key()
	buf := make([]byte, len(k)+len(v))
	copy(buf, k)
	copy(buf[len(k):], v)
	i.key, i.value = buf[:len(k):len(k)], buf[len(k):]
	i.valid = true
	return true
}

func (i *pebbleIter) First() bool { return i.step((*pebble.Iterator).First) }
func (i *pebbleIter) Last() bool  { return i.step((*pebble.Iterator).Last) }

func (i *pebbleIter) Next() bool {
	if !i.valid {
		return false
	}
	return i.step((*pebble.Iterator).Next)
}

func (i *pebbleIter) Prev() bool {
	if !i.valid {
		return false
	}
	return i.step((*pebble.Iterator).Prev)
}

func (i *pebbleIter) SeekGE(key []byte) bool {
	return i.step(func(it *pebble.Iterator) bool {
		if i.upper != nil && bytes.Compare(key, i.upper) >= 0 {
			return false
		}
		if bytes.Compare(key, i.lower) < 0 {
			key = i.lower
		}
		return it.SeekGE(key)
	})
}

func (i *pebbleIter) SeekLT(key []byte) bool {
	return i.step(func(it *pebble.Iterator) bool {
		if bytes.Compare(key, i.lower) <= 0 {
			return false
		}
		if i.upper != nil && bytes.Compare(key, i.upper) > 0 {
			key = i.upper
		}
		return it.SeekLT(key)
	})
}

// Close is idempotent and safe after the store's Close.
func (i *pebbleIter) Close() error {
	if i.closed {
		return nil
	}
	i.closed = true
	i.s.mu.RLock()
	defer i.s.mu.RUnlock()
	i.s.iters.Lock()
	delete(i.s.iters.m, i)
	i.s.iters.Unlock()
	i.destroy()
	return i.closeResult()
}

// Estimate returns the size of the store's tables plus its memtables;
// Pebble keeps no entry count estimate, so Entries is -1 (unknown).
func (s *pebbleStore) Estimate() (Estimate, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.mu.closed {
		return Estimate{}, fmt.Errorf("%w: estimate of %s", ErrClosed, s.dir)
	}
	m := s.db.Metrics()
	return Estimate{Bytes: m.Total().TablesSize + int64(m.MemTable.Size), Entries: -1}, nil
}
