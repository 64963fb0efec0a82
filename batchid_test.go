package kstate_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/internal/testprocs"
	"github.com/kstate/kstate/statereader"
)

// One meaning of a batch id everywhere: the n-th batch of a partition that
// processed rows has id n-1 in its sink call, in the state reader's
// PartitionMeta.BatchID once committed (the last committed batch) and on the
// status page. Spark: after batches 0 and 1 the state metadata's maxBatchId
// is 1 and the state reader reads batch 1 by default. Before the fix the
// reader said 2 (the stored id of the next batch). A restart (an upgrade
// keeps what is stored) continues the sink's numbering at 2.
func TestBatchIDOneMeaning(t *testing.T) {
	brokers := startEmbedded(t, 1)
	dir := t.TempDir()
	var mu sync.Mutex
	var sinkIDs []int64
	cfg := config(brokers, dir, testprocs.NewCounter)
	cfg.Output.Sinks = []kstate.Sink[string, string]{kstate.SinkFunc[string, string](func(_ context.Context, b kstate.SinkBatch[string, string]) error {
		mu.Lock()
		defer mu.Unlock()
		sinkIDs = append(sinkIDs, b.ID)
		return nil
	})}
	ids := func() []int64 { mu.Lock(); defer mu.Unlock(); return slices.Clone(sinkIDs) }

	app := newApp(t, cfg)
	stop := testprocs.Start(t, app)
	testprocs.Produce(t, brokers, "in", "a=x")
	testprocs.WaitOutputs(t, brokers, "out", 1, 20*time.Second)
	testprocs.Produce(t, brokers, "in", "a=y")
	testprocs.WaitOutputs(t, brokers, "out", 2, 20*time.Second)
	testprocs.Eventually(t, 20*time.Second, "two sink calls", func() bool { return len(ids()) == 2 })
	st := app.Status()
	if len(st.Partitions) != 1 || st.Partitions[0].BatchID != 1 {
		t.Fatalf("status partitions %+v: want batch id 1 (the last committed batch)", st.Partitions)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if got := ids(); !slices.Equal(got, []int64{0, 1}) {
		t.Fatalf("sink batch ids %v, want [0 1]", got)
	}
	r, err := statereader.OpenChangelog(t.Context(), brokers, "app")
	if err != nil {
		t.Fatal(err)
	}
	md := r.Metadata()
	if len(md.Partitions) != 1 || md.Partitions[0].BatchID == nil || *md.Partitions[0].BatchID != 1 {
		t.Fatalf("state reader metadata %+v: want BatchID 1, the last sink batch id", md.Partitions)
	}

	// Restarted on the same state: the next batch is 2 for the sink.
	stop = testprocs.Start(t, newApp(t, cfg))
	testprocs.Produce(t, brokers, "in", "a=z")
	testprocs.WaitOutputs(t, brokers, "out", 3, 20*time.Second)
	testprocs.Eventually(t, 20*time.Second, "a third sink call", func() bool { return len(ids()) == 3 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if got := ids(); !slices.Equal(got, []int64{0, 1, 2}) {
		t.Fatalf("sink batch ids after a restart %v, want [0 1 2]", got)
	}
}
