package integration

import (
	"context"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/internal/kafka"
	"github.com/kstate/kstate/internal/rescale"
	"github.com/kstate/kstate/internal/testprocs"
)

// TestPartitionsIncreaseNewLayoutProducer: the input topic grows from 3 to
// 5 partitions while the application runs, and a producer writes with the
// new layout right away (testprocs.Produce partitions with murmur2 over
// the partition count it reads: 5). MetadataRefresh is at its default
// (30 s), so the periodic re-read is not what notices: the records whose
// key now maps to another old partition are key/partition mismatches, and
// the batch holding them re-reads the count before it runs. Run stops
// with a PartitionsChangedError and nothing more is committed on the old
// layout: no key gets a second counter. The documented way on (OPERATIONS,
// "Changing the number of input partitions": kstate state rescale to a new
// application id) then continues every count exactly.
func TestPartitionsIncreaseNewLayoutProducer(t *testing.T) {
	longTest(t)
	const keys = 30
	e := newSpecEnv(t, 3)
	cfg := e.config(t, testprocs.NewCounter)
	cfg.Kafka.LeaveGroupOnShutdown = true
	if cfg.Kafka.MetadataRefresh != 0 {
		t.Fatal("MetadataRefresh must stay at its default")
	}
	_, done := testprocs.StartWatch(t, newSpecApp(t, cfg))
	round(t, e, keys)
	testprocs.WaitOutputs(t, e.brokers, e.out, keys, waitOut)
	before := committed(t, e, e.app)

	addPartitions(t, e, 2)
	changed := time.Now()
	round(t, e, keys) // on the new layout
	select {
	case err := <-done:
		wantPartitionsChanged(t, err, 3, 5)
		t.Logf("Run stopped %v after the partitions were added", time.Since(changed).Round(time.Millisecond))
	case <-time.After(waitOut):
		t.Fatal("Run did not notice the new partitions")
	}
	if after := committed(t, e, e.app); !maps.Equal(before, after) {
		t.Fatalf("committed offsets moved after the change: %v → %v", before, after)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := testprocs.Read(ctx, e.brokers, e.out)
	if err != nil {
		t.Fatal(err)
	}
	wantCounts(t, out, keys, 1)

	// The way on: rescale A's state to 5 partitions as application B,
	// which continues from A's committed offsets (the new partitions from
	// their start).
	b := e
	b.app = e.app + "-b"
	rctx, rcancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer rcancel()
	var res *rescale.Result
	for {
		// A failed Run's static members stay in the group until their
		// session times out: the rescale refuses until then.
		res, err = rescale.Run(rctx, kafka.ClientConfig{Brokers: e.brokers}, rescale.Options{From: e.app, To: b.app, Partitions: 5})
		if err == nil || !errors.Is(err, rescale.ErrRefused) || !strings.Contains(err.Error(), "member(s)") || rctx.Err() != nil {
			break
		}
		time.Sleep(time.Second)
	}
	if err != nil {
		t.Fatalf("rescale: %v", err)
	}
	t.Logf("rescaled %s to %s: committed offsets of A %v", e.app, b.app, res.Committed)
	bcfg := b.config(t, testprocs.NewCounter)
	stop := testprocs.Start(t, newSpecApp(t, bcfg))
	round(t, e, keys)
	wantCounts(t, testprocs.WaitOutputs(t, e.brokers, e.out, 3*keys, waitOut), keys, 3)
	if err := stop(); err != nil {
		t.Fatalf("Run of %s: %v", b.app, err)
	}
	// A refuses to start on the new layout.
	_, done = testprocs.StartWatch(t, newSpecApp(t, cfg))
	select {
	case err := <-done:
		var pc *kstate.PartitionsChangedError
		if !errors.As(err, &pc) {
			t.Fatalf("restart of %s: %v, want a PartitionsChangedError", e.app, err)
		}
	case <-time.After(waitOut):
		t.Fatal("the old application started on the new layout")
	}
}
