package main

import (
	"context"
	"fmt"
	"iter"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/internal/kafka"
	"github.com/kstate/kstate/internal/murmur2"
	"github.com/kstate/kstate/internal/testprocs"
	"github.com/kstate/kstate/kafka/kafkatest"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/serde"
	"github.com/kstate/kstate/state"
	"github.com/kstate/kstate/statereader"
)

// rescaleT0 is the processing time the rescale test's clock starts at.
var rescaleT0 = time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC).UnixMilli()

// timedCounter is testprocs.Counter (a count, a list and a map per key)
// plus a TTL'd ValueState "last" (the key's last row, TTL index entries)
// and a timer at rescaleT0+1h registered on the key's first row, which
// emits "timer" when it fires.
type timedCounter struct {
	testprocs.Counter
	h    processor.Handle
	last state.ValueState[string]
}

func (c *timedCounter) Init(h processor.Handle) (err error) {
	c.h = h
	if err := c.Counter.Init(h); err != nil {
		return err
	}
	c.last, err = processor.NewValueState(h, "last", state.String(), state.WithTTL(24*time.Hour))
	return err
}

func (c *timedCounter) HandleInputRows(key string, rows iter.Seq[string], tv processor.TimerValues, out processor.Emitter[string]) error {
	if _, ok, err := c.last.Get(); err != nil {
		return err
	} else if !ok {
		if err := c.h.RegisterTimer(rescaleT0 + time.Hour.Milliseconds()); err != nil {
			return err
		}
	}
	all := slices.Collect(rows)
	if err := c.last.Update(all[len(all)-1]); err != nil {
		return err
	}
	return c.Counter.HandleInputRows(key, slices.Values(all), tv, out)
}

func (c *timedCounter) HandleExpiredTimer(_ string, _ processor.TimerValues, _ processor.ExpiredTimerInfo, out processor.Emitter[string]) error {
	return out.Emit("timer")
}

// TestRescale runs application A on 3 input partitions, stops it, grows the
// input to 5 partitions, rescales A's state to application B with `kstate
// state rescale`, runs B on 5 partitions with more input (keys that stay,
// keys that moved, new keys) and checks B's state (read from its changelog)
// and every output of A and B exactly against a model. Refused: A running,
// B existing, unprocessed input in the wrong partition.
func TestRescale(t *testing.T) {
	cluster := kafkatest.Start(t, kafkatest.RequireReal())
	in, out := cluster.CreateTopic(t, "rescale-in", 3), cluster.CreateTopic(t, "rescale-out", 5)
	appA, appB := kafkatest.Name(t, "rescale-a"), kafkatest.Name(t, "rescale-b")
	brokers := strings.Join(cluster.Brokers(), ",")
	clock := testprocs.NewClock(rescaleT0)
	cfg := func(app string) (kstate.Topology[string, string, string], kstate.Options) {
		return kstate.Topology[string, string, string]{
				Inputs:       kstate.Topics(serde.String(), in),
				KeySerde:     serde.String(),
				NewProcessor: func() processor.StatefulProcessor[string, string, string] { return &timedCounter{} },
				TimeMode:     processor.ProcessingTime,
				Output: kstate.Output[string, string]{
					Topic: out,
					Serde: serde.String(),
				},
			}, kstate.Options{
				ApplicationID: app,
				Kafka: kstate.KafkaOptions{
					Brokers:              cluster.Brokers(),
					LeaveGroupOnShutdown: true,
				},
				State: kstate.StateOptions{
					Dir: t.TempDir(),
				},
				Batching: kstate.BatchingOptions{
					MaxWait: 20 * time.Millisecond,
				},
				Observability: kstate.ObservabilityOptions{
					Clock: clock.Now,
				},
			}
	}
	adm, err := kafka.NewAdmin(cluster.Brokers())
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	// The model: rows per key, and the outputs "key:value" so far.
	count := map[string]int{}
	var want []string
	produced := 0
	produce := func(keys ...string) {
		t.Helper()
		var rs []kafkatest.Record
		for _, k := range keys {
			count[k]++
			want = append(want, fmt.Sprintf("%s:%d", k, count[k]))
			rs = append(rs, kafkatest.Record{Key: []byte(k), Value: []byte(fmt.Sprintf("v%d", produced))})
			produced++
		}
		cluster.Produce(t, in, rs...)
	}
	// run runs app until it has read rows input rows and out holds wantOut
	// records, calls inside while it runs, then stops it.
	run := func(app string, rows int64, before, inside func()) {
		t.Helper()
		a, err := kstate.New(cfg(app))
		if err != nil {
			t.Fatal(err)
		}
		rctx, rcancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- a.Run(rctx) }()
		if before != nil {
			before()
		}
		for a.Metrics().Total.RowsIn < rows {
			if ctx.Err() != nil {
				rcancel()
				t.Fatalf("%s: timed out waiting for %d rows (have %d)", app, rows, a.Metrics().Total.RowsIn)
			}
			time.Sleep(20 * time.Millisecond)
		}
		cluster.ReadCommitted(t, out, len(want), time.Minute)
		if inside != nil {
			inside()
		}
		rcancel()
		if err := <-done; err != nil {
			t.Fatalf("%s: Run: %v", app, err)
		}
	}
	outputs := func() []string {
		t.Helper()
		var got []string
		for _, r := range cluster.ReadCommitted(t, out, len(want), time.Minute) {
			got = append(got, string(r.Key)+":"+string(r.Value))
		}
		slices.Sort(got)
		return got
	}
	check := func(stage string) {
		t.Helper()
		got, w := outputs(), slices.Clone(want)
		slices.Sort(w)
		if !slices.Equal(got, w) {
			t.Fatalf("%s: outputs\n%q\nwant\n%q", stage, got, w)
		}
	}

	// Keys k00..k29: under 3 and 5 partitions, some stay in their
	// partition, some move to another old one, some to a new one.
	var keys []string
	moved, toNew := 0, 0
	for i := range 30 {
		k := fmt.Sprintf("k%02d", i)
		keys = append(keys, k)
		p3, p5 := murmur2.Partition([]byte(k), 3), murmur2.Partition([]byte(k), 5)
		if p3 != p5 {
			moved++
		}
		if p5 >= 3 {
			toNew++
		}
	}
	if moved == 0 || toNew == 0 || moved == len(keys) {
		t.Fatalf("key set does not exercise the rescale: %d moved, %d to new partitions", moved, toNew)
	}

	// A on 3 partitions: each key 1–3 rows. While it runs, a rescale is
	// refused.
	var rowsA []string
	for i, k := range keys {
		for range 1 + i%3 {
			rowsA = append(rowsA, k)
		}
	}
	run(appA, int64(len(rowsA)), func() { produce(rowsA...) }, func() {
		_, se, code := cli(t, "state", "rescale", "--brokers", brokers, "--app", appA, "--partitions", "5", "--to-app", appB)
		if code != exitRefused || !strings.Contains(se, "member") {
			t.Errorf("rescale of a running application: code %d, stderr %s", code, se)
		}
	})
	check("A")
	// Not yet more partitions: refused.
	if _, se, code := cli(t, "state", "rescale", "--brokers", brokers, "--app", appA, "--partitions", "5", "--to-app", appB); code != exitRefused || !strings.Contains(se, "has 3 partitions, not 5") {
		t.Errorf("rescale before adding partitions: code %d, stderr %s", code, se)
	}

	// Grow the input to 5 partitions.
	if _, err := adm.Kadm().UpdatePartitions(ctx, 5, in); err != nil {
		t.Fatal(err)
	}
	for {
		if n, err := adm.Partitions(ctx, in); err == nil && n == 5 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	committedA, err := adm.CommittedOffsets(ctx, appA, in)
	if err != nil {
		t.Fatal(err)
	}

	// Dry run: the plan, nothing written.
	so, se, code := cli(t, "state", "rescale", "--brokers", brokers, "--app", appA, "--partitions", "5", "--to-app", appB, "--dry-run")
	if code != exitOK || !strings.Contains(so, "dry run: nothing changed") || !strings.Contains(so, "partition 4:") {
		t.Fatalf("dry run: code %d\n%s%s", code, so, se)
	}
	t.Logf("dry run:\n%s", so)
	if _, err := adm.Partitions(ctx, appB+"-changelog"); err == nil {
		t.Fatal("dry run created B's changelog")
	}

	// A write that fails (B's changelog inherits A's max.message.bytes,
	// made too small for the batches here) commits nothing: the rescale
	// can simply be run again, on the empty changelog it left.
	alter := func(op kadm.IncrementalOp, v *string) {
		t.Helper()
		rs, err := adm.Kadm().AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: op, Name: "max.message.bytes", Value: v}}, appA+"-changelog")
		if err == nil {
			for _, r := range rs {
				err = r.Err
			}
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	alter(kadm.SetConfig, kadm.StringPtr("300")) // above a transaction marker's size, below the batches
	_, se, code = cli(t, "state", "rescale", "--brokers", brokers, "--app", appA, "--partitions", "5", "--to-app", appB)
	if code != exitError || !strings.Contains(se, "failed (nothing committed): run the rescale again") {
		t.Fatalf("rescale with a failing write: code %d, stderr %s", code, se)
	}
	if recs, err := kafka.ReadAll(ctx, cluster.Brokers(), appB+"-changelog"); err != nil || len(recs) > 0 {
		t.Fatalf("failed rescale: B's changelog holds %d committed records (%v)", len(recs), err)
	}
	if g, err := adm.Kadm().FetchOffsets(ctx, appB); err == nil && len(g) > 0 {
		t.Fatalf("failed rescale: B's offsets %v", g)
	}
	// B's changelog inherited the small limit: lift it there too.
	alter(kadm.DeleteConfig, nil)
	if _, err := adm.Kadm().AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.DeleteConfig, Name: "max.message.bytes"}}, appB+"-changelog"); err != nil {
		t.Fatal(err)
	}

	so, se, code = cli(t, "state", "rescale", "--brokers", brokers, "--app", appA, "--partitions", "5", "--to-app", appB)
	if code != exitOK || !strings.Contains(so, "rescale done") {
		t.Fatalf("rescale: code %d\n%s%s", code, so, se)
	}
	// B's offsets: A's where A had them, 0 for the new partitions.
	committedB, err := adm.CommittedOffsets(ctx, appB, in)
	if err != nil {
		t.Fatal(err)
	}
	for p := range int32(5) {
		w := int64(0)
		if p < 3 {
			w = committedA[p]
		}
		if committedB[p] != w {
			t.Errorf("B's committed offset of partition %d: %d, want %d (A's: %v)", p, committedB[p], w, committedA)
		}
	}
	// B's metadata: the largest batch id of A, A's modes, the input
	// offsets just committed, in every partition.
	readMeta := func(app string) statereader.Metadata {
		t.Helper()
		r, err := statereader.OpenChangelog(ctx, cluster.Brokers(), app)
		if err != nil {
			t.Fatal(err)
		}
		return r.Metadata()
	}
	var maxBatch int64 = -1
	mdA := readMeta(appA)
	for _, pm := range mdA.Partitions {
		if pm.BatchID != nil {
			maxBatch = max(maxBatch, *pm.BatchID)
		}
	}
	mdB := readMeta(appB)
	for _, pm := range mdB.Partitions {
		if pm.BatchID == nil || *pm.BatchID != maxBatch || pm.InputOffset == nil || *pm.InputOffset != committedB[pm.Partition] ||
			pm.TimeMode != mdA.Partitions[0].TimeMode || pm.OutputMode != mdA.Partitions[0].OutputMode {
			t.Errorf("B's partition %d metadata %+v: want batch id %d, input offset %d, modes of A %+v", pm.Partition, pm, maxBatch, committedB[pm.Partition], mdA.Partitions[0])
		}
	}
	if len(mdB.Variables) != len(mdA.Variables) || len(mdB.Variables) != 4 {
		t.Errorf("B's variables %+v, A's %+v", mdB.Variables, mdA.Variables)
	}

	// B exists now: refused.
	if _, se, code := cli(t, "state", "rescale", "--brokers", brokers, "--app", appA, "--partitions", "5", "--to-app", appB); code != exitRefused || !strings.Contains(se, "already exists") {
		t.Errorf("rescale to an existing application: code %d, stderr %s", code, se)
	}

	// B's state before it ran: every key's count, list, map, TTL'd value
	// and timer in partition murmur2(key) % 5.
	checkState := func(stage string, wantTimers bool) {
		t.Helper()
		r, err := statereader.OpenChangelog(ctx, cluster.Brokers(), appB)
		if err != nil {
			t.Fatal(err)
		}
		counts, err := r.Read("count", statereader.Query{})
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]int{}
		for _, e := range counts {
			if p := murmur2.Partition([]byte(e.Key), 5); e.Partition != p {
				t.Errorf("%s: key %q's count is in partition %d, want %d", stage, e.Key, e.Partition, p)
			}
			n, _ := strconv.Atoi(string(e.Value))
			got[e.Key] = n
		}
		if fmt.Sprint(got) != fmt.Sprint(count) {
			t.Errorf("%s: counts %v, want %v", stage, got, count)
		}
		for _, v := range []string{"seen", "per", "last"} {
			es, err := r.Read(v, statereader.Query{})
			if err != nil {
				t.Fatal(err)
			}
			n := map[string]int{}
			for _, e := range es {
				if p := murmur2.Partition([]byte(e.Key), 5); e.Partition != p {
					t.Errorf("%s: key %q's %s entry is in partition %d, want %d", stage, e.Key, v, e.Partition, p)
				}
				if v == "last" && e.ExpiryMs == nil {
					t.Errorf("%s: key %q's last has no expiry", stage, e.Key)
				}
				n[e.Key]++
			}
			if len(n) != len(count) {
				t.Errorf("%s: %s has entries for %d keys, want %d", stage, v, len(n), len(count))
			}
		}
		timers, err := r.Timers(statereader.Query{})
		if err != nil {
			t.Fatal(err)
		}
		if !wantTimers {
			if len(timers) != 0 {
				t.Errorf("%s: %d timers left, want none", stage, len(timers))
			}
			return
		}
		tk := map[string]bool{}
		for _, tm := range timers {
			if p := murmur2.Partition([]byte(tm.Key), 5); tm.Partition != p {
				t.Errorf("%s: key %q's timer is in partition %d, want %d", stage, tm.Key, tm.Partition, p)
			}
			if tm.ExpiryMs != rescaleT0+time.Hour.Milliseconds() {
				t.Errorf("%s: key %q's timer at %d", stage, tm.Key, tm.ExpiryMs)
			}
			tk[tm.Key] = true
		}
		if len(tk) != len(count) || len(timers) != len(count) {
			t.Errorf("%s: %d timers of %d keys, want one per key (%d)", stage, len(timers), len(tk), len(count))
		}
		md := r.Metadata()
		if len(md.Partitions) != 5 {
			t.Errorf("%s: B has %d partitions", stage, len(md.Partitions))
		}
	}
	checkState("after rescale", true)

	// B on 5 partitions: every old key again (moved or not) and new keys.
	rowsB := slices.Clone(keys)
	for i := range 10 {
		rowsB = append(rowsB, fmt.Sprintf("n%02d", i))
	}
	run(appB, int64(len(rowsB)), func() { produce(rowsB...) }, nil)
	check("B")
	checkState("B ran", true)

	// Past the timers: one more row per key fires every key's timer once.
	clock.Set(rescaleT0 + 2*time.Hour.Milliseconds())
	var all []string
	for k := range count {
		all = append(all, k)
	}
	slices.Sort(all)
	for _, k := range all {
		want = append(want, k+":timer")
	}
	run(appB, int64(len(all)), func() { produce(all...) }, nil)
	check("B after the timers")
	checkState("B after the timers", false)
}

// TestRescaleRefusesMisroutedInput: input that A has not processed and
// that lies in a partition its key does not map to among the new count
// makes the rescale refuse (exit 4), naming the way out.
func TestRescaleRefusesMisroutedInput(t *testing.T) {
	cluster := kafkatest.Start(t, kafkatest.RequireReal())
	in, out := cluster.CreateTopic(t, "rescale-mis-in", 3), cluster.CreateTopic(t, "rescale-mis-out", 3)
	appA := kafkatest.Name(t, "rescale-mis-a")
	brokers := strings.Join(cluster.Brokers(), ",")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	app, err := kstate.New(kstate.Topology[string, string, string]{
		Inputs:       kstate.Topics(serde.String(), in),
		KeySerde:     serde.String(),
		NewProcessor: testprocs.NewCounter,
		Output: kstate.Output[string, string]{
			Topic: out,
			Serde: serde.String(),
		},
	}, kstate.Options{
		ApplicationID: appA,
		Kafka: kstate.KafkaOptions{
			Brokers:              cluster.Brokers(),
			LeaveGroupOnShutdown: true,
		},
		State: kstate.StateOptions{
			Dir: t.TempDir(),
		},
		Batching: kstate.BatchingOptions{
			MaxWait: 20 * time.Millisecond,
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- app.Run(rctx) }()
	cluster.Produce(t, in, recs("a", "b", "c")...)
	cluster.ReadCommitted(t, out, 3, time.Minute)
	rcancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// A key whose partition differs between 3 and 5, produced while A is
	// stopped: A never processed it.
	var key string
	for i := 0; key == ""; i++ {
		k := fmt.Sprintf("m%d", i)
		if murmur2.Partition([]byte(k), 3) != murmur2.Partition([]byte(k), 5) {
			key = k
		}
	}
	cluster.Produce(t, in, recs(key)...)
	adm, err := kafka.NewAdmin(cluster.Brokers())
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	if _, err := adm.Kadm().UpdatePartitions(ctx, 5, in); err != nil {
		t.Fatal(err)
	}
	for {
		if n, err := adm.Partitions(ctx, in); err == nil && n == 5 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	appB := kafkatest.Name(t, "rescale-mis-b")
	_, se, code := cli(t, "state", "rescale", "--brokers", brokers, "--app", appA, "--partitions", "5", "--to-app", appB)
	if code != exitRefused || !strings.Contains(se, "1 unprocessed input record") || !strings.Contains(se, fmt.Sprintf("key %q", key)) || !strings.Contains(se, "run the application until") {
		t.Fatalf("misrouted input: code %d, stderr %s", code, se)
	}
	if _, err := adm.Partitions(ctx, appB+"-changelog"); err == nil {
		t.Fatal("refused rescale created B's changelog")
	}
}
