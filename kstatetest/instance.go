package kstatetest

// The driver's instances of the application: each is a kstate.App run by
// runtime.RunApp — App.Run's own path — on the driver's in-memory broker,
// with a group member of its own and local disks that survive its tasks.
// The driver moves each instance's coordinator loop one poll at a time:
// the loop announces each Poll on idle and waits there for a step, so
// between the driver's calls every loop is parked in Poll, and nothing of
// the application runs.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/internal/engine"
	"github.com/kstate/kstate/internal/engine/enginetest"
	"github.com/kstate/kstate/internal/initial"
	"github.com/kstate/kstate/internal/kv"
	"github.com/kstate/kstate/internal/runtime"
)

// instance is one run of the application as one group member.
type instance[K, I, O any] struct {
	name   string
	app    *kstate.App[K, I, O]
	member *enginetest.Member
	idle   chan struct{} // the loop is in Poll
	coord  *engine.Coordinator
	cancel context.CancelFunc
	done   chan struct{} // Run returned
	err    error         // Run's error, once done is closed

	mu    sync.Mutex
	disks map[int32]*enginetest.Disk
	// gate is closed while the loop is parked in Poll: restores wait
	// for it (gatedAdmin), so that they finish between two polls and a
	// poll promotes all of them or none, as in enginetest's Env.
	gate chan struct{}

	// kill is the driver's armed crash (Crash); crashed: it killed this
	// instance.
	kill    *killSwitch
	crashed atomic.Bool
	// sleeps is the driver clock's Sleep count when the loop last moved
	// (StuckNextCall waits for the watchdog's Sleep after it).
	sleeps int
}

func (in *instance[K, I, O]) dead() bool {
	select {
	case <-in.done:
		return true
	default:
		return false
	}
}

// disk returns partition p's store, created on first use.
func (in *instance[K, I, O]) disk(p int32) kv.Store {
	in.mu.Lock()
	defer in.mu.Unlock()
	dk := in.disks[p]
	if dk == nil {
		dk = &enginetest.Disk{Store: kv.NewMemory()}
		in.disks[p] = dk
	}
	return dk
}

// store returns partition p's store, nil if the instance has none.
func (in *instance[K, I, O]) store(p int32) kv.Store {
	in.mu.Lock()
	defer in.mu.Unlock()
	if dk := in.disks[p]; dk != nil {
		return dk.Store
	}
	return nil
}

// killSwitch is a crash armed by Crash: the first instance to reach point
// dies.
type killSwitch struct {
	point engine.KillPoint
	armed atomic.Bool
}

// hook is the instance's KillHook.
func (in *instance[K, I, O]) hook(p engine.KillPoint) {
	if p != in.kill.point || !in.kill.armed.CompareAndSwap(true, false) {
		return
	}
	in.crashed.Store(true)
	in.member.Crash()
	in.mu.Lock()
	defer in.mu.Unlock()
	for _, dk := range in.disks {
		dk.Kill()
	}
}

// park opens the gate (the loop is parked in Poll); unpark closes it
// before the loop runs again.
func (in *instance[K, I, O]) park() {
	in.mu.Lock()
	defer in.mu.Unlock()
	select {
	case <-in.gate:
	default:
		close(in.gate)
	}
}

func (in *instance[K, I, O]) unpark() {
	in.mu.Lock()
	defer in.mu.Unlock()
	select {
	case <-in.gate:
		in.gate = make(chan struct{})
	default:
	}
}

func (in *instance[K, I, O]) gateCh() chan struct{} {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.gate
}

// gatedAdmin holds the restores (the only callers of CommittedOffsets
// under the driver) until the loop is parked in Poll.
type gatedAdmin struct {
	enginetest.Admin
	gate func() chan struct{}
}

func (a gatedAdmin) CommittedOffsets(ctx context.Context, group, topic string) (map[int32]int64, error) {
	select {
	case <-a.gate():
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return a.Admin.CommittedOffsets(ctx, group, topic)
}

// session is the instance's engine.Session: its member, whose Poll first
// says on idle that the loop reached it.
type session struct {
	*enginetest.Member
	idle chan struct{}
}

func (s *session) Poll(ctx context.Context, max int, ev engine.GroupEvents) ([]engine.Message, error) {
	select {
	case s.idle <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return s.Member.Poll(ctx, max, ev)
}

// newInstance returns instance i's first run, with empty disks.
func (d *Driver[K, I, O]) newInstance(i int) *instance[K, I, O] {
	in := &instance[K, I, O]{name: fmt.Sprintf("kstatetest-%d", i), disks: map[int32]*enginetest.Disk{}, kill: &d.kill}
	if i < len(d.insts) {
		d.insts[i] = in
	} else {
		d.insts = append(d.insts, in)
	}
	return in
}

// newInstanceFrom returns instance i's next run after old stopped: with
// old's disks as they are (copies), or empty ones.
func (d *Driver[K, I, O]) newInstanceFrom(i int, old *instance[K, I, O], keepLocal bool) *instance[K, I, O] {
	in := d.newInstance(i)
	if keepLocal {
		old.mu.Lock()
		for p, dk := range old.disks {
			in.disks[p] = &enginetest.Disk{Store: copyStore(dk.Store)}
		}
		old.mu.Unlock()
	}
	return in
}

// launch starts in's Run (app, or a new App of the driver's Topology),
// assigns it parts and returns once they are restored and the loop is
// idle, or Run's error.
func (d *Driver[K, I, O]) launch(in *instance[K, I, O], app *kstate.App[K, I, O], parts []int32) error {
	if app == nil {
		var err error
		if app, err = d.newApp(in); err != nil {
			return err
		}
	}
	in.app = app
	in.member = enginetest.NewMember(d.broker, in.name, func(string, ...any) {})
	in.idle = make(chan struct{})
	in.done = make(chan struct{})
	in.gate = make(chan struct{})
	close(in.gate) // open during the start-up checks (they read the group's offsets)
	sess := &session{Member: in.member, idle: in.idle}
	ctx, cancel := context.WithCancel(context.Background())
	in.cancel = cancel
	in.sleeps = d.clock.Sleeps()
	ports := runtime.Ports{
		Admin:     gatedAdmin{Admin: enginetest.Admin{B: d.broker}, gate: in.gateCh},
		Changelog: enginetest.Changelog{B: d.broker},
		Clock:     d.clock,
		NewSession: func(string, func() bool, time.Duration) (engine.Session, error) {
			in.member.Reopen()
			return sess, nil
		},
		Backend:   in.disk,
		ReadTopic: d.readTopic,
		RunID:     runID,
		Test:      true,
		KillHook:  in.hook,
		Started:   func(cs []*engine.Coordinator) { in.coord = cs[0] },
	}
	go func() {
		defer close(in.done)
		in.err = runtime.RunApp(ctx, app, ports)
	}()
	if !d.waitIdle(in) {
		return d.exited(in)
	}
	if len(parts) > 0 {
		in.member.Assign(false, parts...)
	}
	return d.ready(in, len(parts))
}

// runID is the QueryInfo.RunID processors see under the driver.
const runID = "kstatetest"

// readTopic serves InitialTopic's records to Topology.InitialState.
func (d *Driver[K, I, O]) readTopic(_ context.Context, topic string) ([]initial.Record, error) {
	recs, ok := d.opts.topics[topic]
	if !ok {
		return nil, fmt.Errorf("%w: %q (give its records with kstatetest.InitialTopic)", ErrNoTopic, topic)
	}
	out := make([]initial.Record, len(recs))
	for i, r := range recs {
		out[i] = initial.Record{Topic: topic, Offset: int64(i), Key: r.Key, Value: r.Value}
	}
	return out, nil
}

// waitIdle waits until in's loop is in Poll (true) or Run returned, and
// lets the restores run.
func (d *Driver[K, I, O]) waitIdle(in *instance[K, I, O]) bool {
	ok := d.wait(in)
	in.park()
	return ok
}

// step lets in's loop run one iteration (a poll and its batch) and waits
// until it is back in Poll (true) or Run returned. No restore runs while
// the loop does (ready waits for them before a step).
func (d *Driver[K, I, O]) step(in *instance[K, I, O]) bool {
	in.sleeps = d.clock.Sleeps()
	in.unpark()
	if !in.member.Step(in.done) {
		return false
	}
	return d.waitIdle(in)
}

// restoreGuard bounds the real time a restore may take (see ready).
const restoreGuard = 20 * time.Second

// maxSettlePolls bounds the polls a restore takes (an assignment, the
// promotion; a few more for safety).
const maxSettlePolls = 8

// ready steps in's loop until n partitions are assigned and restored:
// the poll that delivers the assignment starts the restores, the driver
// waits for them, and the next poll promotes them.
func (d *Driver[K, I, O]) ready(in *instance[K, I, O], n int) error {
	for i := 0; ; i++ {
		if i > 0 {
			// A restore only waits (on the driver's clock, which does not
			// move meanwhile) for a changelog inconsistent with the
			// group's offsets, which App.Run reports after RestoreTimeout:
			// the guard turns that wait into an error instead of a hang.
			ctx, cancel := context.WithTimeout(context.Background(), restoreGuard)
			err := in.coord.WaitRestores(ctx)
			cancel()
			if err != nil {
				return fmt.Errorf("kstatetest: instance %s: a restore did not finish within %v (waiting for changelog records the group's committed offsets need; the log says more): %w",
					in.name, restoreGuard, err)
			}
			s := in.coord.Snapshot()
			if len(s.Assigned) == n && len(s.Restoring) == 0 {
				return nil
			}
		}
		if i == maxSettlePolls {
			s := in.coord.Snapshot()
			return fmt.Errorf("kstatetest: internal error: instance %s not ready after %d polls (assigned %v, restoring %v, want %d)", in.name, i, s.Assigned, s.Restoring, n)
		}
		if !d.step(in) {
			return d.exited(in)
		}
	}
}

// exited is the error of in's Run, which returned.
func (d *Driver[K, I, O]) exited(in *instance[K, I, O]) error {
	<-in.done
	d.retired = addCounters(d.retired, in.app.Metrics().Total)
	if in.crashed.Load() {
		return fmt.Errorf("kstatetest: instance %s crashed at %s: %w", in.name, in.kill.point, ErrCrashed)
	}
	if in.err == nil {
		return fmt.Errorf("kstatetest: internal error: instance %s stopped", in.name)
	}
	return in.err
}

// stop stops in gracefully (a dead instance: nothing to do) and returns
// Run's error.
func (d *Driver[K, I, O]) stop(in *instance[K, I, O]) error {
	if in.done == nil || in.dead() {
		return nil
	}
	in.cancel()
	<-in.done
	d.retired = addCounters(d.retired, in.app.Metrics().Total)
	return in.err
}

// batch runs one batch on in: one poll brings the input queued for its
// partitions, the batch runs and commits. On an error Run returned: the
// instance is restarted on its disks (on fresh ones after fencing), after
// dropping the input of a record's or processor's error; after a crash it
// stays down until Restart.
func (d *Driver[K, I, O]) batch(in *instance[K, I, O]) error {
	if d.step(in) {
		return nil
	}
	err := d.exited(in)
	if in.crashed.Load() {
		return err
	}
	var (
		ue *kstate.UserError
		de *kstate.DecodeError
		rt *kstate.RecordTooLargeError
	)
	if errors.As(err, &ue) || errors.As(err, &de) || errors.As(err, &rt) {
		d.dropInput()
	}
	i := d.index(in)
	next := d.newInstanceFrom(i, in, !errors.Is(err, kstate.ErrFenced))
	if rerr := d.launch(next, nil, d.ownedBy(i)); rerr != nil {
		d.log.Warn("kstatetest: the restart after a failed batch failed: call Restart", "err", rerr)
	}
	return err
}

// dropInput moves the group's committed offsets of every input to the
// end, as kstate.SetInputOffsets does: with the changelog record of each
// moved offset, which keeps the state consistent with it.
func (d *Driver[K, I, O]) dropInput() {
	adm := enginetest.Admin{B: d.broker}
	ctx := context.Background()
	for i, topic := range d.topics {
		ends, _ := adm.EndOffsets(ctx, topic)
		committed := d.broker.CommittedOf(topic)
		for p, end := range ends {
			if c, ok := committed[p]; ok && c >= end || !ok && end == 0 {
				continue
			}
			k, v := engine.InputOffsetRecordOf(i, topic, end)
			if err := d.broker.Append(d.changelog, p, engine.Message{Key: k, Value: v}); err != nil {
				panic(fmt.Sprintf("kstatetest: internal error: %v", err))
			}
		}
		d.broker.SkipToEnd(topic)
	}
}

// index is in's index in d.insts.
func (d *Driver[K, I, O]) index(in *instance[K, I, O]) int {
	for i, x := range d.insts {
		if x == in {
			return i
		}
	}
	panic("kstatetest: internal error: unknown instance")
}

// copyStore copies every entry of src into a new in-memory store: the
// "local disk" that survives a restart.
func copyStore(src kv.Store) kv.Store {
	dst := kv.NewMemory()
	it := src.NewIter(nil, nil)
	var b kv.Batch
	for ok := it.First(); ok; ok = it.Next() {
		b.Put(append([]byte(nil), it.Key()...), append([]byte(nil), it.Value()...))
	}
	err := it.Error()
	if cerr := it.Close(); err == nil {
		err = cerr
	}
	if err == nil && b.Len() > 0 {
		err = dst.Write(&b, kv.WriteOptions{})
	}
	if err != nil {
		panic(fmt.Sprintf("kstatetest: internal error: copying a store: %v", err))
	}
	return dst
}
