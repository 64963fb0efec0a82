package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kstate/kstate/internal/shard"
	"github.com/kstate/kstate/state"
)

// ShardPositions is the process's view of its local shards, shared by the
// coordinators of its pipelines (CoordinatorConfig.Positions):
//
//   - the position of each local shard (the next changelog offset it would
//     read): what the group's balancer is told this process holds
//     (Snapshot, read by the Kafka session for its join metadata). It is
//     fed by the active tasks after every commit and restore, by the
//     standby readers after every chunk they apply, and at start by the
//     shards found under Dir (their position hint files);
//   - who uses each shard in this process: an active task (of any
//     pipeline) or one pipeline's standby reader. A standby never opens a
//     shard that is active in the process, and gives its shard up at once
//     when a pipeline's task needs it (acquireActive), so a partition moving
//     from a standby to active in this process waits for nothing but the
//     standby's current chunk;
//   - the cleanup: a shard that is neither active nor standby for
//     CleanupDelay is deleted (never one in use here, never one locked by
//     another process: shard.RemoveShardDir takes its lock first).
//
// The positions are hints for the balancer only. A stale, lower value is
// safe (the shard is caught up further than the balancer thinks); a higher
// one is possible after a crash (a hint written from a shard whose newest
// writes were not durable yet: RocksDB's restore writes skip the WAL, and
// write-behind keeps committed batches in memory): the balancer then
// rates the copy too well, and the restore at assignment replays the
// difference. Never is a hint used for correctness: the restore always
// starts from the offset stored in the shard itself.
type ShardPositions struct {
	cfg ShardPositionsConfig
	log *slog.Logger

	mu      sync.Mutex
	shards  map[int32]*localShard
	workers map[*standbys]bool // the standby readers to wake when a shard is freed
	// The cleanup goroutine: run while users > 0 (the coordinators'
	// Runs); poked when a shard becomes idle.
	users       int
	stopCleanup context.CancelFunc
	cleanupDone chan struct{}
	poked       bool
	sleepCancel context.CancelFunc

	// backlogUntil (a Clock.Elapsed in ns) is until when an active
	// pipeline of the process last had a backlog (standby.go).
	backlogUntil atomic.Int64
}

// ShardPositionsConfig configures NewShardPositions.
type ShardPositionsConfig struct {
	// Dir is the application's state directory, <StateDir>/<ApplicationID>,
	// whose shard directories are read at start and cleaned up. Optional:
	// "" for shards with no directory (a test's in-memory stores).
	Dir string
	// CleanupDelay is how long a local shard neither active nor standby
	// is kept before it is deleted. Optional: 0 never deletes.
	CleanupDelay time.Duration
	// Clock times the hints and the cleanup.
	Clock Clock
	// Remove deletes partition p's local shard. Optional: the directory
	// Dir/p under its lock (shard.RemoveShardDir); a test with in-memory
	// stores sets it.
	Remove func(p int32) error
	// Logger: nil discards.
	Logger *slog.Logger
}

// localShard is one partition's local shard as the process sees it.
type localShard struct {
	pos   int64
	known bool   // pos is set
	dir   string // "" none
	// active counts the pipelines whose task holds (or is about to open)
	// the shard; it may be 2 for a moment while a partition moves between
	// two pipelines (the shard's lock orders them, handover.go).
	active int
	// standby is the standby reader holding the shard; released is
	// closed when it gives the shard up.
	standby  *standbys
	released chan struct{}
	// handed is the standby's task a reader handed over open for the
	// active task that made it give the shard up (handOver), until that
	// task takes it (takeHanded); handedBy is the reader's coordinator.
	handed   TaskHandle
	handedBy *Coordinator
	// idleSince is when the shard stopped being used (Clock.Elapsed).
	idleSince time.Duration
	// deleting is non-nil (closed when done) while the cleanup deletes it.
	deleting chan struct{}
	// The last hint written.
	hintAt  time.Duration
	hintPos int64
	hinted  bool
}

func (ls *localShard) idle() bool { return ls.active == 0 && ls.standby == nil && ls.deleting == nil }

// hintEvery bounds how often a shard's position hint file is rewritten
// while the shard is in use (it is also written when the shard is closed).
const hintEvery = 5 * time.Second

// NewShardPositions returns the process's ShardPositions, with the
// shards found under cfg.Dir (and the position each one's hint file
// holds; a shard without one is listed with no position).
func NewShardPositions(cfg ShardPositionsConfig) (*ShardPositions, error) {
	if cfg.Clock == nil {
		return nil, errors.New("engine: ShardPositionsConfig needs a Clock")
	}
	if cfg.CleanupDelay < 0 {
		return nil, fmt.Errorf("engine: ShardPositionsConfig.CleanupDelay %v is negative", cfg.CleanupDelay)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &ShardPositions{cfg: cfg, log: log, shards: map[int32]*localShard{}, workers: map[*standbys]bool{}}
	if cfg.Dir == "" {
		return s, nil
	}
	if err := shard.RemoveLeftovers(cfg.Dir); err != nil {
		s.log.Warn("could not delete a shard directory whose removal was interrupted", "err", err)
	}
	parts, err := shard.LocalShards(cfg.Dir)
	if err != nil {
		return nil, err
	}
	now := cfg.Clock.Elapsed()
	for _, p := range parts {
		dir := s.dir(p)
		ls := &localShard{dir: dir, idleSince: now}
		if pos, ok := shard.ReadPositionHint(dir); ok {
			ls.pos, ls.known = pos, true
			ls.hintPos, ls.hinted, ls.hintAt = pos, true, now
		}
		s.shards[p] = ls
	}
	return s, nil
}

// dir is partition p's shard directory, "" without Dir.
func (s *ShardPositions) dir(p int32) string {
	if s.cfg.Dir == "" {
		return ""
	}
	return filepath.Join(s.cfg.Dir, strconv.Itoa(int(p)))
}

// Snapshot returns the position of every local shard whose position is
// known: partition → the next changelog offset the shard would read.
// Safe to call at any time, from any goroutine.
func (s *ShardPositions) Snapshot() map[int32]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[int32]int64, len(s.shards))
	for p, ls := range s.shards {
		if ls.known {
			out[p] = ls.pos
		}
	}
	return out
}

// Seed records a local shard found outside Dir (a test driver's in-memory
// store) at position pos, idle from now.
func (s *ShardPositions) Seed(p int32, pos int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ls := s.get(p)
	ls.pos, ls.known = pos, true
	s.poke()
}

// get returns p's entry, creating it (idle since now). Under mu.
func (s *ShardPositions) get(p int32) *localShard {
	ls := s.shards[p]
	if ls == nil {
		ls = &localShard{dir: s.dir(p), idleSince: s.cfg.Clock.Elapsed()}
		s.shards[p] = ls
	}
	return ls
}

// set records p's position; the hint file is rewritten when the last
// write is older than hintEvery, or at once with now.
func (s *ShardPositions) set(p int32, pos int64, now bool) {
	if s == nil {
		return
	}
	t := s.cfg.Clock.Elapsed()
	s.mu.Lock()
	ls := s.get(p)
	ls.pos, ls.known = pos, true
	write := ls.dir != "" && (!ls.hinted || ls.hintPos != pos) && (now || !ls.hinted || t-ls.hintAt >= hintEvery)
	if write {
		ls.hintAt, ls.hintPos, ls.hinted = t, pos, true
	}
	dir := ls.dir
	s.mu.Unlock()
	if write {
		if err := shard.WritePositionHint(dir, pos); err != nil {
			s.log.Warn("could not write a shard's position hint (only the group's balancer reads it)", "partition", p, "err", err)
		}
	}
}

// acquireActive takes p for an active task of this process: it makes a
// standby reader of any pipeline give the shard up and waits for it, and
// waits for a cleanup deleting it. Every acquireActive is matched by a
// releaseActive (also when it fails).
func (s *ShardPositions) acquireActive(ctx context.Context, p int32) error {
	s.reserveActive(p)
	return s.awaitActive(ctx, p)
}

// reserveActive is acquireActive's first half, which does not wait: from
// now on no standby takes p and no cleanup starts, and a standby reader
// holding it hands it over (handOver) rather than closing it when its
// standby set drops it. The coordinator reserves a partition as it is
// assigned, before the standby set of the same poll can drop it.
func (s *ShardPositions) reserveActive(p int32) {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.get(p).active++
	s.mu.Unlock()
}

// awaitActive is acquireActive's second half, after reserveActive: it
// waits until no standby reader holds p and no cleanup deletes it.
func (s *ShardPositions) awaitActive(ctx context.Context, p int32) error {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	ls := s.get(p)
	for {
		var wait chan struct{}
		var w *standbys
		switch {
		case ls.deleting != nil:
			wait = ls.deleting
		case ls.standby != nil:
			wait, w = ls.released, ls.standby
		}
		s.mu.Unlock()
		if wait == nil {
			return nil
		}
		if w != nil {
			w.wakeFor(p) // it releases p (wantedActive) at once
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return ctx.Err()
		}
		s.mu.Lock()
	}
}

// releaseActive ends an acquireActive; pos >= 0 is the shard's position
// as its task closed it (its hint is written now).
func (s *ShardPositions) releaseActive(p int32, pos int64) {
	if s == nil {
		return
	}
	if pos >= 0 {
		s.set(p, pos, true)
	}
	s.mu.Lock()
	ls := s.get(p)
	if ls.active--; ls.active < 0 {
		ls.active = 0
	}
	var unclaimed TaskHandle // handed over, and no active task left to take it
	if ls.active == 0 && ls.handed != nil {
		unclaimed, ls.handed, ls.handedBy = ls.handed, nil, nil
	}
	s.mu.Unlock()
	if unclaimed != nil {
		s.closeHanded(p, unclaimed)
	}
	s.mu.Lock()
	idle := ls.idle()
	if idle {
		ls.idleSince = s.cfg.Clock.Elapsed()
		s.poke()
	}
	s.mu.Unlock()
	if idle {
		s.wakeWorkers() // a standby may take it now
	}
}

// wakeWorkers wakes the standby readers, not under mu (a reader takes its
// own lock, then mu).
func (s *ShardPositions) wakeWorkers() {
	s.mu.Lock()
	ws := make([]*standbys, 0, len(s.workers))
	for w := range s.workers {
		ws = append(ws, w)
	}
	s.mu.Unlock()
	for _, w := range ws {
		w.wake()
	}
}

// wantedActive reports whether an active task of the process holds p or
// waits for it.
func (s *ShardPositions) wantedActive(p int32) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	ls := s.shards[p]
	return ls != nil && ls.active > 0
}

// tryStandby takes p for w's standby reader, unless it is in use in this
// process or being deleted.
func (s *ShardPositions) tryStandby(p int32, w *standbys) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	ls := s.get(p)
	if !ls.idle() {
		return false
	}
	ls.standby, ls.released = w, make(chan struct{})
	return true
}

// handOver ends w's tryStandby of p for an active task of the process
// waiting for the shard (acquireActive), leaving t, the standby's task
// with its shard open (its reader closed), to that task: takeHanded. The
// new owner then restores the changelog's tail from where the standby
// left off without closing and reopening the shard, which at a large
// state costs seconds (the store flushes its memtables, which the
// standby's writes without a write-ahead log keep only there, and opens
// its files again). False, and nothing done: no active task waits (the
// caller closes t).
func (s *ShardPositions) handOver(p int32, w *standbys, t TaskHandle, pos int64) bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	ls := s.get(p)
	if ls.standby != w || ls.active == 0 || ls.handed != nil {
		s.mu.Unlock()
		return false
	}
	ls.handed, ls.handedBy = t, w.c
	ls.pos, ls.known = pos, true
	ls.standby = nil
	close(ls.released)
	ls.released = nil
	s.mu.Unlock()
	return true
}

// takeHanded returns the task a standby reader handed over open for p
// (handOver), for c's active task, which acquired p: nil when none was.
// A task handed over by another coordinator's reader (a sibling
// pipeline's: its task is built for that pipeline) is closed here, and
// nil returned: c opens the shard itself.
func (s *ShardPositions) takeHanded(p int32, c *Coordinator) TaskHandle {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	ls := s.get(p)
	t, by := ls.handed, ls.handedBy
	ls.handed, ls.handedBy = nil, nil
	s.mu.Unlock()
	if t != nil && by != c {
		s.closeHanded(p, t)
		return nil
	}
	return t
}

// closeHanded closes a handed-over task no active task of its coordinator
// took (not under mu: closing a shard takes time).
func (s *ShardPositions) closeHanded(p int32, t TaskHandle) {
	off := t.Shard().ChangelogOffset()
	if err := t.Close(); err != nil {
		s.log.Warn("standby partition: closing the shard it handed over failed", "partition", p, "err", err)
	}
	s.set(p, off, true)
}

// releaseStandby ends w's tryStandby of p; pos >= 0 is the shard's
// position as it was closed.
func (s *ShardPositions) releaseStandby(p int32, w *standbys, pos int64) {
	if pos >= 0 {
		s.set(p, pos, true)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ls := s.get(p)
	if ls.standby != w {
		return
	}
	ls.standby = nil
	close(ls.released)
	ls.released = nil
	if ls.idle() {
		ls.idleSince = s.cfg.Clock.Elapsed()
		s.poke()
	}
}

// register makes w one of the standby readers woken when a shard is freed.
func (s *ShardPositions) register(w *standbys, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if on {
		s.workers[w] = true
	} else {
		delete(s.workers, w)
	}
}

// A nil *ShardPositions (a Coordinator built without NewCoordinator, in
// unit tests) tracks nothing.

// cleanupOn reports whether the cleanup has anything to do.
func (s *ShardPositions) cleanupOn() bool {
	return s.cfg.CleanupDelay > 0 && (s.cfg.Dir != "" || s.cfg.Remove != nil)
}

// start counts a coordinator's Run in; the first starts the cleanup
// goroutine. Each start is matched by a stop; the last stop ends the
// goroutine and waits for it.
func (s *ShardPositions) start() {
	if s == nil {
		return
	}
	if !s.cleanupOn() {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.users++; s.users > 1 {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.stopCleanup, s.cleanupDone = cancel, make(chan struct{})
	done := s.cleanupDone
	go func() {
		defer close(done)
		s.cleanupLoop(ctx)
	}()
}

func (s *ShardPositions) stop() {
	if s == nil {
		return
	}
	if !s.cleanupOn() {
		return
	}
	s.mu.Lock()
	if s.users--; s.users > 0 {
		s.mu.Unlock()
		return
	}
	cancel, done := s.stopCleanup, s.cleanupDone
	s.stopCleanup, s.cleanupDone = nil, nil
	s.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

// poke wakes the cleanup goroutine to look again. Under mu.
func (s *ShardPositions) poke() {
	s.poked = true
	if s.sleepCancel != nil {
		s.sleepCancel()
	}
}

// cleanupLoop deletes the shards idle for CleanupDelay, sleeping on the
// Clock until the next one is due or a shard becomes idle.
func (s *ShardPositions) cleanupLoop(ctx context.Context) {
	for {
		next, ok := s.cleanOnce()
		s.mu.Lock()
		sctx, cancel := context.WithCancel(ctx)
		s.sleepCancel = cancel
		if s.poked {
			s.poked = false
			cancel()
		}
		s.mu.Unlock()
		if ok {
			_ = s.cfg.Clock.Sleep(sctx, next-s.cfg.Clock.Elapsed())
		} else {
			<-sctx.Done()
		}
		cancel()
		s.mu.Lock()
		s.sleepCancel = nil
		s.mu.Unlock()
		if ctx.Err() != nil {
			return
		}
	}
}

// cleanOnce deletes the shards due now and returns when the next one is.
func (s *ShardPositions) cleanOnce() (next time.Duration, ok bool) {
	now := s.cfg.Clock.Elapsed()
	s.mu.Lock()
	var due []int32
	for p, ls := range s.shards {
		if !ls.idle() {
			continue
		}
		at := ls.idleSince + s.cfg.CleanupDelay
		if at <= now {
			ls.deleting = make(chan struct{})
			due = append(due, p)
		} else if !ok || at < next {
			next, ok = at, true
		}
	}
	s.mu.Unlock()
	sort.Slice(due, func(i, j int) bool { return due[i] < due[j] })
	if len(due) > 0 {
		// A standby reader that wanted one of them while it was being
		// deleted opens it again (empty).
		defer s.wakeWorkers()
	}
	for _, p := range due {
		err := s.remove(p)
		s.mu.Lock()
		ls := s.shards[p]
		close(ls.deleting)
		ls.deleting = nil
		switch {
		case err == nil && ls.active == 0:
			delete(s.shards, p)
		case err == nil:
			// An active task of this process waits for the deletion
			// (acquireActive): it keeps the entry, with no position.
			ls.known, ls.hinted = false, false
		default:
			ls.idleSince = now // tried again after another delay
			if !ok || now+s.cfg.CleanupDelay < next {
				next, ok = now+s.cfg.CleanupDelay, true
			}
		}
		s.mu.Unlock()
		switch {
		case err == nil:
			s.log.Info("local shard deleted: neither active nor standby here for the cleanup delay", "partition", p,
				"cleanup_delay", s.cfg.CleanupDelay)
		case errors.Is(err, state.ErrLocked):
			s.log.Warn("local shard not deleted: another process holds it (give every instance its own StateDir)", "partition", p, "err", err)
		default:
			s.log.Warn("local shard not deleted", "partition", p, "err", err)
		}
	}
	return next, ok
}

func (s *ShardPositions) remove(p int32) error {
	if s.cfg.Remove != nil {
		return s.cfg.Remove(p)
	}
	return shard.RemoveShardDir(s.dir(p))
}
