package kstatetest

// StuckNextCall: a processor call that does not return, so that the
// engine's watchdog gives its batch up at MaxBatchDuration. The call
// blocks on a channel (no sleep); the driver moves its clock, which the
// watchdog reads, past MaxBatchDuration, and releases the call once Run
// returned.

import (
	"context"
	"fmt"
	"iter"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kstate/kstate/internal/engine"
	"github.com/kstate/kstate/internal/initial"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/serde"
)

// stuckGuard bounds the real time the driver waits for the engine to give
// a stuck batch up once its clock passed MaxBatchDuration (the watchdog
// reacts at once; the guard turns a watchdog that does not into an error
// instead of a hang), and for the released call's goroutine to end.
const stuckGuard = 20 * time.Second

// StuckNextCall makes the next HandleInputRows or HandleExpiredTimer call
// for key block, as a processor stuck on a lock or a remote call does.
// The RunBatch that makes the call then moves the driver clock forward by
// MaxBatchDuration (default 5m; set it with the MaxBatchDuration option),
// so that the engine's watchdog gives the batch up: nothing of the batch
// is committed, and RunBatch returns the *kstate.StuckError App.Run stops
// with (matching kstate.ErrStuck), naming the partition, the method and
// the key. The blocked call is then released (it runs the processor's
// method, whose state changes and outputs are discarded) and has returned
// when RunBatch does. The application restarts on its local state, and
// the next RunBatch processes the batch again, at the moved clock.
func (d *Driver[K, I, O]) StuckNextCall(key K) {
	d.t.Helper()
	kb, err := d.top.KeySerde.Serialize(key)
	if err != nil {
		d.t.Fatalf("kstatetest: StuckNextCall: serialize key %#v: %v", key, err)
	}
	d.stuck.arm(string(kb))
}

// MaxBatchDuration sets kstate.Options' Batching.MaxDuration, the time a
// batch's processor calls may take on the driver clock before the engine
// gives the batch up (StuckNextCall), overriding the default of 5m.
func MaxBatchDuration(dur time.Duration) Option { return func(o *options) { o.maxBatch = dur } }

// maxBatch is the MaxBatchDuration the application runs with.
func (d *Driver[K, I, O]) maxBatch() time.Duration {
	if d.opts.maxBatch > 0 {
		return d.opts.maxBatch
	}
	return engine.DefaultMaxBatchDuration
}

// stuckFault holds the keys armed by StuckNextCall and the calls blocked.
type stuckFault struct {
	armedN atomic.Int32 // calls armed: the wrapper's fast path
	mu     sync.Mutex
	armed  map[string]int // key bytes → calls to block
	calls  []*stuckCall   // blocked, not yet released
	notify chan struct{}  // a call blocked (buffered 1)
	// orphans receives one value per orphaned task closed by its stuck
	// call's goroutine (engine.MsgOrphanClosed logged).
	orphans chan struct{}
}

// stuckCall is a blocked processor call.
type stuckCall struct {
	release  chan struct{} // closed: the call goes on
	returned chan struct{} // closed when the processor's method returned
	// givenUp: Run returned while the call was blocked, so its task is
	// orphaned and the call's goroutine closes it.
	givenUp bool
}

func newStuckFault() *stuckFault {
	return &stuckFault{armed: map[string]int{}, notify: make(chan struct{}, 1), orphans: make(chan struct{}, 64)}
}

func (f *stuckFault) arm(key string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.armed[key]++
	f.armedN.Add(1)
}

// block blocks the calling processor call if key is armed, until the
// driver releases it; the caller closes the returned call's returned when
// the processor's method returned. nil: not armed.
func block[K any](f *stuckFault, keys serde.Serializer[K], key K) *stuckCall {
	if f.armedN.Load() == 0 {
		return nil
	}
	kb, err := keys.Serialize(key)
	if err != nil {
		return nil // the engine serialized it already; cannot happen
	}
	f.mu.Lock()
	if f.armed[string(kb)] == 0 {
		f.mu.Unlock()
		return nil
	}
	if f.armed[string(kb)]--; f.armed[string(kb)] == 0 {
		delete(f.armed, string(kb))
	}
	f.armedN.Add(-1)
	c := &stuckCall{release: make(chan struct{}), returned: make(chan struct{})}
	f.calls = append(f.calls, c)
	f.mu.Unlock()
	select {
	case f.notify <- struct{}{}:
	default:
	}
	<-c.release
	return c
}

// blocked reports whether a call is blocked and not released.
func (f *stuckFault) blocked() bool { return f.nBlocked() > 0 }

// nBlocked is the number of calls blocked and not released.
func (f *stuckFault) nBlocked() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.calls {
		select {
		case <-c.release:
		default:
			n++
		}
	}
	return n
}

// givenUp marks the blocked calls as orphaned: their Run returned.
func (f *stuckFault) givenUp() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.calls {
		select {
		case <-c.release:
		default:
			c.givenUp = true
		}
	}
}

// releaseAll lets every blocked call go on.
func (f *stuckFault) releaseAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.calls {
		select {
		case <-c.release:
		default:
			close(c.release)
		}
	}
}

// release lets every blocked call go on and waits until each has
// returned and, when its batch was given up, its goroutine closed the
// orphaned task (its last step).
func (f *stuckFault) release() error {
	f.releaseAll()
	f.mu.Lock()
	calls := f.calls
	f.calls = nil
	f.mu.Unlock()
	guard := time.NewTimer(stuckGuard)
	defer guard.Stop()
	for _, c := range calls {
		select {
		case <-c.returned:
		case <-guard.C:
			return fmt.Errorf("kstatetest: StuckNextCall: the released processor call did not return within %v", stuckGuard)
		}
		if !c.givenUp {
			continue
		}
		select {
		case <-f.orphans:
		case <-guard.C:
			return fmt.Errorf("kstatetest: StuckNextCall: the goroutine of the released call did not close its abandoned task within %v", stuckGuard)
		}
	}
	return nil
}

// wait waits until in's loop is in Poll (true) or Run returned (false).
// Meanwhile, once a call StuckNextCall armed is blocked and the watchdog
// is sleeping on the driver clock (a Sleep since the step began), it
// moves the clock by MaxBatchDuration; if the loop has not come back
// within stuckGuard of real time then, it releases the call and reports
// the engine's failure to give the batch up in d.stuckErr.
func (d *Driver[K, I, O]) wait(in *instance[K, I, O]) bool {
	var (
		slept    <-chan struct{}
		guard    *time.Timer
		guardC   <-chan time.Time
		advanced bool
	)
	defer func() {
		if guard != nil {
			guard.Stop()
		}
	}()
	advance := func() {
		advanced, slept = true, nil
		// The round's other tasks finish first (they run on goroutines of
		// their own): the batch is given up for the blocked call alone.
		deadline := time.Now().Add(stuckGuard)
		for in.coord.BatchTasksRunning() > d.stuck.nBlocked() && time.Now().Before(deadline) {
			time.Sleep(100 * time.Microsecond)
		}
		d.clock.Advance(d.maxBatch())
		guard = time.NewTimer(stuckGuard)
		guardC = guard.C
	}
	for {
		select {
		case <-in.idle:
			return true
		case <-in.done:
			d.stuck.givenUp()
			return false
		case <-d.stuck.notify:
			if advanced || !d.stuck.blocked() {
				continue
			}
			ch := d.clock.SleepCalled()
			if d.clock.Sleeps() > in.sleeps {
				advance()
			} else {
				slept = ch
			}
		case <-slept:
			advance()
		case <-guardC:
			guardC = nil
			if d.stuck.blocked() {
				d.stuckErr = cmp(d.stuckErr, fmt.Errorf("kstatetest: StuckNextCall: the engine did not give the stuck batch up: the driver clock passed MaxBatchDuration (%v) and the batch still ran %v later (real time); the call was released", d.maxBatch(), stuckGuard))
				d.stuck.releaseAll()
			}
		}
	}
}

// orphanWatch is the driver's log handler: it reports on orphans each
// abandoned task closed by its stuck call's goroutine.
type orphanWatch struct {
	slog.Handler
	orphans chan<- struct{}
}

func (h orphanWatch) Handle(ctx context.Context, r slog.Record) error {
	var err error
	if h.Handler.Enabled(ctx, r.Level) {
		err = h.Handler.Handle(ctx, r)
	}
	if r.Message == engine.MsgOrphanClosed {
		select {
		case h.orphans <- struct{}{}:
		default:
		}
	}
	return err
}

func (h orphanWatch) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn || h.Handler.Enabled(ctx, l)
}

func (h orphanWatch) WithAttrs(as []slog.Attr) slog.Handler {
	return orphanWatch{Handler: h.Handler.WithAttrs(as), orphans: h.orphans}
}

func (h orphanWatch) WithGroup(name string) slog.Handler {
	return orphanWatch{Handler: h.Handler.WithGroup(name), orphans: h.orphans}
}

// stuckProc wraps the application's processor: a call for a key armed by
// StuckNextCall blocks. Its only optional interface,
// processor.InitialStateHandler, is served by the processor it wraps
// (unwrapProc; initialSource).
type stuckProc[K, I, O any] struct {
	processor.StatefulProcessor[K, I, O]
	f    *stuckFault
	keys serde.Serializer[K]
}

func (p *stuckProc[K, I, O]) HandleInputRows(key K, rows iter.Seq[I], tv processor.TimerValues, out processor.Emitter[O]) error {
	if c := block(p.f, p.keys, key); c != nil {
		defer close(c.returned)
	}
	return p.StatefulProcessor.HandleInputRows(key, rows, tv, out)
}

func (p *stuckProc[K, I, O]) HandleExpiredTimer(key K, tv processor.TimerValues, t processor.ExpiredTimerInfo, out processor.Emitter[O]) error {
	if c := block(p.f, p.keys, key); c != nil {
		defer close(c.returned)
	}
	return p.StatefulProcessor.HandleExpiredTimer(key, tv, t, out)
}

func (p *stuckProc[K, I, O]) wrapped() any { return p.StatefulProcessor }

// unwrapProc is the application's own processor of proc.
func unwrapProc(proc any) any {
	if w, ok := proc.(interface{ wrapped() any }); ok {
		return w.wrapped()
	}
	return proc
}

// wrapProcessor wraps newProc's processors with the stuck fault.
func wrapProcessor[K, I, O any](newProc func() processor.StatefulProcessor[K, I, O], f *stuckFault, keys serde.Serializer[K]) func() processor.StatefulProcessor[K, I, O] {
	if newProc == nil {
		return nil // kstate.New reports it
	}
	return func() processor.StatefulProcessor[K, I, O] {
		p := newProc()
		if p == nil {
			return nil
		}
		return &stuckProc[K, I, O]{StatefulProcessor: p, f: f, keys: keys}
	}
}

// initialSource hands the application's own processor to the initial
// state's HandleInitialState (and its check), through the wrapper.
type initialSource[K any] struct{ initial.Source[K] }

func (s initialSource[K]) Check(proc any) error { return s.Source.Check(unwrapProc(proc)) }

func (s initialSource[K]) Rows(ctx context.Context, read initial.ReadTopic, keys serde.Serde[K]) ([]engine.InitialRow[K], error) {
	rows, err := s.Source.Rows(ctx, read, keys)
	for i := range rows {
		apply := rows[i].Apply
		rows[i].Apply = func(proc any, tv processor.TimerValues) error { return apply(unwrapProc(proc), tv) }
	}
	return rows, err
}
