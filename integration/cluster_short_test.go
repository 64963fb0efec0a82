package integration

import (
	"testing"
	"time"
)

// TestClusterControlledRestart is the short cluster case of `make test`
// (issue #28; the other cases are `make test-cluster`'s): a three-broker
// cluster of its own (kafkabroker.StartCluster, ~6 s), the eos
// application's two instances under steady input, and the broker with the
// most roles for the application (coordinator, leader of its partitions)
// stopped gracefully and started again, as in one step of a rolling
// restart; then the exact check (every key's outputs 1..n exactly once
// read_committed, the changelog's state and the local shards equal to the
// model). Parallel with the other integration tests: its time is mostly
// waiting on brokers and children.
func TestClusterControlledRestart(t *testing.T) {
	t.Parallel()
	start := time.Now()
	c := ownCluster(t)
	t.Logf("cluster up after %v", time.Since(start).Round(time.Millisecond))
	// Started as soon as the topics exist, both instances together:
	// no Cluster.WaitTopic (the start-up's "topic not found" on a broker
	// that had not heard of a new topic yet is retried, Findings 1 and 5
	// of docs/RELIABILITY.md).
	a := newChaosAppWith(t, c, "short-restart", chaosOpts{startAtOnce: true})
	t.Logf("application warm after %v", time.Since(start).Round(time.Millisecond))
	a.runFor(t, "controlled restart of the broker with the most roles", func(t *testing.T) {
		restartBusiestNode(t, c, a)
	}, 2*time.Second, 8*time.Second)
	t.Logf("case took %v in all (cluster start included)", time.Since(start).Round(time.Millisecond))
}
