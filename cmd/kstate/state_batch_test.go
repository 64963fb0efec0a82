package main

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/internal/testlog"
	"github.com/kstate/kstate/internal/testprocs"
	"github.com/kstate/kstate/kafka/kafkatest"
	"github.com/kstate/kstate/serde"
	"github.com/kstate/kstate/statereader"
)

// `kstate state read --batch N --partition P` reads a partition as of its
// batch N, on a real broker (whose transactional changelog batches are
// what the replay delimits): Spark's state reader option batchId. A batch
// not committed yet exits 3 (not found) with the latest readable batch;
// --batch without --partition, or with --state-dir, is a usage error.
func TestStateReadAtBatchCLI(t *testing.T) {
	cluster := kafkatest.Start(t, kafkatest.RequireReal())
	in := cluster.CreateTopic(t, "batch-in", 1)
	out := cluster.CreateTopic(t, "batch-out", 1)
	appID := kafkatest.Name(t, "batch-app")
	dir := t.TempDir()
	app, err := kstate.New(kstate.Topology[string, string, string]{
		Inputs:       kstate.Topics(serde.String(), in),
		KeySerde:     serde.String(),
		NewProcessor: testprocs.NewCounter,
		Output: kstate.Output[string, string]{
			Topic: out,
			Serde: serde.String(),
		},
	}, kstate.Options{
		ApplicationID: appID,
		Kafka: kstate.KafkaOptions{
			Brokers: cluster.Brokers(),
		},
		State: kstate.StateOptions{
			Dir: dir,
		},
		Batching: kstate.BatchingOptions{
			MaxWait: 50 * time.Millisecond,
		},
		Observability: kstate.ObservabilityOptions{
			Logger: testlog.New(t),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx) }()
	for i, k := range []string{"a", "a", "b"} { // batches 0, 1, 2
		cluster.Produce(t, in, kafkatest.Record{Key: []byte(k), Value: []byte("x")})
		cluster.ReadCommitted(t, out, i+1, time.Minute)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}

	src := []string{"--brokers", strings.Join(cluster.Brokers(), ","), "--app", appID, "-q"}
	read := func(a ...string) (string, string, int) {
		return cli(t, append(append([]string{"state", "read", "--var", "count"}, a...), src...)...)
	}
	for batch, want := range []string{"a=1", "a=2", "a=2 b=1"} {
		so, se, code := read("--partition", "0", "--batch", strconv.Itoa(batch))
		if code != exitOK {
			t.Fatalf("batch %d: code %d, stderr %s", batch, code, se)
		}
		var got []string
		for _, e := range lines[statereader.Entry](t, so) {
			got = append(got, e.Key+"="+string(e.Value))
		}
		if strings.Join(got, " ") != want {
			t.Fatalf("batch %d: %q, want %q", batch, strings.Join(got, " "), want)
		}
	}
	if _, se, code := read("--partition", "0", "--batch", "3"); code != exitNotFound ||
		!strings.Contains(se, "partition 0 batch 3 is not readable") || !strings.Contains(se, "last committed batch is 2") {
		t.Fatalf("batch 3: code %d, stderr %s", code, se)
	}
	if _, se, code := read("--batch", "0"); code != exitUsage || !strings.Contains(se, "--batch needs --partition") {
		t.Fatalf("--batch without --partition: code %d, stderr %s", code, se)
	}
	if _, se, code := cli(t, "state", "read", "--var", "count", "--app", appID, "--state-dir", dir, "--partition", "0", "--batch", "0"); code != exitUsage ||
		!strings.Contains(se, "give --brokers") {
		t.Fatalf("--batch with --state-dir: code %d, stderr %s", code, se)
	}
}
