package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/internal/testprocs"
	"github.com/kstate/kstate/serde"
	"github.com/kstate/kstate/statereader"
)

// Several input topics (Topology.Inputs) on the real broker.

// jsonWord decodes {"word": "..."} into the counter's input row.
type jsonWord struct{}

func (jsonWord) Deserialize(b []byte) (string, error) {
	var m struct{ Word *string }
	if err := json.Unmarshal(b, &m); err != nil || m.Word == nil {
		return "", fmt.Errorf("not a {\"word\": ...} object: %q", b)
	}
	return *m.Word, nil
}

// inputsEnv is a specEnv with a second input topic of the same partition
// count, written as JSON (the first is plain strings).
type inputsEnv struct {
	specEnv
	in2 string
}

func newInputsEnv(t *testing.T, parts int) inputsEnv {
	e := inputsEnv{specEnv: newSpecEnv(t, parts)}
	e.in2 = e.app + "-in2"
	newTopic(t, e.brokers, e.in2, parts)
	return e
}

func (e inputsEnv) config(t *testing.T) testApp[string, string, string] {
	cfg := e.specEnv.config(t, testprocs.NewCounter)
	cfg.Inputs = []kstate.Input[string]{
		{Topic: e.in, ValueSerde: serde.String()},
		{Topic: e.in2, ValueSerde: jsonWord{}},
	}
	return cfg
}

// produceJSON writes key={"word": value} records to topic.
func produceJSON(t *testing.T, brokers []string, topic string, kvs ...string) {
	t.Helper()
	out := make([]string, len(kvs))
	for i, kv := range kvs {
		k, v, _ := strings.Cut(kv, "=")
		b, _ := json.Marshal(map[string]string{"word": v})
		out[i] = k + "=" + string(b)
	}
	testprocs.Produce(t, brokers, topic, out...)
}

// Two input topics with different codecs (plain strings and JSON) feed one
// counter: every key's outputs are exactly 1..n over both topics, through
// a second instance joining (an eager range rebalance: every partition
// moves or is restored) and a restart. Then a bounded run over both
// topics stops with the group's committed offsets at both topics' ends.
func TestInputsTwoCodecsOneCounter(t *testing.T) {
	const parts = 3
	e := newInputsEnv(t, parts)
	cfg := e.config(t)
	app1 := newSpecApp(t, cfg)
	stop1 := testprocs.Start(t, app1)

	sent := 0
	keys := map[string]bool{}
	round := func(r int) {
		var plain, js []string
		for k := range 6 {
			key := fmt.Sprintf("k%d", k)
			keys[key] = true
			plain = append(plain, fmt.Sprintf("%s=p%d", key, r))
			js = append(js, fmt.Sprintf("%s=j%d", key, r), fmt.Sprintf("%s=j%d", key, r))
		}
		testprocs.Produce(t, e.brokers, e.in, plain...)
		produceJSON(t, e.brokers, e.in2, js...)
		sent += len(plain) + len(js)
	}
	round(0)
	got := testprocs.WaitOutputs(t, e.brokers, e.out, sent, waitOut)
	checkCounts(t, got, sent, len(keys))

	cfg2 := cfg
	cfg2.InstanceID = "i2"
	cfg2.State.Dir = t.TempDir()
	app2 := newSpecApp(t, cfg2)
	stop2 := testprocs.Start(t, app2)
	// Instance 1 may process a round before the rebalance moves anything
	// to instance 2: wait until instance 2 owns a partition, ready.
	testprocs.Eventually(t, waitOut, "instance 2 owns a ready partition", func() bool {
		for _, p := range app2.Status().Partitions {
			if !p.Restoring {
				return true
			}
		}
		return false
	})
	round(1)
	round(2)
	got = testprocs.WaitOutputs(t, e.brokers, e.out, sent, waitOut)
	checkCounts(t, got, sent, len(keys))
	// The range assignment gave each instance partition p of both topics.
	if in1, in2 := app1.Metrics().Total.RowsIn, app2.Metrics().Total.RowsIn; in2 == 0 || in1 == 0 {
		t.Fatalf("rows in: instance 1 %d, instance 2 %d: want both to process", in1, in2)
	}
	for _, stop := range []func() error{stop1, stop2} {
		if err := stop(); err != nil {
			t.Fatalf("Run: %v", err)
		}
	}

	// Restart one instance (shards on disk), then a bounded run over
	// what the other one left.
	round(3)
	app3 := newSpecApp(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := app3.RunToEnd(ctx); err != nil {
		t.Fatalf("RunToEnd: %v", err)
	}
	got = testprocs.WaitOutputs(t, e.brokers, e.out, sent, waitOut)
	checkCounts(t, got, sent, len(keys))
	ends := map[string]map[int32]int64{}
	for _, topic := range []string{e.in, e.in2} {
		committed, end := offsetsAtEnd(t, e.brokers, e.app, topic)
		if !maps.Equal(committed, end) || len(end) != parts {
			t.Fatalf("topic %s: committed offsets %v, end offsets %v", topic, committed, end)
		}
		ends[topic] = end
	}
	// The state reader shows both topics' input offsets per partition:
	// the first topic's in InputOffset, the second's in InputOffsets.
	r, err := statereader.OpenChangelog(ctx, e.brokers, e.app)
	if err != nil {
		t.Fatal(err)
	}
	for _, pm := range r.Metadata().Partitions {
		if pm.InputOffset == nil || *pm.InputOffset != ends[e.in][pm.Partition] || pm.InputOffsets[e.in2] != ends[e.in2][pm.Partition] {
			t.Fatalf("partition %d metadata: input offset %v, further %v; want %d and %s=%d",
				pm.Partition, pm.InputOffset, pm.InputOffsets, ends[e.in][pm.Partition], e.in2, ends[e.in2][pm.Partition])
		}
	}
	t.Logf("%d records of two topics (plain and JSON) counted exactly once over %d keys", sent, len(keys))
}

// A second input topic with another partition count is a start-up error
// naming both topics and both counts.
func TestInputsPartitionMismatch(t *testing.T) {
	t.Parallel()
	e := newSpecEnv(t, 3)
	other := e.app + "-other"
	newTopic(t, e.brokers, other, 2)
	cfg := e.config(t, testprocs.NewCounter)
	cfg.Inputs = kstate.Topics(serde.String(), e.in, other)
	app := newSpecApp(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := app.Run(ctx)
	var ip *kstate.InputPartitionsError
	if !errors.As(err, &ip) || ip.Topic != e.in || ip.Partitions != 3 || ip.Other != other || ip.OtherPartitions != 2 {
		t.Fatalf("Run: %v, want an InputPartitionsError %s=3 %s=2", err, e.in, other)
	}
	for _, s := range []string{e.in, other, "(3 partitions)", "(2 partitions)"} {
		if !strings.Contains(err.Error(), s) {
			t.Fatalf("error %q does not name %q", err, s)
		}
	}
	t.Logf("start-up error: %v", err)
}
