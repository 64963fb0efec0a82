package kstate_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/kstate/kstate/internal/testprocs"
)

// Two instances share the partitions while input flows, then the first
// stops: every key's outputs are exactly 1..n (no loss, no duplicate), and
// the moved partitions were restored from the changelog.
func TestEmbeddedRebalanceExactlyOnce(t *testing.T) {
	brokers := startEmbedded(t, 4)
	cfg1 := config(brokers, t.TempDir(), testprocs.NewCounter)
	cfg1.Kafka.SessionTimeout = 4 * time.Second
	cfg2 := cfg1
	cfg2.InstanceID, cfg2.State.Dir = "i2", t.TempDir()
	app1 := newApp(t, cfg1)
	stop1 := testprocs.Start(t, app1)

	const keys, perRound = 20, 40
	in := &testprocs.KeyCycler{T: t, Brokers: brokers, Topic: "in", Keys: keys}
	produce := func() { in.Produce(perRound) }
	produce()
	testprocs.WaitOutputs(t, brokers, "out", in.Sent, 30*time.Second)

	app2 := newApp(t, cfg2)
	stop2 := testprocs.Start(t, app2)
	for range 5 {
		produce()
		time.Sleep(100 * time.Millisecond) // let input flow during the rebalance
	}
	testprocs.Eventually(t, 30*time.Second, "both instances own partitions", func() bool {
		return len(app1.Metrics().Assigned) > 0 && len(app2.Metrics().Assigned) > 0
	})
	produce()
	testprocs.WaitOutputs(t, brokers, "out", in.Sent, 30*time.Second)
	if err := stop1(); err != nil {
		t.Fatal(err)
	}
	produce()
	testprocs.Eventually(t, 30*time.Second, "instance 2 owns all partitions", func() bool {
		return len(app2.Metrics().Assigned) == 4 && len(app2.Metrics().Restoring) == 0
	})
	produce()
	got := testprocs.WaitOutputs(t, brokers, "out", in.Sent, 30*time.Second)
	if err := stop2(); err != nil {
		t.Fatal(err)
	}
	if got.Count() != in.Sent {
		t.Fatalf("%d outputs for %d inputs", got.Count(), in.Sent)
	}
	for k, vs := range got {
		for i, v := range vs {
			if v != strconv.Itoa(i+1) {
				t.Fatalf("key %s: outputs %v are not 1..%d", k, vs, len(vs))
			}
		}
	}
	m1, m2 := app1.Metrics().Total, app2.Metrics().Total
	t.Logf("instance 1: %d commits, %d aborts; instance 2: %d commits, %d aborts, %d records restored",
		m1.Commits, m1.Aborts, m2.Commits, m2.Aborts, m2.RestoreRecords)
	if m2.RestoreRecords == 0 {
		t.Fatal("instance 2 restored nothing")
	}
}
