package kstatetest

// Failures on purpose: the faults a test injects into the running
// application to check that its outputs and state stay exactly-once
// across them. Each acts on the real coordinator and the in-memory Kafka,
// deterministically.

import (
	"context"
	"fmt"
	"sync"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/internal/engine"
	"github.com/kstate/kstate/internal/engine/enginetest"
)

// ErrCrashed is matched (errors.Is) by RunBatch's error once Crash killed
// the application, until Restart.
var ErrCrashed = enginetest.ErrCrashed

// ErrInjected is matched (errors.Is) by the error of a failure injected
// with FailNextCommit or FailNextSink.
var ErrInjected = enginetest.ErrInjected

// KillPoint names a point of the engine's commit and restore protocol
// where Crash kills the application.
type KillPoint string

// The kill points (internal/engine/killpoint.go describes each).
const (
	// AfterProduce: the batch's records are in the open transaction, not
	// committed.
	AfterProduce = KillPoint(engine.AfterProduce)
	// AfterTaskProduce: one partition's records of the batch are in the
	// open transaction while another partition is still processing
	// (reached only then: with two or more partitions in the batch, when
	// their tasks do not finish together, which their timing decides).
	AfterTaskProduce = KillPoint(engine.AfterTaskProduce)
	// BeforeLocalCommit: the transaction committed; a partition's shard
	// has not applied the batch yet.
	BeforeLocalCommit = KillPoint(engine.BeforeLocalCommit)
	// AfterLocalCommit: one partition's shard applied the batch while
	// another's had not (reached only then, as AfterTaskProduce).
	AfterLocalCommit = KillPoint(engine.AfterLocalCommit)
	// AfterPlan: with Sinks, the batch's plan committed; it has not run.
	AfterPlan = KillPoint(engine.AfterPlan)
	// AfterSink: the sinks wrote the batch; its transaction has not begun.
	AfterSink = KillPoint(engine.AfterSink)
	// DuringRestore: a chunk of the changelog was read during a restore
	// and is not applied yet (reached by Restart and Rebalance).
	DuringRestore = KillPoint(engine.DuringRestore)
)

// Crash makes the application die the next time it reaches point, as a
// killed process does: the open transaction aborts, nothing more reaches
// its local state, and the processors' Close does not matter. The call
// that reaches it (RunBatch, or Restart and Rebalance for DuringRestore)
// returns an error matching ErrCrashed, and so does every RunBatch until
// Restart, which starts the application again: on the local state the
// crash left with KeepLocalState, else on fresh shards. Input the crashed
// batch had not committed is processed again by the next RunBatch. With
// two instances (Rebalance), the first to reach point dies.
func (d *Driver[K, I, O]) Crash(point KillPoint) {
	d.t.Helper()
	d.kill.point = engine.KillPoint(point)
	d.kill.armed.Store(true)
}

// FailNextCommit makes the next transaction commit of every running
// instance fail (with the sinks of Topology.Output.Sinks: the batch's plan
// transaction): Kafka aborts it, so nothing of the batch is visible, and
// RunBatch returns the error (matching ErrInjected) that App.Run stops
// with. The application restarts on its local state, and the next
// RunBatch processes the batch again: its outputs and state changes
// must appear exactly once.
func (d *Driver[K, I, O]) FailNextCommit() {
	d.t.Helper()
	d.running(func(in *instance[K, I, O]) { in.member.FailNext("commit") })
}

// Fence makes a newer instance with the same InstanceID take over during
// the next batch of every running instance, just before it commits: the
// old instance's transaction aborts and RunBatch returns the error App.Run
// stops with (matching kstate.ErrFenced). The newer instance starts on
// fresh local state restored from the changelog, and the next RunBatch
// processes the batch again.
func (d *Driver[K, I, O]) Fence() {
	d.t.Helper()
	d.running(func(in *instance[K, I, O]) {
		m := in.member
		m.AtEnd(m.Fence)
	})
}

// FailNextSink makes the next call of Topology.Output.Sinks' first sink fail
// before it writes anything: the batch is not committed, RunBatch
// returns the *kstate.SinkError App.Run stops with (wrapping ErrInjected),
// the application restarts, and the next RunBatch hands the sink the same
// batch again (same SinkBatch.ID and rows). Without Sinks it fails the
// test.
func (d *Driver[K, I, O]) FailNextSink() {
	d.t.Helper()
	if len(d.top.Output.Sinks) == 0 {
		d.t.Fatalf("kstatetest: FailNextSink: the Topology has no Output.Sinks")
	}
	d.faults.mu.Lock()
	d.faults.sinkFails++
	d.faults.mu.Unlock()
}

// running calls fn for each running instance.
func (d *Driver[K, I, O]) running(fn func(in *instance[K, I, O])) {
	d.t.Helper()
	n := 0
	for _, in := range d.insts {
		if in.done != nil && !in.dead() {
			fn(in)
			n++
		}
	}
	if n == 0 {
		d.t.Fatalf("kstatetest: the application is not running: call Restart")
	}
}

// Rebalance moves partitions parts to the other of two instances of the
// application, as the consumer group does when an instance joins or
// leaves: the current owner's tasks close (processors' Close), the other
// instance — started on first use, with its own local state — restores
// them from the changelog and runs their batches from then on. A
// partition moved back restores the changelog tail on the local state it
// left there. Rebalance returns once every partition is ready; an error
// (an instance that cannot start, a crash during the restore) fails the
// test.
func (d *Driver[K, I, O]) Rebalance(parts ...int32) {
	d.t.Helper()
	if err := d.rebalance(parts); err != nil {
		d.t.Fatalf("Rebalance: %v", err)
	}
}

func (d *Driver[K, I, O]) rebalance(parts []int32) error {
	moves := map[int][]int32{} // to instance → partitions
	for _, p := range parts {
		if p < 0 || int(p) >= len(d.owner) {
			return fmt.Errorf("kstatetest: no partition %d (Partitions(%d))", p, len(d.owner))
		}
		to := 1 - d.owner[p]
		moves[to] = append(moves[to], p)
	}
	if len(d.insts) == 1 {
		d.newInstance(1)
	}
	// Revoke first (the owners' tasks close), then assign.
	for to, ps := range moves {
		from := d.insts[1-to]
		if from.done == nil || from.dead() {
			continue
		}
		from.member.Revoke(ps...)
		if !d.step(from) {
			return d.exited(from)
		}
	}
	for to, ps := range moves {
		for _, p := range ps {
			d.owner[p] = to
		}
	}
	for to, ps := range moves {
		in := d.insts[to]
		if in.done == nil {
			if err := d.launch(in, nil, ps); err != nil {
				return err
			}
			continue
		}
		if in.dead() {
			return fmt.Errorf("kstatetest: instance %s is not running: call Restart", in.name)
		}
		in.member.Assign(false, ps...)
		if err := d.ready(in, len(d.ownedBy(to))); err != nil {
			return err
		}
	}
	d.collect()
	return nil
}

// faults holds the failures a test armed that the application's Topology
// carries (the sinks).
type faults[K, O any] struct {
	mu        sync.Mutex
	sinkFails int
}

// sink wraps the first sink.
func (f *faults[K, O]) sink(s kstate.Sink[K, O]) kstate.Sink[K, O] {
	return kstate.SinkFunc[K, O](func(ctx context.Context, b kstate.SinkBatch[K, O]) error {
		f.mu.Lock()
		fail := f.sinkFails > 0
		if fail {
			f.sinkFails--
		}
		f.mu.Unlock()
		if fail {
			return fmt.Errorf("kstatetest: FailNextSink: %w", ErrInjected)
		}
		return s.WriteBatch(ctx, b)
	})
}
