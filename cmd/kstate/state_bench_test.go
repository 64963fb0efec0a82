package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kstate/kstate/changelog"
	"github.com/kstate/kstate/internal/changelogfmt"
	"github.com/kstate/kstate/internal/kafka"
	"github.com/kstate/kstate/kafka/kafkatest"
)

// TestStateReadSpeed measures `kstate state read` over a changelog of N keys
// (KSTATE_READER_BENCH=N, e.g. 1000000; skipped without it): it writes the
// changelog of a ValueState[int64] "count" over 4 partitions, then runs the
// command in-process with stdout discarded, and logs records/s
// (docs/benchmarks/history.md, "State reader").
func TestStateReadSpeed(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("KSTATE_READER_BENCH"))
	if n <= 0 {
		t.Skip("set KSTATE_READER_BENCH=N to measure kstate state read over N keys")
	}
	cluster := kafkatest.Start(t, kafkatest.RequireReal())
	app := kafkatest.Name(t, "reader-bench")
	topic := app + "-changelog"
	const parts = 4
	ctx := context.Background()
	adm, err := kafka.NewAdmin(cluster.Brokers())
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	if err := adm.EnsureTopic(ctx, kafka.TopicSpec{Name: topic, Partitions: parts, ReplicationFactor: -1, Compacted: true}); err != nil {
		t.Fatal(err)
	}
	prod, err := kafka.NewProducer(cluster.Brokers())
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	start := time.Now()
	var batch []kafka.Record
	for p := int32(0); p < parts; p++ {
		batch = append(batch, kafka.Record{Topic: topic, Partition: p, Key: changelogfmt.MetaKey("var/count"),
			Value: []byte(`{"id":1,"kind":"value","schema":"int64"}`)})
	}
	for i := 0; i < n; i++ {
		key := []byte(fmt.Sprintf("user-%08d", i))
		payload := binary.BigEndian.AppendUint64(nil, uint64(int64(i))^(1<<63))
		batch = append(batch, kafka.Record{Topic: topic, Partition: int32(i % parts),
			Key: changelogfmt.StateKey(1, key, nil), Value: changelogfmt.EncodeValue(changelog.Header{Expiry: changelog.NoExpiry}, payload)})
		if len(batch) >= 50_000 || i == n-1 {
			if err := prod.Produce(ctx, batch...); err != nil {
				t.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	t.Logf("wrote %d changelog records in %v", n+parts, time.Since(start).Round(time.Millisecond))

	var stderr strings.Builder
	start = time.Now()
	code := runCLI(ctx, []string{"state", "read", "--brokers", strings.Join(cluster.Brokers(), ","), "--app", app, "--var", "count"}, io.Discard, &stderr)
	el := time.Since(start)
	if code != exitOK {
		t.Fatalf("read: code %d: %s", code, stderr.String())
	}
	t.Logf("kstate state read --var count: %d keys in %v: %.0f records/s", n, el.Round(time.Millisecond), float64(n)/el.Seconds())
	t.Logf("progress line: %q", strings.TrimSpace(stderr.String()[max(0, strings.LastIndex(stderr.String(), "\r")):]))
}
