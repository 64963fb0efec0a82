package engine

import "context"

// KillPoint names a point of the commit and restore protocol where a crash
// test kills the process (integration/testapp, driven by the tests in
// integration/crash_test.go). A crash at any of them must lose nothing and
// duplicate nothing.
type KillPoint string

const (
	// AfterProduce: the batch's output and changelog records are in the
	// open transaction, which is not committed yet.
	AfterProduce KillPoint = "after-produce"
	// BeforeLocalCommit: the transaction committed; a task's shard has not
	// applied its part of the batch yet (reached once per task of the
	// batch, just before its local commit; the tasks commit in parallel,
	// so other tasks may have committed or be committing).
	BeforeLocalCommit KillPoint = "before-local-commit"
	// AfterTaskProduce: one task's records of the batch (outputs,
	// changelog, ...) are acknowledged in the open transaction while
	// another task of the batch is still processing (reached only then).
	AfterTaskProduce KillPoint = "after-task-produce"
	// AfterLocalCommit: the transaction committed and one task's shard
	// applied its part of the batch while another task's local commit of
	// the batch had not finished (reached only then): local commits run in
	// parallel.
	AfterLocalCommit KillPoint = "after-local-commit"
	// AfterPlan: with a sink, the batch plans committed (input offsets
	// included); the batch has not executed.
	AfterPlan KillPoint = "after-plan"
	// AfterSink: the sinks wrote the batch; its Kafka transaction has not
	// begun.
	AfterSink KillPoint = "after-sink"
	// DuringRestore: a chunk of changelog records was read and is about to
	// be applied; the partition is not restored yet.
	DuringRestore KillPoint = "during-restore"
	// DuringStandby: a standby read a chunk of changelog records and is
	// about to apply them to its shard (standby.go).
	DuringStandby KillPoint = "during-standby"
	// BeforeReseed: the shard is marked "re-seed pending" and nothing of
	// the re-seed transaction is produced yet.
	BeforeReseed KillPoint = "before-reseed"
	// AfterReseed: the re-seed transaction committed; the shard still has
	// its mark and its old changelog offset.
	AfterReseed KillPoint = "after-reseed"
)

// KillHook is called, possibly from several goroutines at once, every time
// a KillPoint is reached; it may kill the process. It is set per
// Coordinator (CoordinatorConfig.KillHook), never globally.
type KillHook func(KillPoint)

type killHookKey struct{}

// WithKillHook returns a context that makes kstate.App.Run install h as its
// coordinator's KillHook. It is the internal-only option through which
// integration/testapp injects crashes: the package is internal, so no user
// can reach it, and nothing global is mutated.
func WithKillHook(ctx context.Context, h KillHook) context.Context {
	return context.WithValue(ctx, killHookKey{}, h)
}

// KillHookFrom returns the hook installed by WithKillHook, or nil.
func KillHookFrom(ctx context.Context) KillHook {
	h, _ := ctx.Value(killHookKey{}).(KillHook)
	return h
}

// at reports reaching p to the hook. Unset, it costs one nil check.
func (h KillHook) at(p KillPoint) {
	if h != nil {
		h(p)
	}
}
