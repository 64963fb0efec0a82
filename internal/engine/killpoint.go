package engine

// KillPoint names a point of the commit and restore protocol where a crash
// test kills the process (integration/testapp, driven by the tests in
// integration/crash_test.go). A crash at any of them must lose nothing and
// duplicate nothing.
type KillPoint string

const (
	// AfterProduce: the batch's output and changelog records are in the
	// open transaction, which is not committed yet.
	AfterProduce KillPoint = "after-produce"
	// BeforeLocalCommit: the transaction committed; the next task's shard
	// has not applied its part of the batch yet (reached once per task of
	// the batch, so a crash can also fall between two tasks).
	BeforeLocalCommit KillPoint = "before-local-commit"
	// DuringRestore: a chunk of changelog records was read and is about to
	// be applied; the partition is not restored yet.
	DuringRestore KillPoint = "during-restore"
)

// KillHook is nil except in test programs of this module (the package is
// internal: nothing outside the module can set it). It must be set before
// the first App runs and not changed afterwards; it is called, possibly
// from several goroutines at once, every time a KillPoint is reached, and
// may kill the process.
var KillHook func(KillPoint)

// At reports reaching p to KillHook. Unset, it costs one nil check.
func At(p KillPoint) {
	if KillHook != nil {
		KillHook(p)
	}
}
