package kstate_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kstate/kstate/internal/testprocs"
	"github.com/kstate/kstate/kafka/embedded"
	"github.com/kstate/kstate/statereader"
)

// countsAt reads the Counter's "count" variable of partition 0 as of batch
// id (id < 0: the latest state), as "key=n" joined by spaces, and the
// snapshot's PartitionMeta.BatchID.
func countsAt(t *testing.T, brokers []string, id int64) (string, int64, error) {
	t.Helper()
	var opts []statereader.Option
	if id >= 0 {
		opts = append(opts, statereader.AtBatch(0, id))
	}
	r, err := statereader.OpenChangelog(t.Context(), brokers, "app", opts...)
	if err != nil {
		return "", 0, err
	}
	es, err := r.Read("count", statereader.Query{})
	if err != nil {
		t.Fatal(err)
	}
	var parts []string
	for _, e := range es {
		parts = append(parts, fmt.Sprintf("%s=%s", e.Key, e.Value))
	}
	md := r.Metadata()
	b := int64(-1)
	if len(md.Partitions) == 1 && md.Partitions[0].BatchID != nil {
		b = *md.Partitions[0].BatchID
	}
	return strings.Join(parts, " "), b, nil
}

// Spark's state reader reads state as of a batch id (TransformWithStateSuite,
// "state data source integration - value state supports time travel": batch
// 4 of a running count reads 5 while later batches went on), and fails for a
// batch whose files were purged. kstate reads a partition's changelog up to
// the end of batch N while the changelog still holds that history, and once
// compaction removed it answers a *BatchNotReadableError rather than later
// state; a batch not committed yet is refused alike.
func TestEmbeddedStateReaderAtBatch(t *testing.T) {
	e, err := embedded.Start(embedded.Options{Partitions: 1, Topics: map[string]int{"in": 1, "out": 1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	brokers := e.Brokers()
	stop := testprocs.Start(t, newApp(t, config(brokers, t.TempDir(), testprocs.NewCounter)))
	for i, kv := range []string{"a=x", "a=y", "b=z"} { // batches 0, 1, 2
		testprocs.Produce(t, brokers, "in", kv)
		testprocs.WaitOutputs(t, brokers, "out", i+1, 20*time.Second)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	check := func(id int64, want string) {
		t.Helper()
		got, b, err := countsAt(t, brokers, id)
		if err != nil {
			t.Fatalf("batch %d: %v", id, err)
		}
		if got != want || b != id {
			t.Fatalf("batch %d: count %q, metadata batch id %d; want %q, %d", id, got, b, want, id)
		}
	}
	check(0, "a=1")
	check(1, "a=2")
	check(2, "a=2 b=1")
	if got, b, err := countsAt(t, brokers, -1); err != nil || got != "a=2 b=1" || b != 2 {
		t.Fatalf("latest: %q, batch %d, %v", got, b, err)
	}
	_, _, err = countsAt(t, brokers, 3)
	var nr *statereader.BatchNotReadableError
	if !errors.As(err, &nr) || nr.Latest != 2 || !strings.Contains(err.Error(), "has not committed it (its last committed batch is 2)") {
		t.Fatalf("batch 3 (not committed): %v", err)
	}

	// Compaction keeps the latest record of each key: batches 0 and 1 are
	// gone, batch 2 (the latest) still reads.
	e.Compact()
	for _, id := range []int64{0, 1} {
		_, _, err := countsAt(t, brokers, id)
		if !errors.Is(err, statereader.ErrBatchNotReadable) || !errors.As(err, &nr) || nr.Oldest != 2 || nr.Latest != 2 ||
			!strings.Contains(err.Error(), "no longer holds it") {
			t.Fatalf("batch %d after compaction: %v, want a BatchNotReadableError (oldest 2, latest 2)", id, err)
		}
	}
	check(2, "a=2 b=1")
}
