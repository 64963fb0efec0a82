package main

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/kafka/kafkatest"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/serde"
	"github.com/kstate/kstate/state"
	"github.com/kstate/kstate/statereader"
)

// counterA counts rows per key in a ValueState[int64] "count" and emits
// "key=count".
type counterA struct {
	processor.Defaults[string, string]
	count state.ValueState[int64]
}

func (c *counterA) Init(h processor.Handle) (err error) {
	c.count, err = processor.NewValueState(h, "count", state.Int64())
	return err
}

func (c *counterA) HandleInputRows(key string, rows iter.Seq[string], _ processor.TimerValues, out processor.Emitter[string]) error {
	n, _, err := c.count.Get()
	if err != nil {
		return err
	}
	for range rows {
		n++
	}
	if err := c.count.Update(n); err != nil {
		return err
	}
	return out.Emit(fmt.Sprintf("%s=%d", key, n))
}

// counterB is the new logic: the count moves into a JSON struct "tally"
// with the key's row count and the last row, and the output names both.
type tally struct {
	N    int64  `json:"n"`
	Last string `json:"last"`
}

type counterB struct {
	processor.Defaults[string, string]
	tally state.ValueState[tally]
}

func (c *counterB) Init(h processor.Handle) (err error) {
	c.tally, err = processor.NewValueState(h, "tally", state.JSON[tally]())
	return err
}

// HandleInitialState takes the old application's count.
func (c *counterB) HandleInitialState(_ string, n int64, _ processor.TimerValues) error {
	return c.tally.Update(tally{N: n, Last: "(migrated)"})
}

func (c *counterB) HandleInputRows(key string, rows iter.Seq[string], _ processor.TimerValues, out processor.Emitter[string]) error {
	t, _, err := c.tally.Get()
	if err != nil {
		return err
	}
	prev := t.Last
	for r := range rows {
		t.N++
		t.Last = r
	}
	if err := c.tally.Update(t); err != nil {
		return err
	}
	return out.Emit(fmt.Sprintf("%s n=%d after %s", key, t.N, prev))
}

func runApp(t *testing.T, top kstate.Topology[string, string, string], opts kstate.Options, cluster *kafkatest.Cluster, in string, out string, recs []kafkatest.Record, want int) []string {
	t.Helper()
	app, err := kstate.New(top, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx) }()
	cluster.Produce(t, in, recs...)
	deadline := time.Now().Add(2 * time.Minute)
	for app.Metrics().Total.RowsIn < int64(len(recs)) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: timed out waiting for %d rows processed", opts.ApplicationID, len(recs))
		}
		time.Sleep(20 * time.Millisecond)
	}
	got := cluster.ReadCommitted(t, out, want, time.Minute)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run of %s: %v", opts.ApplicationID, err)
	}
	var vals []string
	for _, r := range got {
		vals = append(vals, string(r.Value))
	}
	slices.Sort(vals)
	return vals
}

func recs(keys ...string) []kafkatest.Record {
	var out []kafkatest.Record
	for i, k := range keys {
		out = append(out, kafkatest.Record{Key: []byte(k), Value: []byte(fmt.Sprintf("r%d", i))})
	}
	return out
}

// TestExportToInitialState walks the migration: application A builds
// state; `kstate state export` writes it; application B (a new application
// id, new state layout and logic) starts from it with
// kstate.InitialStateFromJSONL, and its outputs continue A's counts.
func TestExportToInitialState(t *testing.T) {
	cluster := kafkatest.Start(t, kafkatest.RequireReal())
	inA, outA := cluster.CreateTopic(t, "mig-in-a", 3), cluster.CreateTopic(t, "mig-out-a", 3)
	appA := kafkatest.Name(t, "mig-a")
	gotA := runApp(t, kstate.Topology[string, string, string]{
		Inputs:       kstate.Topics(serde.String(), inA),
		KeySerde:     serde.String(),
		NewProcessor: func() processor.StatefulProcessor[string, string, string] { return &counterA{} },
		Output: kstate.Output[string, string]{
			Topic: outA,
			Serde: serde.String(),
		},
	}, kstate.Options{
		ApplicationID: appA,
		Kafka: kstate.KafkaOptions{
			Brokers: cluster.Brokers(),
		},
		State: kstate.StateOptions{
			Dir: t.TempDir(),
		},
		Batching: kstate.BatchingOptions{
			MaxWait: 20 * time.Millisecond,
		},
	}, cluster, inA, outA, recs("a", "b", "a", "c", "a", "b"), 1)
	if len(gotA) == 0 {
		t.Fatal("A wrote nothing")
	}

	file := filepath.Join(t.TempDir(), "a.jsonl")
	if _, se, code := cli(t, "state", "export", "--brokers", strings.Join(cluster.Brokers(), ","), "--app", appA, "--out", file); code != exitOK {
		t.Fatalf("export: code %d: %s", code, se)
	}

	inB, outB := cluster.CreateTopic(t, "mig-in-b", 3), cluster.CreateTopic(t, "mig-out-b", 3)
	decode := func(e statereader.Entry) (string, int64, bool, error) {
		if e.Variable != "count" {
			return "", 0, false, nil
		}
		var n int64
		err := json.Unmarshal(e.Value, &n)
		return e.Key, n, true, err
	}
	gotB := runApp(t, kstate.Topology[string, string, string]{
		Inputs:       kstate.Topics(serde.String(), inB),
		KeySerde:     serde.String(),
		NewProcessor: func() processor.StatefulProcessor[string, string, string] { return &counterB{} },
		InitialState: kstate.InitialStateFromJSONL(file, decode),
		Output: kstate.Output[string, string]{
			Topic: outB,
			Serde: serde.String(),
		},
	}, kstate.Options{
		ApplicationID: kafkatest.Name(t, "mig-b"),
		Kafka: kstate.KafkaOptions{
			Brokers: cluster.Brokers(),
		},
		State: kstate.StateOptions{
			Dir: t.TempDir(),
		},
		Batching: kstate.BatchingOptions{
			MaxWait: 20 * time.Millisecond,
		},
	}, cluster, inB, outB, recs("a", "c", "d"), 3)
	want := []string{"a n=4 after (migrated)", "c n=2 after (migrated)", "d n=1 after "}
	if !slices.Equal(gotB, want) {
		t.Fatalf("B's outputs %q, want %q", gotB, want)
	}
}

// timerMs is the timer every key of timedA registers: far in the future,
// so that it never fires during the test.
var timerMs = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()

// timedA counts rows per key and registers one timer per key.
type timedA struct {
	counterA
	h processor.Handle
}

func (c *timedA) Init(h processor.Handle) error { c.h = h; return c.counterA.Init(h) }

func (c *timedA) HandleInputRows(key string, rows iter.Seq[string], tv processor.TimerValues, out processor.Emitter[string]) error {
	if err := c.h.RegisterTimer(timerMs + int64(len(key))); err != nil {
		return err
	}
	return c.counterA.HandleInputRows(key, rows, tv, out)
}

func (c *timedA) HandleExpiredTimer(string, processor.TimerValues, processor.ExpiredTimerInfo, processor.Emitter[string]) error {
	return nil
}

// migrated is one exported line for timedB: a count or a timer.
type migrated struct {
	count   int64
	timerMs int64 // > 0: a timer line
}

// timedB takes timedA's counts and timers from an export.
type timedB struct {
	counterA
	h processor.Handle
}

func (c *timedB) Init(h processor.Handle) error { c.h = h; return c.counterA.Init(h) }

func (c *timedB) HandleInitialState(_ string, m migrated, _ processor.TimerValues) error {
	if m.timerMs > 0 {
		return c.h.RegisterTimer(m.timerMs)
	}
	return c.count.Update(m.count)
}

func (c *timedB) HandleExpiredTimer(string, processor.TimerValues, processor.ExpiredTimerInfo, processor.Emitter[string]) error {
	return nil
}

// TestExportTimersToInitialState: `kstate state export` writes the timers
// too ("kind":"timer" lines), and a new application's HandleInitialState
// registers them again from kstate.InitialStateFromJSONL: B has A's timers.
func TestExportTimersToInitialState(t *testing.T) {
	cluster := kafkatest.Start(t, kafkatest.RequireReal())
	inA, outA := cluster.CreateTopic(t, "mig-t-in-a", 1), cluster.CreateTopic(t, "mig-t-out-a", 1)
	appA := kafkatest.Name(t, "mig-t-a")
	base := func(app, in, out string, newProc func() processor.StatefulProcessor[string, string, string]) (kstate.Topology[string, string, string], kstate.Options) {
		return kstate.Topology[string, string, string]{
				Inputs:       kstate.Topics(serde.String(), in),
				KeySerde:     serde.String(),
				NewProcessor: newProc,
				TimeMode:     processor.ProcessingTime,
				Output: kstate.Output[string, string]{
					Topic: out,
					Serde: serde.String(),
				},
			}, kstate.Options{
				ApplicationID: app,
				Kafka: kstate.KafkaOptions{
					Brokers: cluster.Brokers(),
				},
				State: kstate.StateOptions{
					Dir: t.TempDir(),
				},
				Batching: kstate.BatchingOptions{
					MaxWait: 20 * time.Millisecond,
				},
			}
	}
	topA, optsA := base(appA, inA, outA, func() processor.StatefulProcessor[string, string, string] { return &timedA{} })
	runApp(t, topA, optsA, cluster, inA, outA, recs("a", "bb", "a"), 2)

	file := filepath.Join(t.TempDir(), "a.jsonl")
	if _, se, code := cli(t, "state", "export", "-q", "--brokers", strings.Join(cluster.Brokers(), ","), "--app", appA, "--out", file); code != exitOK {
		t.Fatalf("export: code %d: %s", code, se)
	}

	inB, outB := cluster.CreateTopic(t, "mig-t-in-b", 1), cluster.CreateTopic(t, "mig-t-out-b", 1)
	appB := kafkatest.Name(t, "mig-t-b")
	decode := func(e statereader.Entry) (string, migrated, bool, error) {
		var m migrated
		switch {
		case e.Kind == "timer":
			err := json.Unmarshal(e.Value, &m.timerMs)
			return e.Key, m, true, err
		case e.Variable == "count":
			err := json.Unmarshal(e.Value, &m.count)
			return e.Key, m, true, err
		}
		return "", m, false, nil
	}
	cfgB, optsB := base(appB, inB, outB, func() processor.StatefulProcessor[string, string, string] { return &timedB{} })
	cfgB.InitialState = kstate.InitialStateFromJSONL(file, decode)
	gotB := runApp(t, cfgB, optsB, cluster, inB, outB, recs("a"), 1)
	if want := []string{"a=3"}; !slices.Equal(gotB, want) {
		t.Fatalf("B's outputs %q, want %q", gotB, want)
	}
	so, se, code := cli(t, "state", "timers", "-q", "--brokers", strings.Join(cluster.Brokers(), ","), "--app", appB)
	if code != exitOK {
		t.Fatalf("timers of B: code %d: %s", code, se)
	}
	var got []string
	for _, tm := range lines[statereader.Timer](t, so) {
		got = append(got, fmt.Sprintf("%s@%d", tm.Key, tm.ExpiryMs-timerMs))
	}
	if want := []string{"a@1", "bb@2"}; !slices.Equal(got, want) {
		t.Fatalf("B's timers %q, want %q (A's, restored from the export)", got, want)
	}
}
