package integration

import (
	"context"
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/internal/kafka"
	"github.com/kstate/kstate/internal/testlog"
	"github.com/kstate/kstate/internal/testprocs"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/serde"
)

// The SPEC's examples, end to end on the real broker, with exact outputs.
// Each test uses its own topics and application id.

type specEnv struct {
	brokers []string
	app     string // application id
	in, out string // topics
}

var unsafeChars = regexp.MustCompile(`[^a-zA-Z0-9._-]+`)

// newSpecEnv creates the input and output topics with parts partitions.
func newSpecEnv(t *testing.T, parts int) specEnv {
	t.Helper()
	brokers := realKafka(t).Brokers()
	id := fmt.Sprintf("%s-%d", unsafeChars.ReplaceAllString(t.Name(), "-"), time.Now().UnixNano()%1_000_000_000)
	e := specEnv{brokers: brokers, app: id, in: id + "-in", out: id + "-out"}
	newTopic(t, brokers, e.in, parts)
	newTopic(t, brokers, e.out, parts)
	return e
}

func newTopic(t *testing.T, brokers []string, topic string, parts int) {
	t.Helper()
	adm, err := kafka.NewAdmin(brokers)
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := adm.EnsureTopic(ctx, kafka.TopicSpec{Name: topic, Partitions: parts, ReplicationFactor: -1}); err != nil {
		t.Fatal(err)
	}
}

func (e specEnv) config(t *testing.T, newProc func() processor.StatefulProcessor[string, string, string]) testApp[string, string, string] {
	return testApp[string, string, string]{kstate.Topology[string, string, string]{
		Inputs:       kstate.Topics(serde.String(), e.in),
		KeySerde:     serde.String(),
		NewProcessor: newProc,
		Output: kstate.Output[string, string]{
			Topic: e.out,
			Serde: serde.String(),
		},
	}, kstate.Options{
		ApplicationID: e.app,
		InstanceID:    "i1",
		Kafka: kstate.KafkaOptions{
			Brokers: e.brokers,
		},
		State: kstate.StateOptions{
			Dir: t.TempDir(),
		},
		Batching: kstate.BatchingOptions{
			MaxWait: 100 * time.Millisecond,
		},
		Timeouts: kstate.TimeoutOptions{
			Shutdown: 10 * time.Second,
		},
		Observability: kstate.ObservabilityOptions{
			Logger: testlog.New(t),
		},
	}}
}

func newSpecApp(t *testing.T, cfg testApp[string, string, string]) *kstate.App[string, string, string] {
	t.Helper()
	app, err := kstate.New(cfg.Topology, cfg.Options)
	if err != nil {
		t.Fatal(err)
	}
	return app
}

func wantOutputs(t *testing.T, got testprocs.Outputs, want string) {
	t.Helper()
	if got.String() != want {
		t.Fatalf("outputs\n got %s\nwant %s", got, want)
	}
}

const waitOut = 60 * time.Second

// Counter with Value/List/Map state: a,a,a,b,b → a=3, b=2 (one output per
// row, so every count appears exactly once), then a restart on an empty
// state directory restores from the changelog and continues.
func TestSpecCounter(t *testing.T) {
	t.Parallel()
	e := newSpecEnv(t, 3)
	cfg := e.config(t, testprocs.NewCounter)
	app := newSpecApp(t, cfg)
	stop := testprocs.Start(t, app)
	testprocs.Produce(t, e.brokers, e.in, "a=x", "a=y", "a=x", "b=y", "b=y")
	wantOutputs(t, testprocs.WaitOutputs(t, e.brokers, e.out, 5, waitOut), "a=[1 2 3] b=[1 2]")
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	m := app.Metrics()
	t.Logf("first run: first commit %v after start; %d commits, mean commit latency %v; totals %+v",
		m.FirstCommit, m.Total.Commits, m.Total.CommitLatency/time.Duration(max(m.Total.Commits, 1)), m.Total)
	if m.Total.RowsIn != 5 || m.Total.RowsOut != 5 {
		t.Fatalf("metrics %+v", m.Total)
	}

	// Restart with an empty state directory: the state comes back from
	// the changelog only.
	cfg.State.Dir = t.TempDir()
	app = newSpecApp(t, cfg)
	stop = testprocs.Start(t, app)
	testprocs.Produce(t, e.brokers, e.in, "a=z", "b=z", "c=z")
	wantOutputs(t, testprocs.WaitOutputs(t, e.brokers, e.out, 8, waitOut), "a=[1 2 3 4] b=[1 2 3] c=[1]")
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	m = app.Metrics()
	t.Logf("restart on empty state dir: first commit %v after start, %d changelog records restored in %v",
		m.FirstCommit, m.Total.RestoreRecords, m.Total.RestoreTime)
	if m.Total.RestoreRecords == 0 {
		t.Fatal("nothing restored")
	}
}

// Initial state from a topic: x=10, input x,x → 11, 12; a restart does not
// apply it again.
func TestSpecInitialState(t *testing.T) {
	t.Parallel()
	e := newSpecEnv(t, 2)
	initTopic := e.in + "-init"
	newTopic(t, e.brokers, initTopic, 1)
	ten, _ := serde.Int64().Serialize(10)
	p, err := kafka.NewProducer(e.brokers)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Produce(context.Background(), kafka.Record{Topic: initTopic, Key: []byte("x"), Value: ten}); err != nil {
		t.Fatal(err)
	}
	p.Close()

	cfg := e.config(t, testprocs.NewCounter)
	cfg.InitialState = kstate.InitialStateFromTopic[string](initTopic, serde.Int64())
	app := newSpecApp(t, cfg)
	stop := testprocs.Start(t, app)
	testprocs.Produce(t, e.brokers, e.in, "x=a", "x=b")
	wantOutputs(t, testprocs.WaitOutputs(t, e.brokers, e.out, 2, waitOut), "x=[11 12]")
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if n := app.Metrics().Total.InitialStateRows; n != 1 {
		t.Fatalf("initial state rows applied: %d, want 1", n)
	}

	// Restart on the kept shard, then on an empty state dir (changelog only).
	for i, dir := range []string{cfg.State.Dir, t.TempDir()} {
		cfg.State.Dir = dir
		app = newSpecApp(t, cfg)
		stop = testprocs.Start(t, app)
		testprocs.Produce(t, e.brokers, e.in, "x=c")
		testprocs.WaitOutputs(t, e.brokers, e.out, 3+i, waitOut)
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if n := app.Metrics().Total.InitialStateRows; n != 0 {
			t.Fatalf("restart applied %d initial rows", n)
		}
	}
	wantOutputs(t, testprocs.WaitOutputs(t, e.brokers, e.out, 4, waitOut), "x=[11 12 13 14]")
}

// Session tracker with MapState.
func TestSpecSessionTracker(t *testing.T) {
	t.Parallel()
	e := newSpecEnv(t, 2)
	app := newSpecApp(t, e.config(t, testprocs.NewSessions))
	stop := testprocs.Start(t, app)
	testprocs.Produce(t, e.brokers, e.in,
		"u1=s1:start", "u2=s9:start", "u1=s1:event", "u1=s2:start", "u1=s1:event", "u2=s9:event",
		"u1=s1:end", "u1=s2:event", "u1=s2:end", "u2=s9:end")
	wantOutputs(t, testprocs.WaitOutputs(t, e.brokers, e.out, 3, waitOut),
		"u1=[s1 ended after 2 events; open [s2] s2 ended after 1 events; open []] u2=[s9 ended after 1 events; open []]")
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// A processing-time timer emits when a key goes quiet and is pushed back by
// new rows. Time is a fake clock: nothing here sleeps for time logic.
func TestSpecProcessingTimeTimer(t *testing.T) {
	t.Parallel()
	e := newSpecEnv(t, 1)
	clock := testprocs.NewClock(1_000_000)
	cfg := e.config(t, testprocs.NewQuiet(time.Second))
	cfg.TimeMode = processor.ProcessingTime
	cfg.Observability.Clock = clock.Now
	cfg.Batching.TriggerInterval = time.Millisecond
	app := newSpecApp(t, cfg)
	stop := testprocs.Start(t, app)
	rowsIn := func(n int64) func() bool { return func() bool { return app.Metrics().Total.RowsIn >= n } }

	testprocs.Produce(t, e.brokers, e.in, "k=1")
	testprocs.Eventually(t, waitOut, "first row", rowsIn(1)) // timer at 1_001_000
	clock.Set(1_000_500)
	testprocs.Produce(t, e.brokers, e.in, "k=2")
	testprocs.Eventually(t, waitOut, "second row", rowsIn(2)) // timer moved to 1_001_500
	clock.Set(1_001_200)
	rounds := app.Metrics().Total.Rounds
	testprocs.Eventually(t, waitOut, "a trigger round", func() bool { return app.Metrics().Total.Rounds > rounds })
	clock.Set(1_001_500)
	got := testprocs.WaitOutputs(t, e.brokers, e.out, 1, waitOut)
	wantOutputs(t, got, "k=[quiet since 1000500 (timer 1001500, now 1001500)]")
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if m := app.Metrics().Total; m.TimersFired != 1 || m.TimersRegistered != 2 || m.TimersDeleted != 2 {
		t.Fatalf("timer counters %+v", m)
	}
}

// An event-time timer fires once the watermark passes it; late rows are
// dropped and counted.
func TestSpecEventTimeTimer(t *testing.T) {
	t.Parallel()
	e := newSpecEnv(t, 1)
	cfg := e.config(t, testprocs.NewDeadline(10*time.Millisecond))
	cfg.TimeMode = processor.EventTime
	cfg.EventTime = testprocs.EventTimeOf
	cfg.AllowedLateness = 5 * time.Millisecond
	app := newSpecApp(t, cfg)
	stop := testprocs.Start(t, app)

	testprocs.Produce(t, e.brokers, e.in, "k=100", "j=112") // timers k@110, j@122; watermark → 107
	testprocs.Eventually(t, waitOut, "rows", func() bool { return app.Metrics().Total.RowsIn >= 2 })
	testprocs.Produce(t, e.brokers, e.in, "x=125") // watermark → 120: k@110 fires
	wantOutputs(t, testprocs.WaitOutputs(t, e.brokers, e.out, 1, waitOut), "k=[deadline 110 passed at watermark 120]")
	testprocs.Produce(t, e.brokers, e.in, "k=119", "k=121", "y=140") // 119 ≤ 120: late; wm → 135
	wantOutputs(t, testprocs.WaitOutputs(t, e.brokers, e.out, 4, waitOut),
		"j=[deadline 122 passed at watermark 135] k=[deadline 110 passed at watermark 120 deadline 131 passed at watermark 135] x=[deadline 135 passed at watermark 135]")
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if m := app.Metrics().Total; m.LateRowsDropped != 1 {
		t.Fatalf("late rows %d, want 1 (%+v)", m.LateRowsDropped, m)
	}
}

// TTL: a value expires when the batch processing time passes its expiry.
func TestSpecTTL(t *testing.T) {
	t.Parallel()
	e := newSpecEnv(t, 1)
	clock := testprocs.NewClock(5_000_000)
	cfg := e.config(t, testprocs.NewExpiring(10*time.Second))
	cfg.TimeMode = processor.ProcessingTime
	cfg.Observability.Clock = clock.Now
	cfg.Batching.TriggerInterval = time.Hour // batches only with data
	app := newSpecApp(t, cfg)
	stop := testprocs.Start(t, app)
	testprocs.Produce(t, e.brokers, e.in, "k=v1", "k=get")
	testprocs.WaitOutputs(t, e.brokers, e.out, 1, waitOut)
	clock.Set(5_009_999)
	testprocs.Produce(t, e.brokers, e.in, "k=get")
	testprocs.WaitOutputs(t, e.brokers, e.out, 2, waitOut)
	clock.Set(5_010_000)
	testprocs.Produce(t, e.brokers, e.in, "k=get")
	wantOutputs(t, testprocs.WaitOutputs(t, e.brokers, e.out, 3, waitOut), "k=[v1 v1 absent]")
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if m := app.Metrics().Total; m.TTLRemovals != 1 {
		t.Fatalf("TTL removals %d", m.TTLRemovals)
	}
}
