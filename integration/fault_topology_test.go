package integration

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"testing"
	"time"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/internal/kafka"
	"github.com/kstate/kstate/internal/testprocs"
	"github.com/kstate/kstate/serde"
)

// Topology faults on the real broker: the input topic's partition count
// changes (while running, and while stopped), and the changelog topic is
// deleted (while running, and while stopped). The counter's outputs must
// stay exact: every key's counts are 1, 2, 3, ... with no restart at 1
// and no gap.

// round produces one row for each of keys k0..k(n-1).
func round(t *testing.T, e specEnv, n int) {
	t.Helper()
	kvs := make([]string, n)
	for i := range kvs {
		kvs[i] = fmt.Sprintf("k%d=x", i)
	}
	testprocs.Produce(t, e.brokers, e.in, kvs...)
}

// wantCounts checks that every key k0..k(keys-1) has the outputs 1..rounds.
func wantCounts(t *testing.T, got testprocs.Outputs, keys, rounds int) {
	t.Helper()
	want := testprocs.Outputs{}
	for k := range keys {
		for r := 1; r <= rounds; r++ {
			key := fmt.Sprintf("k%d", k)
			want[key] = append(want[key], strconv.Itoa(r))
		}
	}
	if got.String() != want.String() {
		t.Fatalf("outputs\n got %s\nwant %s", got, want)
	}
}

func committed(t *testing.T, e specEnv, group string) map[int32]int64 {
	t.Helper()
	adm, err := kafka.NewAdmin(e.brokers)
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	offs, err := adm.CommittedOffsets(ctx, group, e.in)
	if err != nil {
		t.Fatal(err)
	}
	return offs
}

func addPartitions(t *testing.T, e specEnv, add int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm := newAdmin(t, e.brokers)
	td, err := adm.ListTopics(ctx, e.in)
	if err != nil || td[e.in].Err != nil {
		t.Fatalf("describe %s: %v %v", e.in, err, td[e.in].Err)
	}
	want := len(td[e.in].Partitions) + add
	resp, err := adm.CreatePartitions(ctx, add, e.in)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatalf("add %d partitions to %s: %v", add, e.in, err)
	}
	// The broker's metadata learns of the new partitions after
	// CreatePartitions returns: a producer started before it does keys on
	// the old count (seen under make test's load: key/partition mismatch
	// warnings, counts off). Wait until the metadata has every new
	// partition with a leader.
	for {
		td, err := adm.ListTopics(ctx, e.in)
		if err == nil && td[e.in].Err == nil && len(td[e.in].Partitions) == want {
			led := true
			for _, p := range td[e.in].Partitions {
				led = led && p.Leader >= 0
			}
			if led {
				return
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("%s: waited for %d partitions with leaders in the metadata: %v", e.in, want, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func deleteTopic(t *testing.T, brokers []string, topic string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := newAdmin(t, brokers).DeleteTopics(ctx, topic)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatalf("delete topic %s: %v", topic, err)
	}
	// Deletion is asynchronous: wait until the topic is gone.
	adm, err := kafka.NewAdmin(brokers)
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	testprocs.Eventually(t, 30*time.Second, "topic "+topic+" deleted", func() bool {
		_, err := adm.Partitions(ctx, topic)
		return errors.Is(err, kafka.ErrTopicNotFound)
	})
}

func wantPartitionsChanged(t *testing.T, err error, old, new int) {
	t.Helper()
	var pc *kstate.PartitionsChangedError
	if !errors.As(err, &pc) || pc.Old != old || pc.New != new {
		t.Fatalf("Run returned %v; want a PartitionsChangedError %d → %d", err, old, new)
	}
	t.Logf("Run: %v", err)
}

// migrate is the documented procedure (README, "Changing the number of
// input partitions") after application e.app stopped with a
// PartitionsChangedError:
//  1. export its state: for a counter, the last output per key;
//  2. kstate.SetInputOffsets: the new application id continues from the
//     old group's committed offsets on the old partitions and from the log
//     start on the new ones;
//  3. start the new application with the export as Topology.InitialState.
func migrate(t *testing.T, e specEnv, parts int) (specEnv, func() error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := testprocs.Read(ctx, e.brokers, e.out)
	if err != nil {
		t.Fatal(err)
	}
	export := map[string]int64{}
	for k, vs := range out {
		n, err := strconv.ParseInt(vs[len(vs)-1], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		export[k] = n
	}
	old := committed(t, e, e.app)
	b := e
	b.app = e.app + "-b"
	start := map[int32]int64{}
	for p := range int32(parts) {
		start[p] = old[p] // absent (never committed): 0, the log start
	}
	cfg := b.config(t, testprocs.NewCounter)
	if err := kstate.SetInputOffsets(ctx, cfg.Topology, cfg.Options, start); err != nil {
		t.Fatal(err)
	}
	t.Logf("migrating %d keys from %s to %s at offsets %v", len(export), e.app, b.app, start)
	cfg.InitialState = kstate.InitialStateFromSeq(maps.All(export))
	return b, testprocs.Start(t, newSpecApp(t, cfg))
}

// The input topic grows from 3 to 5 partitions while the application
// runs: Run returns a PartitionsChangedError and commits nothing more;
// the documented procedure then continues the counts exactly.
func TestTopologyPartitionsIncreaseWhileRunning(t *testing.T) {
	// Not parallel (main_test.go): the rounds produced right after the
	// partitions are added must see the new count; beside the parallel
	// tests a producer's metadata still had the old one once (key/partition
	// mismatch warnings, counts off).
	const keys = 10
	e := newSpecEnv(t, 3)
	cfg := e.config(t, testprocs.NewCounter)
	cfg.Kafka.MetadataRefresh = 200 * time.Millisecond
	_, done := testprocs.StartWatch(t, newSpecApp(t, cfg))
	round(t, e, keys)
	testprocs.WaitOutputs(t, e.brokers, e.out, keys, waitOut)
	before := committed(t, e, e.app)

	addPartitions(t, e, 2)
	select {
	case err := <-done:
		wantPartitionsChanged(t, err, 3, 5)
	case <-time.After(waitOut):
		t.Fatal("Run did not notice the new partitions")
	}
	if after := committed(t, e, e.app); !maps.Equal(before, after) {
		t.Fatalf("committed offsets moved after the change: %v → %v", before, after)
	}
	// Input written on the new layout while no application runs.
	round(t, e, keys)

	_, stop := migrate(t, e, 5)
	round(t, e, keys)
	wantCounts(t, testprocs.WaitOutputs(t, e.brokers, e.out, 3*keys, waitOut), keys, 3)
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// The input topic grew while the application was stopped: the restart
// fails at once (the changelog keeps the old count), before processing.
func TestTopologyPartitionsIncreaseAtStart(t *testing.T) {
	// Not parallel (main_test.go): the rounds produced right after the
	// partitions are added must see the new count; beside the parallel
	// tests a producer's metadata still had the old one once (key/partition
	// mismatch warnings, counts off).
	const keys = 10
	e := newSpecEnv(t, 3)
	cfg := e.config(t, testprocs.NewCounter)
	stop := testprocs.Start(t, newSpecApp(t, cfg))
	round(t, e, keys)
	testprocs.WaitOutputs(t, e.brokers, e.out, keys, waitOut)
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}

	addPartitions(t, e, 2)
	round(t, e, keys)
	ctx, cancel := context.WithTimeout(context.Background(), waitOut)
	defer cancel()
	wantPartitionsChanged(t, newSpecApp(t, cfg).Run(ctx), 3, 5)

	_, stop = migrate(t, e, 5)
	round(t, e, keys)
	wantCounts(t, testprocs.WaitOutputs(t, e.brokers, e.out, 3*keys, waitOut), keys, 3)
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// The changelog topic is deleted while the application runs: a batch
// fails and Run stops; the restart on the same state directory re-seeds
// the changelog from the shards (consistent with the committed offsets)
// and the counts continue exactly; a later restart on an empty state
// directory restores from the re-seeded changelog.
func TestTopologyChangelogDeletedWhileRunning(t *testing.T) {
	t.Parallel()
	const keys = 10
	e := newSpecEnv(t, 3)
	cfg := e.config(t, testprocs.NewCounter)
	app := newSpecApp(t, cfg)
	_, done := testprocs.StartWatch(t, app)
	round(t, e, keys)
	testprocs.WaitOutputs(t, e.brokers, e.out, keys, waitOut)

	deleteTopic(t, e.brokers, app.ChangelogTopic())
	round(t, e, keys)
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("Run returned nil after its changelog was deleted")
		}
		t.Logf("Run: %v", err)
	case <-time.After(2 * waitOut):
		t.Fatal("Run did not fail after its changelog was deleted")
	}

	stop := testprocs.Start(t, newSpecApp(t, cfg))
	round(t, e, keys)
	wantCounts(t, testprocs.WaitOutputs(t, e.brokers, e.out, 3*keys, waitOut), keys, 3)
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	restartOnEmptyDir(t, e, cfg, keys, 4)
}

// The changelog topic is deleted while the application is stopped: the
// restart re-seeds it from the shards; nothing is wiped.
func TestTopologyChangelogDeletedBeforeRestart(t *testing.T) {
	t.Parallel()
	const keys = 10
	e := newSpecEnv(t, 3)
	cfg := e.config(t, testprocs.NewCounter)
	app := newSpecApp(t, cfg)
	stop := testprocs.Start(t, app)
	round(t, e, keys)
	round(t, e, keys)
	testprocs.WaitOutputs(t, e.brokers, e.out, 2*keys, waitOut)
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}

	deleteTopic(t, e.brokers, app.ChangelogTopic())
	stop = testprocs.Start(t, newSpecApp(t, cfg))
	round(t, e, keys)
	wantCounts(t, testprocs.WaitOutputs(t, e.brokers, e.out, 3*keys, waitOut), keys, 3)
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	restartOnEmptyDir(t, e, cfg, keys, 4)
}

// restartOnEmptyDir proves the changelog holds the whole state: a run on
// an empty state directory continues the counts to round.
func restartOnEmptyDir(t *testing.T, e specEnv, cfg testApp[string, string, string], keys, rounds int) {
	t.Helper()
	cfg.State.Dir = t.TempDir()
	stop := testprocs.Start(t, newSpecApp(t, cfg))
	round(t, e, keys)
	wantCounts(t, testprocs.WaitOutputs(t, e.brokers, e.out, rounds*keys, waitOut), keys, rounds)
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// A poison record stops Run with a DecodeError (Fail policy); with the
// application stopped, SetInputOffsets moves the partition past it and
// records the same input offset in the changelog, so the restart's
// consistency check accepts it: the other records are counted exactly,
// and the poison record never. (Here nothing uncommitted precedes the
// poison record; in general moving the offset skips every such record, and
// kstate.SkipRecord is the way to skip one: fault_skip_test.go.)
func TestTopologySkipPoisonRecord(t *testing.T) {
	t.Parallel()
	e := newSpecEnv(t, 1)
	cfg := e.config(t, testprocs.NewCounter)
	cfg.Inputs[0].ValueSerde = serde.DeserializerFunc[string](func(b []byte) (string, error) {
		if string(b) == "poison" {
			return "", errors.New("poison value")
		}
		return string(b), nil
	})
	stop, done := testprocs.StartWatch(t, newSpecApp(t, cfg))
	testprocs.Produce(t, e.brokers, e.in, "a=x", "b=x")
	testprocs.WaitOutputs(t, e.brokers, e.out, 2, waitOut)
	testprocs.Produce(t, e.brokers, e.in, "a=poison", "a=x", "b=x")
	var de *kstate.DecodeError
	select {
	case err := <-done:
		if !errors.As(err, &de) || de.Partition != 0 || de.Offset != 2 {
			t.Fatalf("Run returned %v; want a DecodeError at partition 0 offset 2", err)
		}
		t.Logf("Run: %v", err)
	case <-time.After(waitOut):
		t.Fatal("Run did not stop on the poison record")
	}
	stop()

	ctx, cancel := context.WithTimeout(context.Background(), waitOut)
	defer cancel()
	if err := kstate.SetInputOffsets(ctx, cfg.Topology, cfg.Options, map[int32]int64{de.Partition: de.Offset + 1}); err != nil {
		t.Fatal(err)
	}
	if got := committed(t, e, e.app); got[0] != 3 {
		t.Fatalf("committed offsets %v, want partition 0 at 3", got)
	}
	stop = testprocs.Start(t, newSpecApp(t, cfg))
	testprocs.Produce(t, e.brokers, e.in, "a=x")
	wantOutputs(t, testprocs.WaitOutputs(t, e.brokers, e.out, 5, waitOut), "a=[1 2 3] b=[1 2]")
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	// The same on an empty state directory: the changelog agrees too.
	restartOnEmptyDirSkip(t, e, cfg)
}

func restartOnEmptyDirSkip(t *testing.T, e specEnv, cfg testApp[string, string, string]) {
	t.Helper()
	cfg.State.Dir = t.TempDir()
	stop := testprocs.Start(t, newSpecApp(t, cfg))
	testprocs.Produce(t, e.brokers, e.in, "b=x")
	wantOutputs(t, testprocs.WaitOutputs(t, e.brokers, e.out, 6, waitOut), "a=[1 2 3] b=[1 2 3]")
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
}
