package engine

import (
	"bytes"
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// The watchdog: no hang, ever. A processor call that never returns must
// not stall the instance silently while its heartbeats keep its partitions
// assigned (nobody else could take them over). The tasks of a round run on
// their own goroutines (one flight each); the loop waits for them while a
// watchdog goroutine, on the injected Clock:
//
//	every warnEvery:       log at Warn which partition, method and key are
//	                       still running (the goroutine's stack once)
//	at MaxBatchDuration:   the loop gives the round up (StuckError)
//	at ShutdownTimeout     the same, once the Run ctx is cancelled
//	after cancellation:
//
// Giving up isolates the stuck goroutine instead of waiting for it:
//   - every task of the round is marked abandoned (Task.Abandon): when the
//     stuck call returns, its RunBatch stops at once (no more user code);
//   - nothing of the round can be committed: its transaction was either
//     never begun (tasks run before Begin) or, when the finished tasks'
//     records were being produced meanwhile (round.go), is aborted once
//     those produces returned; and Commit, the only writer of the shard,
//     is never called for an abandoned batch;
//   - the loop returns: shutdown skips processor Close and shard Close of a
//     task whose goroutine is still running (it would race with the call)
//     and marks it orphaned; that goroutine closes the task itself when
//     the call returns, without the processor's Close;
//   - the session closes and the group gives the partitions to another
//     member; their input offsets were not committed, so the new owner
//     processes the same records from the same committed state.
// The stuck goroutine is the one goroutine Run does not wait for.
//
// A partition's start (NewProcessor and Init, on its restore goroutine) is
// watched the same way by startTask: an Init that never returns would
// otherwise hold closeSlot, and so the revoke or the shutdown, forever.

const defaultMaxBatchDuration = 5 * time.Minute

// DefaultMaxBatchDuration is the MaxBatchDuration of a Config that sets
// none.
const DefaultMaxBatchDuration = defaultMaxBatchDuration

// MsgOrphanClosed is the message logged (at Warn) when the stuck call of
// an abandoned batch returned and its goroutine closed the task: the last
// thing that goroutine does (kstatetest waits for it).
const MsgOrphanClosed = "the stuck processor call returned after its batch was abandoned: task closed without the processor's Close"

// flight is one task's batch goroutine in a round.
type flight struct {
	s        *slot
	gid      atomic.Value // string "goroutine N [" of the batch goroutine
	finished atomic.Bool
	res      *BatchResult
	err      error
	dumped   bool // the watchdog logged this flight's stack (watchdog goroutine only)
}

// round is the set of flights of one batch, or the one flight of a
// partition's start (startTask).
type round struct {
	start    time.Duration // Clock.Elapsed when the tasks started
	flights  []*flight
	done     chan int // index of each flight when it finished; buffered
	starting bool     // a partition's start (NewProcessor, Init), not a batch
}

// runTasks starts RunBatch of every slot on its own goroutine and waits for
// them, or for the watchdog or the shutdown timer to give the round up.
// Results are in slot order. On a StuckError the tasks are abandoned (the
// finished ones aborted) and the round's results must not be used.
// finished, if not nil, is called on the caller's goroutine as each task's
// RunBatch returns, with its index, result and error, while the others
// may still run (round.go produces its records then).
func (c *Coordinator) runTasks(parts []*slot, nowMs int64, byPart map[int32][]Record, finished func(i int, res *BatchResult, err error)) ([]*BatchResult, []error, error) {
	rd := &round{start: c.clock.Elapsed(), done: make(chan int, len(parts))}
	c.mu.Lock()
	c.mu.inFlight, c.mu.roundStart = true, rd.start
	c.mu.roundParts, c.mu.roundRecords = c.mu.roundParts[:0], 0
	for _, s := range parts {
		s.running = true
		c.mu.roundParts = append(c.mu.roundParts, s.part)
		if pl := s.task.Planned(); pl != nil {
			c.mu.roundRecords += len(pl.Recs)
		} else {
			c.mu.roundRecords += len(byPart[s.part])
		}
	}
	c.mu.Unlock()
	for i, s := range parts {
		f := &flight{s: s}
		rd.flights = append(rd.flights, f)
		ms, recs := nowMs, byPart[s.part]
		if pl := s.task.Planned(); pl != nil {
			// With a sink the task executes its committed plan (sink.go).
			ms, recs = pl.TimeMs, pl.Recs
		}
		// The task is read here, on the loop: closeSlot clears s.task of
		// an orphaned slot, possibly before fly's goroutine first runs.
		go c.fly(rd, i, f, s.task, ms, recs)
	}

	wdCtx, stopWD := context.WithCancel(context.Background())
	expired := make(chan time.Duration, 1)
	var wd sync.WaitGroup
	wd.Go(func() { c.watch(wdCtx, rd, expired) })
	defer func() {
		stopWD()
		wd.Wait()
	}()
	for pending := len(parts); pending > 0; {
		select {
		case i := <-rd.done:
			pending--
			if finished != nil {
				f := rd.flights[i]
				finished(i, f.res, f.err)
			}
		case age := <-expired:
			return nil, nil, c.giveUp(rd, LimitMaxBatch, age)
		case <-c.shutdownExpired:
			return nil, nil, c.giveUp(rd, LimitShutdown, c.clock.Elapsed()-rd.start)
		}
	}
	results := make([]*BatchResult, len(parts))
	errs := make([]error, len(parts))
	for i, f := range rd.flights {
		results[i], errs[i] = f.res, f.err
	}
	return results, errs, nil
}

// fly runs one task's batch. If the loop gave the round up meanwhile and
// shutdown found this goroutine still running (orphaned), it closes the
// task itself: nobody else will, and only now is it safe.
func (c *Coordinator) fly(rd *round, i int, f *flight, t TaskHandle, nowMs int64, recs []Record) {
	f.gid.Store(goroutineID())
	f.res, f.err = t.RunBatch(nowMs, recs)
	f.finished.Store(true)
	c.mu.Lock()
	f.s.running = false
	orphan := f.s.orphaned
	c.mu.Unlock()
	rd.done <- i
	if orphan {
		err := t.Close()
		c.retire(t.Counters())
		c.log.Warn(MsgOrphanClosed, "partition", f.s.part, "err", err)
	}
}

// BatchTasksRunning returns how many tasks of the round in flight are
// still running their batch; 0 outside a round. For test drivers.
func (c *Coordinator) BatchTasksRunning() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	if !c.mu.inFlight {
		return 0
	}
	for _, p := range c.mu.roundParts {
		if s := c.mu.slots[p]; s != nil && s.running {
			n++
		}
	}
	return n
}

// watch logs the flights still running every warnEvery and reports the
// round's age on expired once it reaches MaxBatchDuration.
func (c *Coordinator) watch(ctx context.Context, rd *round, expired chan<- time.Duration) {
	every, limit := c.cfg.StuckWarnEvery, c.cfg.MaxBatchDuration
	next := every
	for {
		at := min(next, limit)
		if d := rd.start + at - c.clock.Elapsed(); d > 0 {
			if c.clock.Sleep(ctx, d) != nil {
				return
			}
		}
		age := c.clock.Elapsed() - rd.start
		if age >= limit {
			expired <- age
			return
		}
		c.warnStuck(rd, age)
		// A clock that jumped (a test's manual clock, a suspended VM)
		// gets one warning, not one per missed interval.
		next = (age/every + 1) * every
	}
}

// warnStuck logs every flight still running.
func (c *Coordinator) warnStuck(rd *round, age time.Duration) {
	for _, f := range rd.flights {
		if f.finished.Load() {
			continue
		}
		call := f.call(rd)
		args := []any{"partition", f.s.part, "method", call.Method, "key", call.Key,
			"running_for", age, "max_batch_duration", c.cfg.MaxBatchDuration}
		if !f.dumped {
			f.dumped = true
			gid, _ := f.gid.Load().(string)
			args = append(args, "stack", string(goroutineStack(gid)))
		}
		msg := "batch running long: a processor call has not returned; the instance gives its partitions up at max_batch_duration"
		if rd.starting {
			msg = "partition start running long: the processor's Init has not returned; the instance gives its partitions up at max_batch_duration"
		}
		c.log.Warn(msg, args...)
	}
}

// giveUp abandons the round: finished tasks abort, running ones are marked
// abandoned (see the file comment). It returns the StuckError of the first
// partition still running.
func (c *Coordinator) giveUp(rd *round, limit string, age time.Duration) error {
	var stuck *StuckError
	c.mu.Lock()
	for _, f := range rd.flights {
		if !f.s.running {
			// Finished (fly cleared running under mu after RunBatch
			// returned): the loop owns the task again.
			f.s.task.Abort()
			continue
		}
		f.s.task.Abandon()
		call := f.call(rd)
		c.log.Error("giving up the batch: a processor call has not returned", "partition", f.s.part,
			"method", call.Method, "key", call.Key, "running_for", age, "limit", limit)
		if stuck == nil {
			stuck = &StuckError{Partition: f.s.part, Method: call.Method, Key: call.Key, For: age, Limit: limit}
		}
	}
	c.mu.Unlock()
	if stuck == nil {
		// Every flight finished in the meantime; the limit passed all the
		// same and the loop must not wait any further.
		stuck = &StuckError{Partition: rd.flights[0].s.part, Method: "RunBatch", For: age, Limit: limit}
	}
	return stuck
}

// call is the processor call the flight's task is in: RunBatch (or, for
// a partition's start, NewProcessor) when it is in none.
func (f *flight) call(rd *round) Call {
	if call, ok := f.s.task.CurrentCall(); ok {
		return call
	}
	if rd.starting {
		return Call{Method: "NewProcessor"}
	}
	return Call{Method: "RunBatch"}
}

// startTask runs t.Start — the processor's NewProcessor and Init — on a
// goroutine of its own and waits for it as runTasks waits for a batch: a
// warning every StuckWarnEvery (the goroutine's stack once), and past
// MaxBatchDuration, or once ShutdownTimeout expired after Run's ctx was
// cancelled, a StuckError (Method "Init") without waiting any longer. A
// revoke meanwhile (the restore's ctx cancelled) waits like that too, as
// a revoke waits for a batch: the shard stays locked while Init runs.
//
// Given up, the task is marked abandoned (when Init returns, Start returns
// ErrAbandoned) and left to that goroutine, which closes it — without the
// processor's Close — when, if ever, Init returns; orphaned reports it, and
// the caller must then not close the task. Like an abandoned batch call,
// it is the one goroutine Run does not wait for.
func (c *Coordinator) startTask(t TaskHandle, p int32) (orphaned bool, err error) {
	s := &slot{part: p, task: t, running: true}
	f := &flight{s: s}
	rd := &round{start: c.clock.Elapsed(), flights: []*flight{f}, done: make(chan int, 1), starting: true}
	go func() {
		f.gid.Store(goroutineID())
		f.err = t.Start()
		f.finished.Store(true)
		c.mu.Lock()
		s.running = false
		orphan := s.orphaned
		c.mu.Unlock()
		if !orphan {
			rd.done <- 0
			return
		}
		cerr := t.Close()
		c.retire(t.Counters())
		c.log.Warn("the stuck processor Init returned after its partition was given up: task closed without the processor's Close",
			"partition", p, "err", cerr)
	}()

	wdCtx, stopWD := context.WithCancel(context.Background())
	expired := make(chan time.Duration, 1)
	var wd sync.WaitGroup
	wd.Go(func() { c.watch(wdCtx, rd, expired) })
	defer func() {
		stopWD()
		wd.Wait()
	}()
	var limit string
	var age time.Duration
	select {
	case <-rd.done:
		return false, f.err
	case age = <-expired:
		limit = LimitMaxBatch
	case <-c.shutdownExpired:
		limit, age = LimitShutdown, c.clock.Elapsed()-rd.start
	}
	c.mu.Lock()
	if !s.running {
		// Start returned meanwhile: no need to give up.
		c.mu.Unlock()
		<-rd.done
		return false, f.err
	}
	s.orphaned = true
	t.Abandon()
	call := f.call(rd)
	c.mu.Unlock()
	c.log.Error("giving up the partition's start: the processor's Init has not returned", "partition", p,
		"method", call.Method, "running_for", age, "limit", limit)
	return true, &StuckError{Partition: p, Method: call.Method, For: age, Limit: limit}
}

// goroutineID returns the calling goroutine's header prefix as it appears
// in runtime.Stack: "goroutine 123 [".
func goroutineID() string {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	if i := bytes.IndexByte(b, '['); i > 0 {
		return string(b[:i+1])
	}
	return ""
}

// goroutineStack returns the stack of the goroutine whose header starts
// with gid, from a dump of all goroutines.
func goroutineStack(gid string) []byte {
	if gid == "" {
		return nil
	}
	buf := make([]byte, 1<<16)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		if bytes.HasPrefix(g, []byte(gid)) {
			return g
		}
	}
	return nil
}
