package integration

import (
	"testing"
	"time"
)

// TestClusterShort is the one three-broker case of `make test` (issue #28;
// the others are `make test-cluster`'s, docs/RELIABILITY.md): on a cluster of
// its own, the broker with the most roles for the application (leader of
// its partitions, coordinator) stopped gracefully and started again, then
// the preferred leaders elected back, under steady input from two
// instances of the eos application, and the exact check. It is
// TestClusterChaos's case (e) with a shorter aftermath.
func TestClusterShort(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a three-broker cluster: not with -short")
	}
	c := ownCluster(t)
	clusterPreferredLeader(t, c, 10*time.Second)
}
