package integration

import "testing"

// TestCrashReadAhead is TestCrashPacked's kills with the state read ahead
// (shard.Prefetch): no committed-state cache (-no-cache), 600 keys and ten
// times the rows a round, so that the batches of up to 100 or 1,000
// records have more than the 32 keys a read ahead needs and read the
// packed list and map of every key past the cache (checked by hand with a
// trace in Prefetch when the test was written: 20 batches read ahead in 10
// kills). Kill points count transactions and get batches of at most 25
// records, not read ahead. The child is SIGKILLed after random delays,
// during shutdown, between produce and commit, between the Kafka commit
// and the local commit, and during restore, with committed batches held in
// the write-behind layer (which the prefetched values must not shadow: the
// test fails when they are read first); a clean run then catches up, and
// the outputs, the state restored from the changelog and the local shards
// must equal the model exactly.
func TestCrashReadAhead(t *testing.T) {
	t.Parallel()
	crashPackedKills(t, 35, 600, killPlan{maxNth: 3, waves: 10}, func(a *eosChildArgs) { a.noCache = true })
}
