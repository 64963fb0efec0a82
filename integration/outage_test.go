package integration

import (
	"testing"
	"time"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/internal/kafka"
	"github.com/kstate/kstate/internal/testlog"
	"github.com/kstate/kstate/internal/testprocs"
	"github.com/kstate/kstate/kafka/kafkatest"
	"github.com/kstate/kstate/serde"
)

// TestLongOutageRestoresInFull, on a real broker whose cleaner really
// removes tombstones: instance A counts key "k" to 2 and stops, keeping
// its shard on disk; instance B (its own directory) deletes "k" and writes
// on until the cleaner has removed the tombstone, older than the
// changelog's delete.retention.ms (2 s here), with k's older values. A
// comes back: resumed from its shard's offset it would replay the records
// after it without the deletion and count "k" on from 2; its shard is older
// than the retention, so it restores in full and "k" starts again from 1
// (docs/OPERATIONS.md, "Long outages").
func TestLongOutageRestoresInFull(t *testing.T) {
	longTest(t)
	cluster := realKafka(t)
	brokers := cluster.Brokers()
	in := cluster.CreateTopic(t, "lo-in", 1)
	out := cluster.CreateTopic(t, "lo-out", 1)
	appID := kafkatest.Name(t, "lo-app")
	changelog := appID + "-changelog"
	createEagerlyCompacted(t, newAdmin(t, brokers), changelog, "2000")
	newApp := func(instance, dir string) *kstate.App[string, string, string] {
		return mustNew(t, testApp[string, string, string]{kstate.Topology[string, string, string]{
			Inputs:       kstate.Topics(serde.String(), in),
			KeySerde:     serde.String(),
			NewProcessor: testprocs.NewCounter, // "clear" deletes the key's state
			Output:       kstate.Output[string, string]{Topic: out, Serde: serde.String()},
		}, kstate.Options{
			ApplicationID: appID,
			InstanceID:    instance,
			Kafka:         kstate.KafkaOptions{Brokers: brokers},
			State:         kstate.StateOptions{Dir: dir},
			Batching:      kstate.BatchingOptions{MaxWait: 20 * time.Millisecond},
			Observability: kstate.ObservabilityOptions{Logger: testlog.New(t)},
		}})
	}
	rec := func(k, v string) kafkatest.Record { return kafkatest.Record{Key: []byte(k), Value: []byte(v)} }
	outputs := func(n int) []string {
		var vs []string
		for _, r := range cluster.ReadCommitted(t, out, n, time.Minute) {
			if string(r.Key) == "k" {
				vs = append(vs, string(r.Value))
			}
		}
		return vs
	}

	dirA := t.TempDir()
	stop := testprocs.Start(t, newApp("a", dirA))
	cluster.Produce(t, in, rec("k", "x"), rec("k", "x"))
	outputs(2)
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	stop = testprocs.Start(t, newApp("b", t.TempDir()))
	cluster.Produce(t, in, rec("k", "clear"))
	n := 3
	outputs(n)
	// B writes on, a batch per segment, until the cleaner has removed the
	// tombstones: the changelog then holds no record without a value.
	deadline := time.Now().Add(2 * time.Minute)
	for i := 0; ; i++ {
		cluster.Produce(t, in, rec("other", "x"))
		n++
		outputs(n)
		time.Sleep(150 * time.Millisecond)
		recs, err := kafka.ReadAll(t.Context(), brokers, changelog)
		if err != nil {
			t.Fatal(err)
		}
		tombstones := 0
		for _, r := range recs {
			if r.Value == nil {
				tombstones++
			}
		}
		if tombstones == 0 && i > 0 {
			t.Logf("the cleaner removed the tombstones after %d more batches", i+1)
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the tombstone still in the changelog after 2 minutes: the cleaner never removed it")
		}
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	stop = testprocs.Start(t, newApp("a", dirA))
	cluster.Produce(t, in, rec("k", "x"))
	got := outputs(n + 1)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if want := []string{"1", "2", "cleared", "1"}; len(got) != len(want) || got[len(got)-1] != "1" {
		t.Fatalf("outputs of k %v, want %v: the deleted count came back", got, want)
	}
}
