package integration

import "testing"

// TestCrashBackgroundFlush is TestCrashPacked's kills with a 4 KiB
// write-behind layer (-write-behind): the batches (at most 25 records,
// an application that keeps up) fill it every batch or two, so a full
// layer is frozen and written to the store by a background goroutine
// nearly all the time (internal/shard, SetBackgroundFlush), and the
// child is SIGKILLed after random delays — during those writes among
// other moments —, during shutdown, between produce and commit, between
// the Kafka commit and the local commit, and during restore. A clean run
// then catches up, and the outputs, the state restored from the changelog
// and the local shards (whose stored offset is that of the last completed
// write) must equal the model exactly.
func TestCrashBackgroundFlush(t *testing.T) {
	t.Parallel()
	crashPackedKills(t, 37, 600, killPlan{maxNth: 3, waves: 10}, func(a *eosChildArgs) { a.writeBehind = 4 << 10 })
}
