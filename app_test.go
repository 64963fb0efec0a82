package kstate_test

import (
	"errors"
	"fmt"
	"iter"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/changelog"
	"github.com/kstate/kstate/internal/shard"
	"github.com/kstate/kstate/internal/testlog"
	"github.com/kstate/kstate/internal/testprocs"
	"github.com/kstate/kstate/kafka/embedded"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/serde"
)

// startEmbedded starts a kfake cluster with an input and an output topic.
func startEmbedded(t *testing.T, partitions int) []string {
	t.Helper()
	e, err := embedded.Start(embedded.Options{Partitions: partitions, Topics: map[string]int{"in": partitions, "out": partitions, "init": partitions}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e.Brokers()
}

// testApp is a test application's Topology and Options together: they
// share no field name, so each field is promoted and a test edits one
// value.
type testApp struct {
	kstate.Topology[string, string, string]
	kstate.Options
}

func config(brokers []string, stateDir string, newProc func() processor.StatefulProcessor[string, string, string]) testApp {
	return testApp{kstate.Topology[string, string, string]{
		Inputs:       kstate.Topics(serde.String(), "in"),
		KeySerde:     serde.String(),
		NewProcessor: newProc,
		Output: kstate.Output[string, string]{
			Topic: "out",
			Serde: serde.String(),
		},
	}, kstate.Options{
		ApplicationID: "app",
		InstanceID:    "i1",
		Kafka: kstate.KafkaOptions{
			Brokers: brokers,
		},
		State: kstate.StateOptions{
			Dir: stateDir,
		},
		Batching: kstate.BatchingOptions{
			MaxWait: 50 * time.Millisecond,
		},
		Timeouts: kstate.TimeoutOptions{
			Shutdown: 5 * time.Second,
		},
		Observability: kstate.ObservabilityOptions{
			Logger: testlog.Discard(),
		},
	}}
}

func newApp(t *testing.T, cfg testApp) *kstate.App[string, string, string] {
	t.Helper()
	cfg.Observability.Logger = testlog.New(t)
	app, err := kstate.New(cfg.Topology, cfg.Options)
	if err != nil {
		t.Fatal(err)
	}
	return app
}

func want(t *testing.T, got testprocs.Outputs, w string) {
	t.Helper()
	if got.String() != w {
		t.Fatalf("outputs\n got %s\nwant %s", got, w)
	}
}

func TestEmbeddedCounterExactlyOnceAcrossRestarts(t *testing.T) {
	brokers := startEmbedded(t, 3)
	dir := t.TempDir()
	app := newApp(t, config(brokers, dir, testprocs.NewCounter))
	stop := testprocs.Start(t, app)
	testprocs.Produce(t, brokers, "in", "a=x", "a=y", "a=x", "b=y", "b=y")
	want(t, testprocs.WaitOutputs(t, brokers, "out", 5, 20*time.Second), "a=[1 2 3] b=[1 2]")
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	m := app.Metrics()
	if m.Total.RowsIn != 5 || m.Total.RowsOut != 5 || m.Total.Commits == 0 || m.FirstCommit <= 0 {
		t.Fatalf("metrics %+v", m)
	}
	// Run marked the application's state directory as kstate's (kstate
	// reset deletes no other).
	if err := shard.CheckAppDir(filepath.Join(dir, "app"), "app"); err != nil {
		t.Fatalf("state directory after Run: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "app", shard.AppDirMarker)); err != nil || string(b) != "app\n" {
		t.Fatalf("marker: %q, %v", b, err)
	}

	// Same state dir: local shards continue.
	app = newApp(t, config(brokers, dir, testprocs.NewCounter))
	stop = testprocs.Start(t, app)
	testprocs.Produce(t, brokers, "in", "a=z", "c=z")
	want(t, testprocs.WaitOutputs(t, brokers, "out", 7, 20*time.Second), "a=[1 2 3 4] b=[1 2] c=[1]")
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}

	// Fresh state dir: everything restored from the changelog.
	app = newApp(t, config(brokers, t.TempDir(), testprocs.NewCounter))
	stop = testprocs.Start(t, app)
	testprocs.Produce(t, brokers, "in", "a=z", "b=z", "c=z")
	want(t, testprocs.WaitOutputs(t, brokers, "out", 10, 20*time.Second), "a=[1 2 3 4 5] b=[1 2 3] c=[1 2]")
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if m := app.Metrics(); m.Total.RestoreRecords == 0 {
		t.Fatalf("no restore counted: %+v", m.Total)
	}
}

func TestEmbeddedInitialStateAppliedOnce(t *testing.T) {
	brokers := startEmbedded(t, 2)
	cfg := config(brokers, t.TempDir(), testprocs.NewCounter)
	cfg.InitialState = kstate.InitialStateFromSeq(maps.All(map[string]int64{"x": 10, "y": 100}))
	app := newApp(t, cfg)
	stop := testprocs.Start(t, app)
	testprocs.Produce(t, brokers, "in", "x=a", "x=b")
	want(t, testprocs.WaitOutputs(t, brokers, "out", 2, 20*time.Second), "x=[11 12]")
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	// Restart with a fresh state dir: restored from the changelog, and
	// the initial state is not applied again.
	cfg.State.Dir = t.TempDir()
	app = newApp(t, cfg)
	stop = testprocs.Start(t, app)
	testprocs.Produce(t, brokers, "in", "x=c", "y=c")
	want(t, testprocs.WaitOutputs(t, brokers, "out", 4, 20*time.Second), "x=[11 12 13] y=[101]")
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if n := app.Metrics().Total.InitialStateRows; n != 0 {
		t.Fatalf("second run applied %d initial rows", n)
	}
}

func TestEmbeddedProcessingTimeTimerPushedBack(t *testing.T) {
	brokers := startEmbedded(t, 1)
	clock := testprocs.NewClock(1_000_000)
	cfg := config(brokers, t.TempDir(), testprocs.NewQuiet(time.Second))
	cfg.TimeMode = processor.ProcessingTime
	cfg.Observability.Clock = clock.Now
	cfg.Batching.TriggerInterval = time.Millisecond
	app := newApp(t, cfg)
	testprocs.Start(t, app)
	committed := func(n int64) func() bool {
		return func() bool { return app.Metrics().Total.RowsIn >= n }
	}
	testprocs.Produce(t, brokers, "in", "k=1")
	testprocs.Eventually(t, 20*time.Second, "first row", committed(1))
	clock.Set(1_000_500)
	testprocs.Produce(t, brokers, "in", "k=2") // pushes the timer to 1_001_500
	testprocs.Eventually(t, 20*time.Second, "second row", committed(2))
	clock.Set(1_001_200) // past the first timer, which was deleted
	// No row and a frozen clock: the next round is the trigger round at 1_001_200.
	rounds := app.Metrics().Total.Rounds
	testprocs.Eventually(t, 20*time.Second, "a trigger round", func() bool { return app.Metrics().Total.Rounds > rounds })
	if m := app.Metrics().Total; m.TimersFired != 0 || m.TimersDeleted != 1 {
		t.Fatalf("at 1_001_200: %+v", m)
	}
	fired := func(n int64) func() bool { return func() bool { return app.Metrics().Total.TimersFired >= n } }
	clock.Set(1_001_500)
	testprocs.Eventually(t, 20*time.Second, "timer", fired(1))
	want(t, testprocs.WaitOutputs(t, brokers, "out", 1, 20*time.Second), "k=[quiet since 1000500 (timer 1001500, now 1001500)]")
}

// countedOnce runs a counter application on an embedded broker until it
// has counted one row, and stops it: the start of the start-up error tests.
func countedOnce(t *testing.T) ([]string, testApp) {
	t.Helper()
	brokers := startEmbedded(t, 1)
	cfg := config(brokers, t.TempDir(), testprocs.NewCounter)
	stop := testprocs.Start(t, newApp(t, cfg))
	testprocs.Produce(t, brokers, "in", "a=1")
	testprocs.WaitOutputs(t, brokers, "out", 1, 20*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	return brokers, cfg
}

// runFails starts an application with cfg and returns the error its Run
// fails with.
func runFails(t *testing.T, cfg testApp) error {
	t.Helper()
	_, done := testprocs.StartWatch(t, newApp(t, cfg))
	select {
	case err := <-done:
		t.Logf("Run: %v", err)
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not fail")
		return nil
	}
}

func TestEmbeddedModeChangeIsAStartupError(t *testing.T) {
	_, cfg := countedOnce(t)
	cfg.TimeMode = processor.ProcessingTime
	cfg.State.Dir = t.TempDir() // the changelog alone must carry the mode
	var me *kstate.ModeError
	if err := runFails(t, cfg); !errors.As(err, &me) || me.Old != "NoTime" || me.New != "ProcessingTime" {
		t.Fatalf("Run: %v, want a ModeError NoTime -> ProcessingTime", err)
	}
}

// A changelog written by a newer kstate, in a newer changelog layout, is
// refused at start-up with both layouts in the error, whether the shard
// catches up on it from its local store or restores it from scratch.
func TestEmbeddedNewerChangelogLayoutIsAStartupError(t *testing.T) {
	brokers, cfg := countedOnce(t)
	// What a newer build's first batch starts with: its layout entry.
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	rec := &kgo.Record{Topic: "app-changelog", Partition: 0, Key: append([]byte{byte(changelog.KindMeta)}, changelog.LayoutMeta...), Value: []byte("3")}
	if err := cl.ProduceSync(t.Context(), rec).FirstErr(); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{cfg.State.Dir, t.TempDir()} {
		cfg.State.Dir = d
		if err := runFails(t, cfg); !errors.Is(err, changelog.ErrLayout) || !strings.Contains(err.Error(), "layout 3") || !strings.Contains(err.Error(), "up to 2") {
			t.Fatalf("Run with state dir %s: %v, want changelog.ErrLayout naming layouts 3 and 2", d, err)
		}
	}
}

// failing panics on row "boom".
type failing struct{ testprocs.Counter }

func (f *failing) HandleInputRows(key string, rows iter.Seq[string], tv processor.TimerValues, out processor.Emitter[string]) error {
	for r := range rows {
		if r == "boom" {
			panic("boom row")
		}
	}
	return nil
}

func TestEmbeddedUserPanicAndDecodeErrorStopRun(t *testing.T) {
	brokers := startEmbedded(t, 1)
	app := newApp(t, config(brokers, t.TempDir(), func() processor.StatefulProcessor[string, string, string] { return &failing{} }))
	_, done := testprocs.StartWatch(t, app)
	testprocs.Produce(t, brokers, "in", "a=1", "k=boom")
	select {
	case err := <-done:
		var ue *kstate.UserError
		if !errors.As(err, &ue) || ue.Method != "HandleInputRows" || ue.Key != `"k"` || ue.Partition != 0 {
			t.Fatalf("Run: %v", err)
		}
		t.Logf("Run: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not fail")
	}

	// Decode error: int64 values, one record is not 8 bytes.
	cfg := kstate.Topology[string, int64, string]{
		Inputs:       kstate.Topics(serde.Int64(), "in"),
		KeySerde:     serde.String(),
		NewProcessor: func() processor.StatefulProcessor[string, int64, string] { return &sumProc{} },
		Output: kstate.Output[string, string]{
			Topic: "out",
			Serde: serde.String(),
		},
	}
	opts := kstate.Options{
		ApplicationID: "dec",
		InstanceID:    "i1",
		Kafka: kstate.KafkaOptions{
			Brokers: brokers,
		},
		State: kstate.StateOptions{
			Dir: t.TempDir(),
		},
		Batching: kstate.BatchingOptions{
			MaxWait: 50 * time.Millisecond,
		},
		Observability: kstate.ObservabilityOptions{
			Logger: testlog.New(t),
		},
	}
	dapp, err := kstate.New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	_, done = testprocs.StartWatch(t, dapp)
	select {
	case err := <-done:
		var de *kstate.DecodeError
		if !errors.As(err, &de) || de.Topic != "in" || de.Partition != 0 || de.Offset != 0 {
			t.Fatalf("Run: %v", err)
		}
		if !strings.Contains(err.Error(), `topic "in" partition 0 offset 0`) {
			t.Fatalf("error %q", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not fail")
	}
}

type sumProc struct{}

func (sumProc) Init(processor.Handle) error { return nil }
func (sumProc) HandleInputRows(k string, rows iter.Seq[int64], _ processor.TimerValues, out processor.Emitter[string]) error {
	var s int64
	for v := range rows {
		s += v
	}
	return out.Emit(fmt.Sprint(s))
}
func (sumProc) HandleExpiredTimer(string, processor.TimerValues, processor.ExpiredTimerInfo, processor.Emitter[string]) error {
	return nil
}
func (sumProc) Close() error { return nil }

func TestConfigValidation(t *testing.T) {
	ok := config([]string{"x:1"}, t.TempDir(), testprocs.NewCounter)
	for name, mut := range map[string]func(*testApp){
		"no app id":       func(c *testApp) { c.ApplicationID = "" },
		"bad app id":      func(c *testApp) { c.ApplicationID = "a b" },
		"topic twice":     func(c *testApp) { c.Inputs = kstate.Topics(serde.String(), "a", "a") },
		"no codec":        func(c *testApp) { c.KeySerde = nil },
		"lateness no evt": func(c *testApp) { c.AllowedLateness = time.Second },
		"bad mode":        func(c *testApp) { c.TimeMode = 7 },
		"tiny memory":     func(c *testApp) { c.State.Memory = 1000 },
		"tiny cache":      func(c *testApp) { c.State.CacheBytes = 1000 },
		"bad backend":     func(c *testApp) { c.State.Backend = "leveldb" },
		"initial mismatch": func(c *testApp) {
			c.InitialState = kstate.InitialStateFromSeq(maps.All(map[string]string{}))
		},
	} {
		c := ok
		mut(&c)
		if _, err := kstate.New(c.Topology, c.Options); !errors.Is(err, kstate.ErrConfig) {
			t.Errorf("%s: error %v", name, err)
		} else if name == "initial mismatch" {
			t.Logf("%s: %v", name, err)
		}
	}
	for _, b := range []string{kstate.StateBackendRocksDB, kstate.StateBackendPebble} {
		c := ok
		c.State.Backend = b
		if _, err := kstate.New(c.Topology, c.Options); err != nil {
			t.Errorf("StateBackend %q: %v", b, err)
		}
	}
	app, err := kstate.New(ok.Topology, ok.Options)
	if err != nil {
		t.Fatal(err)
	}
	if app.InstanceID() != "i1" {
		t.Fatal(app.InstanceID())
	}
	ok.InstanceID = ""
	a1, _ := kstate.New(ok.Topology, ok.Options)
	a2, _ := kstate.New(ok.Topology, ok.Options)
	if a1.InstanceID() == "" || a1.InstanceID() != a2.InstanceID() {
		t.Fatalf("default instance id not stable: %q %q", a1.InstanceID(), a2.InstanceID())
	}
}
