package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/kafka/embedded"
)

// The peer on the in-process Kafka: every input record gets one output
// with the key's running count and the input's send time, each count
// 1..n exactly once per key (what the harness's `load verify
// -exactly-once` checks), and a cancelled Run stops cleanly. The heavy
// workload's output is the same.
func TestCountPeerEmbedded(t *testing.T) { testPeerEmbedded(t, "count") }

func TestHeavyPeerEmbedded(t *testing.T) { testPeerEmbedded(t, "heavy") }

func testPeerEmbedded(t *testing.T, proc string) {
	e, err := embedded.Start(embedded.Options{Topics: map[string]int{"bench-in": 4, "bench-out": 4}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	const n, keys = 2000, 37
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.Brokers()...), kgo.DefaultProduceTopic("bench-in"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	want := map[string]int64{}
	sent := map[string][]int64{} // per key, the send times in order
	var recs []*kgo.Record
	for i := range n {
		k := fmt.Sprintf("k%05d", (i*7919)%keys)
		v := make([]byte, 100)
		binary.BigEndian.PutUint64(v, uint64(1_000_000+i))
		want[k]++
		sent[k] = append(sent[k], int64(1_000_000+i))
		recs = append(recs, &kgo.Record{Key: []byte(k), Value: v})
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	o, err := parseFlags([]string{"-brokers", strings.Join(e.Brokers(), ","), "-group", "peer-test", "-state", t.TempDir(),
		"-batch", "300", "-set", "Batching.MaxWait=20ms", "-set", "Timeouts.Shutdown=5s", "-compression", "none", "-processor", proc})
	if err != nil {
		t.Fatal(err)
	}
	top, opts, err := config(o, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if opts.Batching.MaxRecords != 300 || opts.Batching.MaxWait != 20*time.Millisecond || opts.Timeouts.Shutdown != 5*time.Second || len(opts.Kafka.ClientOptions) != 1 {
		t.Fatalf("flags not applied: batch %d, wait %v, shutdown %v, %d Kafka options", opts.Batching.MaxRecords, opts.Batching.MaxWait, opts.Timeouts.Shutdown, len(opts.Kafka.ClientOptions))
	}
	app, err := kstate.New(top, opts)
	if err != nil {
		t.Fatal(err)
	}
	actx, stop := context.WithCancel(ctx)
	runErr := make(chan error, 1)
	go func() { runErr <- app.Run(actx) }()

	rd, err := kgo.NewClient(kgo.SeedBrokers(e.Brokers()...), kgo.ConsumeTopics("bench-out"),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	seen := map[string][]int64{} // per key, the counts in arrival order
	got := 0
	for got < n {
		fs := rd.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("%d of %d outputs: %v", got, n, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if len(r.Value) != 16 {
				t.Fatalf("output value of %d bytes, want 16", len(r.Value))
			}
			k := string(r.Key)
			c := int64(binary.BigEndian.Uint64(r.Value))
			s := int64(binary.BigEndian.Uint64(r.Value[8:]))
			if c < 1 || c > int64(len(sent[k])) || sent[k][c-1] != s {
				t.Fatalf("key %s: count %d with send time %d does not match the input", k, c, s)
			}
			seen[k] = append(seen[k], c)
			got++
		})
	}
	for k, cs := range seen {
		for i, c := range cs {
			if c != int64(i+1) {
				t.Fatalf("key %s: counts %v, want 1..%d once each in order", k, cs, want[k])
			}
		}
		if int64(len(cs)) != want[k] {
			t.Fatalf("key %s: %d outputs, want %d", k, len(cs), want[k])
		}
	}
	stop()
	if err := <-runErr; err != nil {
		t.Fatalf("Run after cancel: %v", err)
	}
}

func TestSetField(t *testing.T) {
	var opts kstate.Options
	for _, s := range []string{"Batching.MaxRecords=20000", "Batching.MaxWait=50ms", "State.Backend=pebble", "Kafka.LeaveGroupOnShutdown=true", "State.Memory=0x1000"} {
		if err := setField(&opts, s); err != nil {
			t.Fatal(err)
		}
	}
	if opts.Batching.MaxRecords != 20000 || opts.Batching.MaxWait != 50*time.Millisecond || opts.State.Backend != "pebble" ||
		!opts.Kafka.LeaveGroupOnShutdown || opts.State.Memory != 4096 {
		t.Fatalf("fields not set: %+v", opts)
	}
	for _, bad := range []string{"Batching.MaxRecords", "NoSuchField=1", "Batching.MaxRecords=x", "Batching.MaxWait=5", "Kafka.Brokers=a",
		"Observability.Logger=x", "Batching=1", "MaxBatchRecords=1", "Batching.MaxRecords.X=1", "ApplicationID.X=a"} {
		if err := setField(&opts, bad); err == nil {
			t.Errorf("-set %q accepted", bad)
		}
	}
}

func TestCompressionFlag(t *testing.T) {
	o, err := parseFlags([]string{"-brokers", "b:1", "-group", "g", "-state", "s", "-compression", "brotli"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := config(o, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "-compression") {
		t.Fatalf("unknown codec: %v", err)
	}
}

func TestParseFlagsRequired(t *testing.T) {
	t.Setenv("BROKERS", "")
	t.Setenv("APP_ID", "")
	t.Setenv("STATE_DIR", "")
	if _, err := parseFlags([]string{"-group", "g", "-state", "s"}); err == nil || !strings.Contains(err.Error(), "-brokers") {
		t.Errorf("no brokers: %v", err)
	}
	t.Setenv("BROKERS", "b:1")
	t.Setenv("APP_ID", "app")
	t.Setenv("STATE_DIR", "/st")
	t.Setenv("TOPIC_IN", "in2")
	o, err := parseFlags(nil)
	if err != nil || o.brokers != "b:1" || o.group != "app" || o.state != "/st" || o.in != "in2" || o.out != "bench-out" {
		t.Errorf("from the harness's environment: %+v, %v", o, err)
	}
}
