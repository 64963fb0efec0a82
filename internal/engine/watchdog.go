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
//   - the round's transaction was never begun (tasks run before Begin), so
//     nothing of it can be produced or committed, and Commit, the only
//     writer of the shard, is never called for an abandoned batch;
//   - the loop returns: shutdown skips processor Close and shard Close of a
//     task whose goroutine is still running (it would race with the call)
//     and marks it orphaned; that goroutine closes the task itself when
//     the call returns, without the processor's Close;
//   - the session closes and the group gives the partitions to another
//     member; their input offsets were not committed, so the new owner
//     processes the same records from the same committed state.
// The stuck goroutine is the one goroutine Run does not wait for.

const defaultMaxBatchDuration = 5 * time.Minute

// flight is one task's batch goroutine in a round.
type flight struct {
	s        *slot
	gid      atomic.Value // string "goroutine N [" of the batch goroutine
	finished atomic.Bool
	res      *BatchResult
	err      error
	dumped   bool // the watchdog logged this flight's stack (watchdog goroutine only)
}

// round is the set of flights of one batch.
type round struct {
	start   time.Duration // Clock.Elapsed when the tasks started
	flights []*flight
	done    chan int // index of each flight when it finished; buffered
}

// runTasks starts RunBatch of every slot on its own goroutine and waits for
// them, or for the watchdog or the shutdown timer to give the round up.
// Results are in slot order. On a StuckError the tasks are abandoned (the
// finished ones aborted) and the round's results must not be used.
func (c *Coordinator) runTasks(parts []*slot, nowMs int64, byPart map[int32][]Record) ([]*BatchResult, []error, error) {
	rd := &round{start: c.clock.Elapsed(), done: make(chan int, len(parts))}
	c.mu.Lock()
	c.mu.inFlight, c.mu.roundStart = true, rd.start
	for _, s := range parts {
		s.running = true
	}
	c.mu.Unlock()
	for i, s := range parts {
		f := &flight{s: s}
		rd.flights = append(rd.flights, f)
		go c.fly(rd, i, f, nowMs, byPart[s.part])
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
		case <-rd.done:
			pending--
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
func (c *Coordinator) fly(rd *round, i int, f *flight, nowMs int64, recs []Record) {
	t := f.s.task // closeSlot clears s.task of an orphaned slot
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
		c.log.Warn("the stuck processor call returned after its batch was abandoned: task closed without the processor's Close",
			"partition", f.s.part, "err", err)
	}
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
		call, ok := f.s.task.CurrentCall()
		if !ok {
			call = Call{Method: "RunBatch"}
		}
		args := []any{"partition", f.s.part, "method", call.Method, "key", call.Key,
			"running_for", age, "max_batch_duration", c.cfg.MaxBatchDuration}
		if !f.dumped {
			f.dumped = true
			gid, _ := f.gid.Load().(string)
			args = append(args, "stack", string(goroutineStack(gid)))
		}
		c.log.Warn("batch running long: a processor call has not returned; the instance gives its partitions up at max_batch_duration", args...)
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
		call, ok := f.s.task.CurrentCall()
		if !ok {
			call = Call{Method: "RunBatch"}
		}
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
