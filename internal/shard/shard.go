package shard

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/kstate/kstate/changelog"
	"github.com/kstate/kstate/internal/changelogfmt"
	"github.com/kstate/kstate/internal/kv"
	"github.com/kstate/kstate/state"
)

// ShardOptions configure OpenShard. The zero value of every field but Dir works.
type ShardOptions struct {
	// Dir is the shard directory; created if missing and locked (flock on
	// Dir/LOCK.kstate) so two processes never open it. It may be empty only
	// when Backend is set (then nothing is locked).
	Dir string
	// Backend is the store; the shard owns it and closes it on Close.
	// Overriding the default of nil: RocksDB in Dir/rocksdb.
	Backend kv.Store
	// StoreBackend selects the store opened in Dir when Backend is nil,
	// overriding the default of "" (kv.DefaultBackend: RocksDB when it is
	// compiled in). The first open writes it to Dir/BACKEND.kstate; a later
	// open with another backend fails with state.ErrBackendMismatch.
	StoreBackend kv.Backend
	// Memory is the RocksDB memory budget shared with the process's other
	// shards, overriding the default of nil (the store's own 32 MiB block
	// cache and 32 MiB memtable on RocksDB). Unused when Backend is set.
	Memory *kv.SharedMemory
	// AllowTTL permits variables with a TTL. Set it only in ProcessingTime
	// mode, overriding the default of false (TTL declared → state.ErrTTLNotAllowed).
	AllowTTL bool
	// MaxVariableSetVersions bounds the versions of the set of declared
	// variables (registry.go, varSetChanged), overriding the default of 0
	// (state.DefaultMaxVariableSetVersions); negative: no bound.
	MaxVariableSetVersions int
	// Cache is the committed-state cache shared with the process's other
	// shards (see Cache), overriding the default of nil (no cache: every
	// point read goes to the store).
	Cache *Cache
	// WriteBehindBytes turns on write-behind local commits (writebehind.go):
	// Commit keeps committed batches in memory, one entry per key, and
	// writes them to the store in one write when they hold more than this
	// many bytes (or more than 256Ki changelog records), and on Close and
	// restore. Overriding the default of 0: write-through, every Commit
	// writes its batch to the store.
	WriteBehindBytes int64
	// WriteBehindBudget is shared with the process's other shards: it
	// lowers WriteBehindBytes when many shards are open (see
	// WriteBehindBudget), overriding the default of nil (no shared bound).
	WriteBehindBudget *WriteBehindBudget
	// MaxRecordBytes bounds a state write's changelog record as Kafka
	// counts it (recordsize.Of): a larger write is refused with
	// ErrValueTooLarge (see TakeOversize), overriding the default of 0:
	// no bound.
	MaxRecordBytes int
	// RebuildCorrupt: a store that cannot be opened because its files are
	// damaged (kv.IsCorrupt), or whose stored changelog offset is, is
	// deleted and opened empty, so that the changelog restores it in full
	// (see Shard.Rebuilt); overriding the default of false: OpenShard fails
	// with the error. The engine sets it (local state is a cache of the
	// changelog); readers of a shard (statereader) do not.
	RebuildCorrupt bool
	// Now is the wall clock of ChangelogSince (a batch's Begin, a
	// re-seed's end), overriding the default of time.Now.
	Now func() time.Time
}

// lockFile is the name of the flock'ed file inside a shard directory.
const lockFile = "LOCK.kstate"

// offsetKey holds the next changelog offset to read. It sorts after every
// changelogged key space (kinds 0x00..0x04) and is itself never changelogged.
const offsetKey = "\xffoffset"

// sinceKey holds, next to offsetKey and written with it, a time (Unix ms,
// 8 bytes) at or before which every changelog record at or after the
// stored offset was written: the Begin of the last batch committed into
// the store, the timestamp of the last record a restore applied, or the
// end of a re-seed. The changelog's compaction may remove a tombstone
// delete.retention.ms after it was written, so a restore from an offset
// whose time is older than that may miss deletions: the engine then
// restores in full (Shard.ChangelogSince). Local only; it sorts after
// offsetKey (and reseedKey). A store without it (written before it
// existed) is not checked until its next write.
const sinceKey = "\xffsince"

// everythingLower/Upper bound every changelogged key (all kinds, not the offset).
var (
	everythingLower = []byte{0x00}
	everythingUpper = []byte{0xff}
)

// Shard is one partition's state: a store plus the staging layer of the
// batch in progress. A shard is used by one goroutine (its task); only Stats
// may be called concurrently.
//
// Batch protocol: Begin → state operations (staged, reads see them) →
// Finish (TTL cleanup; returns the changelog records) → the engine commits
// them to Kafka → Commit (makes the staged changes and the next changelog
// offset committed in one atomic step: written to the store, or kept in the
// write-behind layer that is written later in one atomic write) or Abort
// (drops them). Local state therefore never runs ahead of the changelog.
type Shard struct {
	opts   ShardOptions
	store  kv.Store
	cache  *shardCache // nil: no committed-state cache
	lock   *os.File
	closed bool
	// rebuilt is why OpenShard deleted a damaged store (Rebuilt).
	rebuilt error
	// layoutCurrent: the store records the current changelog layout
	// (layout.go); layoutStaged: the batch in progress stages it.
	layoutCurrent, layoutStaged bool
	// offset is the next changelog offset after the last committed batch
	// (the offset the next batch continues from); stored is the one in the
	// store, the offset a restore after a crash starts from. They differ
	// while the write-behind layer holds committed batches.
	offset, stored int64
	// since and storedSince go with offset and stored: a time (Unix ms)
	// at or before which every changelog record at or after that offset
	// was written; 0 when unknown (sinceKey).
	since, storedSince int64
	// batchStart is the wall time (Unix ms) of the batch's Begin: a
	// committed batch's records, and every later one's, were written after
	// it.
	batchStart int64

	// wb is the write-behind layer of committed, unflushed batches (nil:
	// write-through). frozen is the full layer before it, which a
	// background goroutine is writing to the store (nil: none;
	// writebehind.go). Only the shard's goroutine changes them, under
	// wbMu; ReadCommitted and Estimate read them from other goroutines
	// under wbMu.
	wb     *wbLayer
	frozen *wbFlush
	wbMu   sync.Mutex
	// flushInBackground: a full layer is frozen and written in the
	// background (SetBackgroundFlush).
	flushInBackground bool

	// readers guards the store against Close while ReadCommitted reads it
	// from another goroutine; readClosed is set under it by Close.
	readers    sync.RWMutex
	readClosed bool

	stage *staging
	reads readState  // the batch's reused iterator and list tails (readiter.go)
	pre   prefetcher // the batch's prefetched reads (prefetch.go)
	// pending holds writes made by declarations (variable registry,
	// DeleteIfExists) and PutMeta outside a batch. They must reach the
	// changelog before any state written under the declared ids, and they
	// must survive an aborted batch, so they stay staged (and are replayed
	// into the staging layer after an Abort) until a Commit writes them.
	pending []pendingWrite

	inBatch   bool
	finished  bool
	batchErr  error // sticky misuse of the batch protocol, reported by Finish/Commit
	oversize  error // a write refused by checkRecordSize, not taken yet (recordlimit.go)
	batchTime int64
	batchSeq  uint64 // incremented by Begin: a Savepoint is valid in its batch only
	key       []byte
	hasKey    bool

	declaring  bool
	declared   map[string]bool // names declared in the current Init
	setCounted bool            // the current Init changed the set of variables (counted once)
	// declaredAny is set by the first declaration: from then on a restore
	// (ApplyChangelog, Wipe) could silently invalidate the variables' ids.
	declaredAny bool

	timerFloor, ttlFloor floor // see floor.go

	batchStats Stats // this batch, folded into total on Commit
	total      struct {
		rowsUpdated, rowsRemoved, ttlRemovals, timersRegistered, timersDeleted atomic.Int64
		batches, aborts, restored                                              atomic.Int64
		deletesSkipped                                                         atomic.Int64
	}
}

type pendingWrite struct{ key, val []byte }

// Stats are cumulative counters of committed batches (aborted work is not
// counted). Engines compute per-batch numbers as differences.
type Stats struct {
	RowsUpdated      int64 // state entries written (value, list element, map entry)
	RowsRemoved      int64 // state entries removed by Clear, RemoveKey, ListState.Put
	TTLRemovals      int64 // state entries removed because their TTL expired
	TimersRegistered int64
	TimersDeleted    int64 // timers deleted, including fired timers removed by the engine
	Batches          int64 // committed batches
	Aborts           int64 // aborted batches
	RestoredRecords  int64 // changelog records applied by ApplyChangelog
	// DeletesSkipped counts the deleted entries the store stepped over in
	// this shard's scans (kv.Iterator.DeletesSkipped), aborted batches
	// included: it measures read work, not committed changes. A steady
	// climb per scan means tombstones pile up inside scanned ranges.
	DeletesSkipped int64
}

// OpenShard opens (creating if needed) the shard described by o.
func OpenShard(o ShardOptions) (*Shard, error) {
	s := &Shard{opts: o, stage: newStaging(), batchTime: -1, cache: o.Cache.forShard(),
		timerFloor: newFloor(changelog.KindTimer), ttlFloor: newFloor(changelog.KindTTL)}
	if o.Dir == "" && o.Backend == nil {
		return nil, errors.New("state: OpenShard: ShardOptions needs a Dir or a Backend")
	}
	if o.Dir != "" {
		if err := os.MkdirAll(o.Dir, 0o755); err != nil {
			return nil, fmt.Errorf("state: create shard directory: %w", err)
		}
		f, err := os.OpenFile(filepath.Join(o.Dir, lockFile), os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return nil, fmt.Errorf("state: open shard lock: %w", err)
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			f.Close()
			if errors.Is(err, syscall.EWOULDBLOCK) {
				return nil, fmt.Errorf("%w: %s is held by another process (or another open shard in this one): give every instance its own StateDir, or stop the other one", state.ErrLocked, o.Dir)
			}
			return nil, fmt.Errorf("state: lock shard directory %s: %w", o.Dir, err)
		}
		s.lock = f
	}
	if err := s.openStore(); err != nil {
		if !o.RebuildCorrupt || o.Backend != nil || !(kv.IsCorrupt(err) || errors.Is(err, state.ErrCorrupt)) {
			s.unlock()
			return nil, err
		}
		// Damaged files: local state is a cache of the changelog. The
		// store is deleted (under the shard's lock) and opened empty; the
		// restore that follows reads the whole changelog.
		be, berr := chooseBackend(o.Dir, o.StoreBackend)
		if berr == nil {
			berr = os.RemoveAll(filepath.Join(o.Dir, be.Subdir()))
		}
		if berr == nil {
			berr = s.openStore()
		}
		if berr != nil {
			s.unlock()
			return nil, fmt.Errorf("%w (and rebuilding it failed: %w)", err, berr)
		}
		s.rebuilt = err
	}
	if o.WriteBehindBytes > 0 {
		s.wb = newWBLayer()
		o.WriteBehindBudget.join()
	}
	return s, nil
}

// openStore opens the shard's store (unless ShardOptions.Backend gave it)
// and reads its changelog offset; on error nothing is left open but the
// lock.
func (s *Shard) openStore() error {
	o := s.opts
	s.store = o.Backend
	if s.store == nil {
		be, err := chooseBackend(o.Dir, o.StoreBackend)
		if err != nil {
			return err
		}
		st, err := kv.OpenBackend(be, filepath.Join(o.Dir, be.Subdir()), o.Memory, false)
		if err != nil {
			return fmt.Errorf("state: open store in %s: %w", o.Dir, err)
		}
		s.store = st
	}
	v, ok, err := s.store.Get([]byte(offsetKey))
	if err == nil && ok {
		if len(v) != 8 {
			err = fmt.Errorf("%w: changelog offset of %d bytes", state.ErrCorrupt, len(v))
		} else {
			s.offset = int64(binary.BigEndian.Uint64(v))
			s.stored = s.offset
		}
	}
	if err == nil {
		v, ok, err = s.store.Get([]byte(sinceKey))
		if err == nil && ok && len(v) == 8 {
			s.since = int64(binary.BigEndian.Uint64(v))
			s.storedSince = s.since
		}
	}
	if err != nil {
		s.store.Close()
		s.store = nil
		return fmt.Errorf("state: shard %s: read the changelog offset: %w", o.Dir, err)
	}
	if err := s.readLayout(); err != nil {
		s.store.Close()
		s.store = nil
		return err
	}
	return nil
}

// Rebuilt returns why OpenShard deleted the store it found and opened it
// empty (ShardOptions.RebuildCorrupt), or nil when it did not.
func (s *Shard) Rebuilt() error { return s.rebuilt }

// backendFile names the file in a shard directory that records the store
// backend the shard was created with.
const backendFile = "BACKEND.kstate"

// chooseBackend returns the backend to open in dir (want, or the default),
// after checking it against the one the directory was created with: the
// marker file, or for shards older than the marker, the store subdirectory
// present. A new shard gets the marker, written (and synced) before its store.
func chooseBackend(dir string, want kv.Backend) (kv.Backend, error) {
	if want == "" {
		want = kv.DefaultBackend()
	}
	if err := want.Check(); err != nil {
		return "", fmt.Errorf("state: open store in %s: %w", dir, err)
	}
	var have kv.Backend
	marker := filepath.Join(dir, backendFile)
	if b, err := os.ReadFile(marker); err == nil {
		have = kv.Backend(bytes.TrimSpace(b))
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("state: read %s: %w", marker, err)
	} else {
		for _, b := range []kv.Backend{kv.BackendRocksDB, kv.BackendPebble} {
			if _, err := os.Stat(filepath.Join(dir, b.Subdir())); err == nil {
				have = b
				break
			}
		}
	}
	if have != "" && have != want {
		return "", fmt.Errorf("%w: %s was created with the %q store backend, but %q is configured: set Options.State.Backend back to %q, "+
			"or delete the directory to rebuild the state from the changelog with %q", state.ErrBackendMismatch, dir, have, want, have, want)
	}
	if have == "" || !fileExists(marker) {
		if err := writeSynced(marker, []byte(string(want)+"\n")); err != nil {
			return "", fmt.Errorf("state: write %s: %w", marker, err)
		}
	}
	return want, nil
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// writeSynced writes p atomically (temporary file, fsync, rename, fsync of
// the directory).
func writeSynced(p string, data []byte) error {
	tmp := p + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, p)
	}
	if err != nil {
		return err
	}
	d, err := os.Open(filepath.Dir(p))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

func (s *Shard) unlock() {
	if s.lock != nil {
		// Closing the descriptor releases the flock.
		s.lock.Close()
		s.lock = nil
	}
}

// Close closes the store and releases the directory lock. Staged changes of
// a batch in progress are dropped. Close is idempotent.
func (s *Shard) Close() error {
	if s.closed {
		return nil
	}
	s.closed = true
	s.inBatch = false
	s.resetReads()
	s.stage = newStaging()
	s.pending = nil
	s.cache.clear()
	// The committed batches still in memory go to the store (on error they
	// are lost locally, as after a crash: a restart restores them).
	ferr := s.flush()
	s.readers.Lock()
	s.readClosed = true
	s.readers.Unlock()
	if s.wb != nil {
		s.opts.WriteBehindBudget.leave()
		// No reader is left (ReadCommitted holds readers), and the
		// shard's goroutine is here: the layer's memory can go.
		s.wbMu.Lock()
		s.wb.release()
		if s.frozen != nil {
			// Its write failed (ferr): lost locally, as after a crash.
			if s.frozen.done != nil {
				<-s.frozen.done
			}
			s.frozen.layer.release()
			s.frozen = nil
		}
		s.wbMu.Unlock()
	}
	err := s.store.Close()
	s.unlock()
	if ferr != nil {
		return fmt.Errorf("state: close store in %s: write the committed batches kept in memory (Kafka has them: a restart restores them from the changelog): %w", s.opts.Dir, ferr)
	}
	if err != nil {
		return fmt.Errorf("state: close store in %s: %w", s.opts.Dir, err)
	}
	return nil
}

// ChangelogOffset is the next changelog offset after the last committed
// batch (0 for a new shard): the offset the next batch's records follow.
// With write-behind the store may hold an older one until the next flush
// (see writebehind.go); after a reopen both are the stored one, which is
// where a restore starts.
func (s *Shard) ChangelogOffset() int64 { return s.offset }

// Estimate returns the store's estimated size (kv.Store.Estimate); safe
// to call concurrently with the shard's goroutine, like Stats.
func (s *Shard) Estimate() (kv.Estimate, error) {
	if s.wb == nil {
		return s.store.Estimate()
	}
	// The store and the write-behind layer under wbMu, as a flush writes
	// the layer to the store and empties it under wbMu: read apart, a
	// flush in between moved the layer's entries into the store after
	// the store was read, and the estimate missed them all (0 after the
	// first flush).
	s.wbMu.Lock()
	defer s.wbMu.Unlock()
	e, err := s.store.Estimate()
	if err != nil {
		return e, err
	}
	// Entries committed but still in the write-behind layer: some may be
	// in the store too (counted twice), as estimates go.
	for _, w := range []*wbLayer{s.wb, s.frozenLayer()} {
		if w == nil {
			continue
		}
		if e.Entries >= 0 {
			e.Entries += int64(len(w.items))
		}
		e.Bytes += w.used
	}
	return e, nil
}

// Flush writes the committed batches kept in memory (write-behind) to the
// store now, with their changelog offset, so that a reader of the store
// (a state reader on the state directory, an estimate) sees them. The
// engine calls it when a poll brought nothing (idle). Not during a batch;
// a no-op with write-through or nothing kept.
func (s *Shard) Flush() error {
	switch {
	case s.closed:
		return shardErr("Flush", state.ErrClosed)
	case s.inBatch:
		return shardErr("Flush", ErrInBatch)
	}
	return shardErr("Flush", s.flush())
}

func (s *Shard) checkRestore(op string) error {
	switch {
	case s.closed:
		return shardErr(op, state.ErrClosed)
	case s.inBatch:
		return shardErr(op, ErrInBatch)
	case s.declaredAny:
		// Staged metadata (PutMeta) is fine: it stays staged over the
		// restored store and is newer than anything in the changelog. A
		// declaration is not: its id was allocated from the unrestored state.
		return shardErr(op, ErrRestoreAfterDeclare)
	}
	return nil
}

// ApplyChangelog writes changelog records (in offset order), the local
// index entries they imply (derived.go) and the next offset to read in one
// atomic write without the WAL (the changelog is the log). Applying the
// same records again yields the same store. It must run
// before any state variable is declared.
func (s *Shard) ApplyChangelog(recs []changelog.Record, nextOffset int64) error {
	if err := s.checkRestore("ApplyChangelog"); err != nil {
		return err
	}
	if err := s.flush(); err != nil {
		return shardErr("ApplyChangelog", err)
	}
	layoutCurrent, err := s.checkRecordsLayout(recs)
	if err != nil {
		return shardErr("ApplyChangelog", err)
	}
	s.cache.clear() // the records overwrite the store under the cache
	s.resetReads()
	var b kv.Batch
	var arena []byte
	for _, r := range recs {
		if len(r.Key) == 0 || r.Key[0] == offsetKey[0] {
			return shardErr("ApplyChangelog", fmt.Errorf("%w: changelog record at offset %d has key %x outside the shard key spaces", state.ErrCorrupt, r.Offset, r.Key))
		}
		applyRecord(&b, &arena, r.Key, r.Value)
	}
	b.Put([]byte(offsetKey), binary.BigEndian.AppendUint64(nil, uint64(nextOffset)))
	// Records after nextOffset were written after the last one here; with
	// no timestamp, after the time kept (they follow its offset too).
	since := s.since
	if n := len(recs); n > 0 && recs[n-1].TimestampMs > 0 {
		since = recs[n-1].TimestampMs
	}
	putSince(&b, since)
	if err := s.store.Write(&b, kv.WriteOptions{DisableWAL: true}); err != nil {
		return shardErr("ApplyChangelog", err)
	}
	s.offset, s.stored = nextOffset, nextOffset
	s.since, s.storedSince = since, since
	s.layoutCurrent = layoutCurrent
	s.timerFloor, s.ttlFloor = newFloor(changelog.KindTimer), newFloor(changelog.KindTTL)
	s.total.restored.Add(int64(len(recs)))
	return nil
}

// Wipe deletes everything in the shard, the changelog offset included (for
// a changelog that was recreated or truncated). It must run before any
// state variable is declared.
func (s *Shard) Wipe() error {
	if err := s.checkRestore("Wipe"); err != nil {
		return err
	}
	if err := s.flush(); err != nil {
		return shardErr("Wipe", err)
	}
	s.cache.clear()
	s.resetReads()
	var b kv.Batch
	b.DeleteRange(everythingLower, everythingUpper)
	b.Delete([]byte(offsetKey))
	b.Delete([]byte(sinceKey))
	if err := s.store.Write(&b, kv.WriteOptions{}); err != nil {
		return shardErr("Wipe", err)
	}
	s.offset, s.stored = 0, 0
	s.since, s.storedSince = 0, 0
	s.layoutCurrent = false
	s.timerFloor, s.ttlFloor = newFloor(changelog.KindTimer), newFloor(changelog.KindTTL)
	return nil
}

// GetMeta returns a metadata entry (staged writes included).
func (s *Shard) GetMeta(name string) ([]byte, bool, error) {
	if s.closed {
		return nil, false, shardErr("GetMeta", state.ErrClosed)
	}
	v, ok, err := s.get(changelogfmt.MetaKey(name))
	if err != nil || !ok {
		return nil, false, shardErr("GetMeta", err)
	}
	return cloneBytes(v), true, nil
}

// PutMeta stages a metadata entry. Inside a batch it is part of the batch;
// outside a batch it is kept until the next Commit, surviving Aborts.
func (s *Shard) PutMeta(name string, v []byte) error {
	if s.closed {
		return shardErr("PutMeta", state.ErrClosed)
	}
	if len(v) == 0 {
		return shardErr("PutMeta", ErrEmptyValue)
	}
	if s.inBatch && s.finished {
		return shardErr("PutMeta", ErrFinished)
	}
	s.stageWrite(changelogfmt.MetaKey(name), v, !s.inBatch)
	return nil
}

// stageWrite stages key=val (val nil: tombstone); durable writes are also
// kept in pending so that an Abort does not lose them.
func (s *Shard) stageWrite(key, val []byte, durable bool) {
	s.set(key, val)
	if durable {
		s.pending = append(s.pending, pendingWrite{key: cloneBytes(key), val: cloneBytes(val)})
	}
}

// Begin starts a batch. batchTimeMs is the batch's processing time used for
// TTL (-1 if none). Staged writes made outside a batch become part of it.
func (s *Shard) Begin(batchTimeMs int64) {
	if s.inBatch && s.batchErr == nil {
		s.batchErr = shardErr("Begin", ErrInBatch)
	}
	s.inBatch, s.finished = true, false
	s.batchSeq++
	s.resetReads()
	s.batchTime = batchTimeMs
	s.batchStart = s.now().UnixMilli()
	s.hasKey, s.key = false, s.key[:0]
	s.batchStats = Stats{}
	s.stageLayout()
}

// SetCurrentKey sets the grouping key state variables operate on (copied).
func (s *Shard) SetCurrentKey(groupKey []byte) {
	s.key = append(s.key[:0], groupKey...)
	s.hasKey = true
}

// BatchTime is the processing time given to Begin (-1 when none).
func (s *Shard) BatchTime() int64 { return s.batchTime }

// InBatch reports whether a batch is in progress.
func (s *Shard) InBatch() bool { return s.inBatch }

// Finish runs TTL cleanup and returns every staged change as a changelog
// record (nil Value for a tombstone), sorted by key, but for the entries
// of local indexes, which a restore derives (derived.go); keys and values are
// the staging layer's own slices, which are never modified (callers must
// not modify them either). After Finish the batch takes no more mutations.
// Calling it again returns the same records.
func (s *Shard) Finish() ([]changelog.Record, error) {
	switch {
	case s.closed:
		return nil, shardErr("Finish", state.ErrClosed)
	case !s.inBatch:
		return nil, shardErr("Finish", state.ErrNoBatch)
	case s.batchErr != nil:
		return nil, s.batchErr
	case s.oversize != nil:
		return nil, s.oversize
	}
	if !s.finished {
		if err := s.expireTTL(); err != nil {
			return nil, shardErr("Finish", err)
		}
		s.finished = true
	}
	recs := make([]changelog.Record, 0, s.stage.len())
	for _, e := range s.stage.ordered() {
		if changelogged(e.key) {
			recs = append(recs, changelog.Record{Key: e.key, Value: e.val})
		}
	}
	return recs, nil
}

// Commit atomically commits the staged changes and nextChangelogOffset
// (the offset after the batch's last changelog record) — to the store, or
// with write-behind to the unflushed layer (writing the layer to the store
// when it is over its bound) — and ends the batch. On error nothing was
// committed and the batch stays open: Abort it.
func (s *Shard) Commit(nextChangelogOffset int64) error {
	switch {
	case s.closed:
		return shardErr("Commit", state.ErrClosed)
	case !s.inBatch:
		return shardErr("Commit", state.ErrNoBatch)
	case s.batchErr != nil:
		return s.batchErr
	case !s.finished:
		return shardErr("Commit", ErrNotFinished)
	}
	timerFloor, err := s.nextFloor(&s.timerFloor)
	if err != nil {
		return shardErr("Commit", err)
	}
	ttlFloor, err := s.nextFloor(&s.ttlFloor)
	if err != nil {
		return shardErr("Commit", err)
	}
	s.resetReads() // the write below changes the store under the batch's iterator
	if err := s.commitStore(nextChangelogOffset); err != nil {
		return shardErr("Commit", err)
	}
	s.timerFloor.committed, s.ttlFloor.committed = timerFloor, ttlFloor
	if s.layoutStaged {
		s.layoutCurrent = true
	}
	if s.cache != nil {
		s.cache.commit(s.stage) // after the write: the cache holds committed values only
	}
	s.stage.reset()
	s.pending = nil
	st := &s.batchStats
	s.total.rowsUpdated.Add(st.RowsUpdated)
	s.total.rowsRemoved.Add(st.RowsRemoved)
	s.total.ttlRemovals.Add(st.TTLRemovals)
	s.total.timersRegistered.Add(st.TimersRegistered)
	s.total.timersDeleted.Add(st.TimersDeleted)
	s.total.batches.Add(1)
	s.endBatch()
	return nil
}

// Abort drops the batch's staged changes and ends the batch. Declarations
// and PutMeta made outside the batch stay staged for the next one.
func (s *Shard) Abort() {
	if !s.inBatch {
		return
	}
	s.resetReads()
	s.stage.reset()
	for _, w := range s.pending {
		s.stage.set(w.key, w.val)
	}
	s.endBatch()
	s.total.aborts.Add(1)
}

func (s *Shard) endBatch() {
	s.inBatch, s.finished, s.batchErr, s.oversize = false, false, nil, nil
	s.layoutStaged = false
	s.hasKey, s.key = false, s.key[:0]
	s.batchTime = -1
	s.batchStats = Stats{}
	s.timerFloor.resetBatch()
	s.ttlFloor.resetBatch()
}

// Stats returns the cumulative counters. Safe for concurrent use.
func (s *Shard) Stats() Stats {
	t := &s.total
	return Stats{
		RowsUpdated:      t.rowsUpdated.Load(),
		RowsRemoved:      t.rowsRemoved.Load(),
		TTLRemovals:      t.ttlRemovals.Load(),
		TimersRegistered: t.timersRegistered.Load(),
		TimersDeleted:    t.timersDeleted.Load(),
		Batches:          t.batches.Load(),
		Aborts:           t.aborts.Load(),
		RestoredRecords:  t.restored.Load(),
		DeletesSkipped:   t.deletesSkipped.Load(),
	}
}

// Low-level staged access (used by timers).

func checkRawKey(key []byte) error {
	if len(key) == 0 || key[0] >= everythingUpper[0] {
		return fmt.Errorf("state: key %x is outside the shard key spaces", key)
	}
	return nil
}

// Get returns a copy of the current value of key, staged writes included.
func (s *Shard) Get(key []byte) ([]byte, bool, error) {
	if s.closed {
		return nil, false, shardErr("Get", state.ErrClosed)
	}
	v, ok, err := s.get(key)
	if err != nil || !ok {
		return nil, false, shardErr("Get", err)
	}
	return cloneBytes(v), true, nil
}

func (s *Shard) checkWrite(op string) error {
	switch {
	case s.closed:
		return shardErr(op, state.ErrClosed)
	case !s.inBatch:
		return shardErr(op, state.ErrNoBatch)
	case s.finished:
		return shardErr(op, ErrFinished)
	}
	return nil
}

// Put stages key=value in the current batch (both copied). The key must be
// in one of the changelog key spaces; the value must not be empty.
func (s *Shard) Put(key, value []byte) error {
	if err := s.checkWrite("Put"); err != nil {
		return err
	}
	if err := checkRawKey(key); err != nil {
		return shardErr("Put", err)
	}
	if len(value) == 0 {
		return shardErr("Put", ErrEmptyValue)
	}
	s.set(key, value)
	switch changelog.Kind(key[0]) {
	case changelog.KindState:
		s.batchStats.RowsUpdated++
	case changelog.KindTimer:
		s.batchStats.TimersRegistered++
	}
	return nil
}

// Delete stages a tombstone for key in the current batch.
func (s *Shard) Delete(key []byte) error {
	if err := s.checkWrite("Delete"); err != nil {
		return err
	}
	if err := checkRawKey(key); err != nil {
		return shardErr("Delete", err)
	}
	s.set(key, nil)
	switch changelog.Kind(key[0]) {
	case changelog.KindState:
		s.batchStats.RowsRemoved++
	case changelog.KindTimer:
		s.batchStats.TimersDeleted++
	}
	return nil
}

// Scan calls fn for every key in [lower, upper) of the merged view (staged
// writes over the store), ascending, until fn returns false. A nil bound is
// open. key and value are only valid during fn, which must not modify the
// shard (collect keys, then change them).
func (s *Shard) Scan(lower, upper []byte, fn func(key, value []byte) bool) error {
	if s.closed {
		return shardErr("Scan", state.ErrClosed)
	}
	if upper == nil || bytes.Compare(upper, everythingUpper) > 0 {
		upper = everythingUpper // never show the local offset key
	}
	return shardErr("Scan", s.scan(lower, upper, fn))
}

// ChangelogSince returns a time (Unix ms) at or before which every
// changelog record at or after ChangelogOffset was written, 0 when
// unknown (a new shard, or a store written before this was recorded): the
// Begin of the last committed batch, or the timestamp of the last record
// a restore applied. Compaction can remove a changelog tombstone once it
// is delete.retention.ms old, so the engine restores a shard whose time is
// older than that in full instead of resuming from its offset.
func (s *Shard) ChangelogSince() int64 { return s.since }

// putSince adds the sinceKey entry of ms to b (nothing when unknown).
func putSince(b *kv.Batch, ms int64) {
	if ms > 0 {
		b.Put([]byte(sinceKey), binary.BigEndian.AppendUint64(nil, uint64(ms)))
	}
}

// RaiseChangelogSince makes ms the shard's ChangelogSince if it is later:
// a restore read the changelog up to the end captured when its reader
// opened, so every record after the shard's offset was written after that
// opening, or in a transaction open then (at most a transaction timeout
// earlier). Without it, a shard restored from an idle changelog kept the
// time of that changelog's last record and would restore in full at every
// start once that is old. Between batches only; the store's offset is made
// the shard's first (the write-behind layer is written).
func (s *Shard) RaiseChangelogSince(ms int64) error {
	if s.closed {
		return shardErr("RaiseChangelogSince", state.ErrClosed)
	}
	if s.inBatch {
		return shardErr("RaiseChangelogSince", ErrInBatch)
	}
	if ms <= s.since {
		return nil
	}
	if err := s.flush(); err != nil {
		return shardErr("RaiseChangelogSince", err)
	}
	var b kv.Batch
	putSince(&b, ms)
	if err := s.store.Write(&b, kv.WriteOptions{DisableWAL: true}); err != nil {
		return shardErr("RaiseChangelogSince", err)
	}
	s.since, s.storedSince = ms, ms
	return nil
}

// now is ShardOptions.Now, time.Now when unset.
func (s *Shard) now() time.Time {
	if s.opts.Now == nil {
		return time.Now()
	}
	return s.opts.Now()
}
