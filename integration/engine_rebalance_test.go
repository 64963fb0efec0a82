package integration

import (
	"testing"
	"time"

	"github.com/kstate/kstate/internal/testprocs"
)

// Two in-process instances share the partitions while input flows, then
// the first stops (static member: its partitions move after the session
// timeout): outputs stay exactly 1..n per key and the moved partitions are
// restored from the changelog. (Multi-process scale tests with three
// instances are a follow-up.)
func TestEngineRebalanceTwoInstances(t *testing.T) {
	t.Parallel()
	e := newSpecEnv(t, 4)
	cfg1 := e.config(t, testprocs.NewCounter)
	cfg1.Kafka.SessionTimeout = 6 * time.Second // the broker's minimum
	cfg2 := cfg1
	cfg2.InstanceID, cfg2.State.Dir = "i2", t.TempDir()
	app1 := newSpecApp(t, cfg1)
	stop1 := testprocs.Start(t, app1)

	const keys = 20
	in := &testprocs.KeyCycler{T: t, Brokers: e.brokers, Topic: e.in, Keys: keys}
	produce := in.Produce
	produce(100)
	testprocs.WaitOutputs(t, e.brokers, e.out, in.Sent, waitOut)

	app2 := newSpecApp(t, cfg2)
	testprocs.Start(t, app2)
	testprocs.Eventually(t, waitOut, "both instances own partitions", func() bool {
		produce(10)
		time.Sleep(100 * time.Millisecond)
		return len(app1.Metrics().Assigned) > 0 && len(app2.Metrics().Assigned) > 0 && len(app2.Metrics().Restoring) == 0
	})
	checkCounts(t, testprocs.WaitOutputs(t, e.brokers, e.out, in.Sent, waitOut), in.Sent, keys)
	if err := stop1(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	testprocs.Eventually(t, waitOut, "instance 2 owns all partitions", func() bool {
		produce(5)
		time.Sleep(100 * time.Millisecond)
		return len(app2.Metrics().Assigned) == 4 && len(app2.Metrics().Restoring) == 0
	})
	t.Logf("partitions of the stopped static member moved in %v", time.Since(start).Round(time.Millisecond))
	produce(50)
	checkCounts(t, testprocs.WaitOutputs(t, e.brokers, e.out, in.Sent, waitOut), in.Sent, keys)
	m1, m2 := app1.Metrics().Total, app2.Metrics().Total
	t.Logf("instance 1: %d commits, %d aborts; instance 2: %d commits, %d aborts, %d changelog records restored in %v",
		m1.Commits, m1.Aborts, m2.Commits, m2.Aborts, m2.RestoreRecords, m2.RestoreTime)
	if m2.RestoreRecords == 0 {
		t.Fatal("instance 2 restored nothing")
	}
}
