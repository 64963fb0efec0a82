package engine

// Standby replicas (issue #27): the group's balancer gives a member, beside
// its active partitions, standby (and warm-up) partitions, whose shards
// the member keeps current by replaying their changelog partitions, so
// that when one becomes active here its restore replays only the tail.
//
// One goroutine per coordinator reads all its standbys, round robin, off
// the loop goroutine: a turn applies at most StandbyTurnRecords records of
// one partition (restore.Restore on the shard, the same replay as an
// assignment's restore, coalescing the records of a key within a batch),
// within StandbyBytesPerSecond, so that the standbys never hold the loop.
// Standby reading is background work: while an active pipeline of the
// process has a backlog, the reader takes at most standbyBusyShare of the
// time (a turn that took d is followed by a pause of d/share - d), so the
// standbys take little CPU from the active partitions; with no backlog it
// reads at full speed and catches up. A caught-up standby closes its
// reader and opens a new one (the changelog's end moves) every
// StandbyRefresh on the Clock.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"
	"time"

	"github.com/kstate/kstate/changelog"
	"github.com/kstate/kstate/internal/restore"
	"github.com/kstate/kstate/state"
)

// StandbyEvents is an optional extension of GroupEvents: a Session whose
// group assigns standby partitions calls Standby, like the other events
// from inside Poll (between batches), with the member's full set of
// standby (and warm-up) partitions whenever it changes; an empty set drops
// them all.
type StandbyEvents interface {
	Standby(ctx context.Context, parts []int32)
}

// Defaults of the standby reader.
const (
	defaultStandbyRefresh        = time.Second
	defaultStandbyTurnRecords    = 100_000
	defaultStandbyBytesPerSecond = 64 << 20
	// standbyBatchBytes bounds one ApplyChangelog of a standby, and so its
	// memory with the reader's fetch: the keys and values of the distinct
	// records it holds (copies: restore.Options.Coalesce frees the fetch
	// buffers). A turn is one batch when they fit, so that each key is
	// written once per turn however often the changelog updated it.
	standbyBatchBytes = 16 << 20
	// standbyRetry is the pause after a standby failed to open or read.
	standbyRetry = 10 * time.Second
	// standbyBusyShare is the share of the time the standby reader of a
	// coordinator takes while an active pipeline of the process has a
	// backlog: after a turn that took d, it waits until d/standbyBusyShare
	// after the turn's start (or until the backlog is gone).
	standbyBusyShare = 0.1
	// backlogHold is how long a backlog seen after a batch counts
	// (ShardPositions.noteBacklog), and so how often a yielding standby
	// reader looks again.
	backlogHold = time.Second
)

// standbyRestoreOptions are a standby turn's replay options: the whole
// turn in one batch when it fits in standbyBatchBytes, each key's records
// coalesced.
func standbyRestoreOptions(turnRecords int, now func() time.Time) restore.Options {
	return restore.Options{BatchSize: turnRecords, BatchBytes: standbyBatchBytes, Coalesce: true, Now: now}
}

// noteBacklog is called by every coordinator of the process after every
// batch: n records processed, lag the consumer lag of its ready
// partitions after it (-1 unknown). The batch had a backlog when more
// records are waiting than it processed: the pipeline is behind its
// input, not merely receiving it, and the standby readers yield to it
// for backlogHold.
func (s *ShardPositions) noteBacklog(n int, lag int64, now time.Duration) {
	if s == nil || n == 0 || lag <= int64(n) {
		return
	}
	s.backlogUntil.Store(int64(now + backlogHold))
}

// backlogged says whether an active pipeline of the process had a backlog
// within backlogHold of now.
func (s *ShardPositions) backlogged(now time.Duration) bool {
	return s != nil && time.Duration(s.backlogUntil.Load()) > now
}

// busyPause returns until when a standby reader whose turn started at
// start and took took yields while the process has a backlog.
func busyPause(start, took time.Duration) time.Duration {
	return start + time.Duration(float64(took)/standbyBusyShare)
}

// StandbyStatus is one standby partition as the coordinator's standby
// reader last saw it.
type StandbyStatus struct {
	// Open: the shard is open and kept current. False while it cannot be
	// (active in this process, locked, an error: retried).
	Open bool
	// Position is the shard's changelog position (the next offset it
	// reads); End the changelog's end as of the reader last opened; -1
	// unknown. End - Position is the standby's lag (as of that open).
	Position, End int64
	// Records counts the changelog records applied since the shard was
	// opened as a standby.
	Records int64
}

// standbys is a coordinator's standby reader.
type standbys struct {
	c   *Coordinator
	pos *ShardPositions

	mu struct {
		sync.Mutex
		want      map[int32]bool
		cur       int32              // the partition of the turn running, -1 none
		curCancel context.CancelFunc // cancels that turn
		poked     bool
		sleep     context.CancelFunc // wakes the goroutine's sleep
		status    map[int32]StandbyStatus
		running   bool
		cancel    context.CancelFunc
		done      chan struct{}
	}

	// The goroutine's own.
	open    map[int32]*standby
	retryAt map[int32]time.Duration // a failed open is retried then
	last    int32                   // round robin: the partition of the last turn
	limit   rateLimit
	// resumeAt is when the next turn may start while the process has a
	// backlog (busyPause).
	resumeAt time.Duration
}

// standby is one open standby shard.
type standby struct {
	p    int32
	task TaskHandle
	rd   ChangelogReader // nil between catch-ups
	due  time.Duration   // when to open a reader again (rd == nil)
	// opened is the wall time rd was opened at (stale.go).
	opened time.Time
}

func newStandbys(c *Coordinator) *standbys {
	w := &standbys{c: c, pos: c.cfg.Positions, open: map[int32]*standby{}, retryAt: map[int32]time.Duration{}, last: -1}
	w.mu.want, w.mu.status, w.mu.cur = map[int32]bool{}, map[int32]StandbyStatus{}, -1
	w.limit.rate = c.cfg.StandbyBytesPerSecond
	return w
}

// Standby implements StandbyEvents: parts is the member's full standby set.
func (g groupEvents) Standby(_ context.Context, parts []int32) {
	g.c.standby.set(parts)
}

// set replaces the wanted standby set; the first non-empty one starts the
// goroutine (it runs until the coordinator stops).
func (w *standbys) set(parts []int32) {
	if w == nil {
		return
	}
	want := make(map[int32]bool, len(parts))
	for _, p := range parts {
		if p >= 0 {
			want[p] = true
		}
	}
	w.mu.Lock()
	w.mu.want = want
	for p := range w.mu.status {
		if !want[p] {
			delete(w.mu.status, p)
		}
	}
	for p := range want {
		if _, ok := w.mu.status[p]; !ok {
			w.mu.status[p] = StandbyStatus{Position: -1, End: -1}
		}
	}
	if w.mu.cur >= 0 && !want[w.mu.cur] && w.mu.curCancel != nil {
		w.mu.curCancel()
	}
	start := !w.mu.running && len(want) > 0 && w.c.workCtx != nil
	if start {
		ctx, cancel := context.WithCancel(w.c.workCtx)
		w.mu.running, w.mu.cancel, w.mu.done = true, cancel, make(chan struct{})
		done := w.mu.done
		go func() {
			defer close(done)
			w.run(ctx)
		}()
	}
	w.pokeLocked()
	w.mu.Unlock()
	if start {
		// Not under w.mu: ShardPositions takes its lock, then a reader's
		// (releaseActive wakes them), never the other way round.
		w.pos.register(w, true)
	}
	w.c.log.Info("standby partitions", "partitions", sortedKeys(want))
}

// stop ends the goroutine, which closes every standby shard, and waits.
func (w *standbys) stop() {
	if w == nil {
		return
	}
	w.mu.Lock()
	cancel, done := w.mu.cancel, w.mu.done
	w.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
	w.pos.register(w, false)
}

// status returns the standbys' status, sorted by partition in the map.
func (w *standbys) status() map[int32]StandbyStatus {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.mu.status) == 0 {
		return nil
	}
	out := make(map[int32]StandbyStatus, len(w.mu.status))
	for p, st := range w.mu.status {
		out[p] = st
	}
	return out
}

func (w *standbys) noteStatus(p int32, f func(*StandbyStatus)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if st, ok := w.mu.status[p]; ok {
		f(&st)
		w.mu.status[p] = st
	}
}

// wake makes the goroutine look at its set again.
func (w *standbys) wake() {
	w.mu.Lock()
	w.pokeLocked()
	w.mu.Unlock()
}

// wakeFor is wake for a partition p an active task of the process needs:
// the turn running, of p or of another standby (whose read may hang), is
// cancelled, so that the reader closes p's shard now; the cancelled turn
// keeps what it applied and continues at the reader's next round.
func (w *standbys) wakeFor(int32) {
	w.mu.Lock()
	if w.mu.cur >= 0 && w.mu.curCancel != nil {
		w.mu.curCancel()
	}
	w.pokeLocked()
	w.mu.Unlock()
}

func (w *standbys) pokeLocked() {
	w.mu.poked = true
	if w.mu.sleep != nil {
		w.mu.sleep()
	}
}

// run is the standby goroutine.
func (w *standbys) run(ctx context.Context) {
	defer w.closeAll()
	for ctx.Err() == nil {
		w.reconcile()
		sb := w.pick()
		if sb == nil {
			w.sleep(ctx, -1)
			continue
		}
		start := w.c.clock.Elapsed()
		if start < w.resumeAt && w.pos.backlogged(start) {
			w.sleep(ctx, min(w.resumeAt, start+backlogHold))
			continue
		}
		w.turn(ctx, sb)
		w.resumeAt = busyPause(start, w.c.clock.Elapsed()-start)
	}
}

// reconcile closes the standbys no longer wanted (or needed by an active
// task of the process) and opens the wanted ones it can.
func (w *standbys) reconcile() {
	w.mu.Lock()
	w.mu.poked = false
	want := make(map[int32]bool, len(w.mu.want))
	for p := range w.mu.want {
		want[p] = true
	}
	w.mu.Unlock()
	// Hand over first, then close: an active task waits for a handed
	// shard, and closing a large shard (its memtables flushed) takes
	// hundreds of ms; a rebalance that activates one standby partition
	// often drops others.
	for _, p := range sortedKeys(w.open) {
		if w.pos.wantedActive(p) { // first: an assignment drops p from want too
			w.handOver(w.open[p])
		}
	}
	for _, p := range sortedKeys(w.open) {
		if !want[p] && !w.pos.wantedActive(p) {
			w.close(w.open[p], "standby partition unassigned: shard closed (kept on disk)")
		}
	}
	now := w.c.clock.Elapsed()
	for p := range w.retryAt {
		if !want[p] {
			delete(w.retryAt, p)
		}
	}
	for _, p := range sortedKeys(want) {
		if w.open[p] != nil || now < w.retryAt[p] {
			continue
		}
		if !w.pos.tryStandby(p, w) {
			continue // active in the process or being deleted: woken when freed
		}
		if err := w.openShard(p); err != nil {
			w.pos.releaseStandby(p, w, -1)
			w.retryAt[p] = now + w.c.cfg.StandbyRefresh
			if !errors.Is(err, state.ErrLocked) {
				w.retryAt[p] = now + standbyRetry
				w.c.log.Warn("standby partition: could not open its shard: retrying", "partition", p, "retry_in", standbyRetry, "err", err)
			}
			continue
		}
		delete(w.retryAt, p)
	}
}

// openShard opens p's shard as a standby (the task of NewTask, never
// started: no processor, only its shard).
func (w *standbys) openShard(p int32) error {
	t, err := w.c.cfg.NewTask(p)
	if err != nil {
		return err
	}
	pending, err := t.Shard().ReseedPending()
	if err == nil && pending {
		err = errors.New("a re-seed of the changelog from this shard was interrupted: the shard is left to the partition's next owner, which decides again")
	}
	if err != nil {
		t.Close()
		return err
	}
	w.open[p] = &standby{p: p, task: t, due: w.c.clock.Elapsed()}
	off := t.Shard().ChangelogOffset()
	w.noteStatus(p, func(st *StandbyStatus) { st.Open, st.Position, st.Records = true, off, 0 })
	w.pos.set(p, off, false)
	w.c.log.Info("standby partition: shard opened", "partition", p, "changelog_offset", off)
	return nil
}

// close closes sb's reader and shard and gives the shard up.
func (w *standbys) close(sb *standby, why string) {
	if sb.rd != nil {
		sb.rd.Close()
		sb.rd = nil
	}
	off := sb.task.Shard().ChangelogOffset()
	if err := sb.task.Close(); err != nil {
		w.c.log.Warn("standby partition: closing the shard failed", "partition", sb.p, "err", err)
	}
	delete(w.open, sb.p)
	w.pos.releaseStandby(sb.p, w, off)
	w.noteStatus(sb.p, func(st *StandbyStatus) { st.Open = false })
	w.c.log.Info(why, "partition", sb.p, "changelog_offset", off)
}

// handOver gives sb's shard, open, to the active task of the process
// that waits for it (ShardPositions.handOver), or closes it when none
// waits any more.
func (w *standbys) handOver(sb *standby) {
	if sb.rd != nil {
		sb.rd.Close()
		sb.rd = nil
	}
	off := sb.task.Shard().ChangelogOffset()
	if !w.pos.handOver(sb.p, w, sb.task, off) {
		w.close(sb, "standby partition active in this process: standby shard handed over")
		return
	}
	delete(w.open, sb.p)
	w.noteStatus(sb.p, func(st *StandbyStatus) { st.Open = false })
	w.c.log.Info("standby partition active in this process: standby shard handed over open", "partition", sb.p, "changelog_offset", off)
}

func (w *standbys) closeAll() {
	for _, p := range sortedKeys(w.open) {
		w.close(w.open[p], "standby partition: shard closed (stopping)")
	}
}

// pick returns the next open standby with something to do, round robin
// after the last turn's partition: one with a reader open, or due to
// open one.
func (w *standbys) pick() *standby {
	parts := sortedKeys(w.open)
	if len(parts) == 0 {
		return nil
	}
	start := sort.Search(len(parts), func(i int) bool { return parts[i] > w.last })
	now := w.c.clock.Elapsed()
	for i := range parts {
		sb := w.open[parts[(start+i)%len(parts)]]
		if sb.rd != nil || sb.due <= now {
			return sb
		}
	}
	return nil
}

// sleep waits until a standby is due or a retry is, or, if until is not
// negative, until then; or a wake.
func (w *standbys) sleep(ctx context.Context, until time.Duration) {
	// Yielding to a backlog (until set), the standbys with something to do
	// wait too: a reader open has no due time.
	next, ok := until, until >= 0
	for _, sb := range w.open {
		if until < 0 && (!ok || sb.due < next) {
			next, ok = sb.due, true
		}
	}
	for _, at := range w.retryAt {
		if until < 0 && (!ok || at < next) {
			next, ok = at, true
		}
	}
	w.mu.Lock()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w.mu.sleep = cancel
	if w.mu.poked {
		cancel()
	}
	w.mu.Unlock()
	if ok {
		_ = w.c.clock.Sleep(sctx, max(next-w.c.clock.Elapsed(), 0))
	} else {
		<-sctx.Done()
	}
	w.mu.Lock()
	w.mu.sleep = nil
	w.mu.Unlock()
}

// turn applies up to StandbyTurnRecords records of sb's changelog.
func (w *standbys) turn(ctx context.Context, sb *standby) {
	c := w.c
	w.last = sb.p
	if c.cfg.StandbyGate != nil {
		if err := c.cfg.StandbyGate(ctx); err != nil {
			return
		}
	}
	sh := sb.task.Shard()
	// The turn, its reader's open included, is cancelled by a partition
	// becoming active in the process (wakeFor) or leaving the set.
	tctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w.mu.Lock()
	w.mu.cur, w.mu.curCancel = sb.p, cancel
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.mu.cur, w.mu.curCancel = -1, nil
		w.mu.Unlock()
	}()
	if sb.rd == nil {
		if err := c.wipeIfStale(tctx, sh, sb.p); err != nil {
			if tctx.Err() == nil {
				sb.due = c.clock.Elapsed() + standbyRetry
				c.log.Warn("standby partition: could not check its local state's age: retrying", "partition", sb.p, "retry_in", standbyRetry, "err", err)
			}
			return
		}
		sb.opened = c.wallNow()
		rd, err := c.cfg.Changelog.Open(tctx, c.cfg.ChangelogTopic, sb.p, sh.ChangelogOffset())
		if err != nil {
			if tctx.Err() == nil {
				sb.due = c.clock.Elapsed() + standbyRetry
				c.log.Warn("standby partition: could not read its changelog: retrying", "partition", sb.p,
					"changelog_offset", sh.ChangelogOffset(), "retry_in", standbyRetry, "err", err)
			}
			return
		}
		sb.rd = rd
		end := rd.End()
		w.noteStatus(sb.p, func(st *StandbyStatus) { st.End = end })
	}
	src := &standbySource{rd: sb.rd, budget: c.cfg.StandbyTurnRecords, w: w}
	st, err := restore.Restore(tctx, src, sh, standbyRestoreOptions(c.cfg.StandbyTurnRecords,
		func() time.Time { return time.Unix(0, 0).Add(c.clock.Elapsed()) }))
	off := sh.ChangelogOffset()
	w.noteStatus(sb.p, func(s *StandbyStatus) { s.Position, s.Records = off, s.Records+st.Records })
	w.pos.set(sb.p, off, false)
	switch {
	case err != nil:
		// The reader's position is past what was applied: a new one
		// starts again from the shard's offset.
		sb.rd.Close()
		sb.rd = nil
		sb.due = c.clock.Elapsed()
		if ctx.Err() == nil && tctx.Err() == nil {
			sb.due += standbyRetry
			c.log.Warn("standby partition: replaying its changelog failed: retrying", "partition", sb.p,
				"changelog_offset", off, "retry_in", standbyRetry, "err", err)
		}
	case src.ended:
		sb.rd.Close()
		sb.rd = nil
		sb.due = c.clock.Elapsed() + c.cfg.StandbyRefresh
		if err := c.caughtUp(sh, sb.opened); err != nil {
			c.log.Warn("standby partition: recording its changelog time failed", "partition", sb.p, "err", err)
		}
	}
}

// standbySource is a turn's restore.Source: the standby's reader, up to a
// budget of records (then io.EOF, the reader staying open for the next
// turn), within the coordinator's standby throughput.
type standbySource struct {
	rd     ChangelogReader
	budget int
	n      int
	ended  bool // the reader reached its end
	w      *standbys
}

func (s *standbySource) Next(ctx context.Context) ([]changelog.Record, error) {
	if s.n >= s.budget {
		return nil, io.EOF
	}
	if err := s.w.limit.wait(ctx, s.w.c.clock); err != nil {
		return nil, err
	}
	recs, err := changelogSource{rd: s.rd}.Next(ctx)
	if errors.Is(err, io.EOF) {
		s.ended = true
		return nil, io.EOF
	}
	if err != nil {
		return nil, err
	}
	s.w.c.cfg.KillHook.at(DuringStandby)
	s.n += len(recs)
	var bytes int64
	for _, r := range recs {
		bytes += int64(len(r.Key) + len(r.Value))
	}
	s.w.limit.spent(bytes)
	return recs, nil
}

// Position implements restore.Positioner: the reader's position (past
// markers and aborted records) once it reached its end; before that the
// records applied are the position (0: none to add).
func (s *standbySource) Position() int64 {
	if s.ended {
		return s.rd.Position()
	}
	return 0
}

// rateLimit bounds the bytes read per second (0: no bound), on the Clock.
// Used by one goroutine at a time (the turns' read-ahead goroutines, one
// after the other).
type rateLimit struct {
	rate  int64
	start time.Duration // the current one-second window
	used  int64
}

func (l *rateLimit) wait(ctx context.Context, clock Clock) error {
	if l.rate <= 0 {
		return nil
	}
	now := clock.Elapsed()
	if now-l.start >= time.Second {
		l.start, l.used = now, 0
	}
	if l.used < l.rate {
		return nil
	}
	if err := clock.Sleep(ctx, l.start+time.Second-now); err != nil {
		return err
	}
	l.start, l.used = clock.Elapsed(), 0
	return nil
}

func (l *rateLimit) spent(n int64) { l.used += n }

func sortedKeys[V any](m map[int32]V) []int32 {
	out := make([]int32, 0, len(m))
	for p := range m {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// String is for logs.
func (s StandbyStatus) String() string {
	return fmt.Sprintf("open=%v position=%d end=%d records=%d", s.Open, s.Position, s.End, s.Records)
}
