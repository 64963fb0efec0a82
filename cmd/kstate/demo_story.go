package main

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/examples/heartbeat/heartbeat"
	"github.com/kstate/kstate/internal/kafka"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/serde"
)

// demoStory is what the demo does and what it expects to see. Tests change
// an expectation to check that the demo then fails.
type demoStory struct {
	counterIn   []string // keys (words) sent to the counter
	counterWant string   // its latest count per key
	initial     map[string]int64
	initialIn   []string
	initialWant string
	beats       []demoBeat
	restartAt   int // the monitor restarts before beats[restartAt]
}

// demoBeat is a step of the heartbeat story: at 12:00:00+at the sensors
// send a heartbeat (none: only the clock moves), and the monitor emits want
// ("-" for nothing).
type demoBeat struct {
	at      time.Duration
	sensors []string
	want    string
	note    string // why, printed after the step
}

func defaultDemoStory() demoStory {
	return demoStory{
		counterIn:   []string{"a", "a", "a", "b", "b"},
		counterWant: "a=3 b=2",
		initial:     map[string]int64{"x": 10},
		initialIn:   []string{"x", "x"},
		initialWant: "x=12",
		beats: []demoBeat{
			{at: 0, sensors: []string{"s1", "s2", "s3"}, want: "s1 ONLINE; s2 ONLINE; s3 ONLINE"},
			{at: 6 * time.Second, sensors: []string{"s1", "s2"}, want: "-", note: "their timers move to 12:00:16"},
			{at: 10 * time.Second, want: "s3 SILENT (last heartbeat 12:00:00)", note: "s3's timer fired"},
			{at: 13 * time.Second, sensors: []string{"s3"}, want: "s3 BACK after 13s of silence", note: "its SILENT flag was restored"},
			{at: 16 * time.Second, want: "s1 SILENT (last heartbeat 12:00:06); s2 SILENT (last heartbeat 12:00:06)", note: "restored timers fired"},
		},
		restartAt: 3,
	}
}

func (s demoStory) run(ctx context.Context, d *demo) error {
	d.section("1. Counter: a ValueState per key                   (application demo-counter)")
	got, err := demoCountWords(ctx, d, "demo-counter", "counter-in", "counter-out", nil, s.counterIn)
	if err != nil {
		return err
	}
	d.check("input", strings.Join(s.counterIn, " "), s.counterWant, got)

	d.section("2. Initial state, applied on the first run only     (application demo-initial)")
	d.line("initial", demoFormatCounts(s.initial), "")
	got, err = demoCountWords(ctx, d, "demo-initial", "initial-in", "initial-out", s.initial, s.initialIn)
	if err != nil {
		return err
	}
	d.check("input", strings.Join(s.initialIn, " "), s.initialWant, got)

	return s.heartbeats(ctx, d)
}

func demoConfig[O any](d *demo, appID, in, out string, codec serde.Serde[O], newProc func() processor.StatefulProcessor[string, string, O]) (kstate.Topology[string, string, O], kstate.Options) {
	return kstate.Topology[string, string, O]{
			Inputs:       kstate.Topics(serde.String(), in),
			KeySerde:     serde.String(),
			NewProcessor: newProc,
			Output: kstate.Output[string, O]{
				Topic: out,
				Serde: codec,
			},
		}, kstate.Options{
			ApplicationID: appID,
			Kafka: kstate.KafkaOptions{
				Brokers: d.brokers,
			},
			State: kstate.StateOptions{
				Dir: d.stateDir,
			},
			Batching: kstate.BatchingOptions{
				MaxWait: 50 * time.Millisecond,
			},
			Observability: kstate.ObservabilityOptions{
				Logger: d.logger,
			},
		}
}

// demoCountWords runs the counter over words and returns the latest count of
// every key on the output topic, e.g. "a=3 b=2".
func demoCountWords(ctx context.Context, d *demo, appID, in, out string, initial map[string]int64, words []string) (_ string, err error) {
	top, opts := demoConfig(d, appID, in, out, serde.String(), newDemoCounter)
	if initial != nil {
		top.InitialState = kstate.InitialStateFromSeq(maps.All(initial))
	}
	app, err := kstate.New(top, opts)
	if err != nil {
		return "", err
	}
	running, stop := startDemoApp(ctx, app)
	defer func() {
		if serr := stop(); err == nil && serr != nil {
			err = fmt.Errorf("%s: Run: %w", appID, serr)
		}
	}()
	if err := d.produce(ctx, in, words...); err != nil {
		return "", err
	}
	if err := demoWaitFor(running, fmt.Sprintf("%s to process %d rows", appID, len(words)), func() bool {
		return app.Metrics().Total.RowsIn >= int64(len(words))
	}); err != nil {
		return "", err
	}
	recs, err := kafka.ReadAll(ctx, d.brokers, out)
	if err != nil {
		return "", err
	}
	latest := map[string]string{} // records of one key are in one partition, in order
	for _, r := range recs {
		latest[string(r.Key)] = string(r.Value)
	}
	var kv []string
	for _, k := range slices.Sorted(maps.Keys(latest)) {
		kv = append(kv, k+"="+latest[k])
	}
	return strings.Join(kv, " "), nil
}

var demoStart = time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)

// heartbeats runs the heartbeat monitor of examples/heartbeat on a scripted
// clock, and restarts it from its changelog in the middle.
func (s demoStory) heartbeats(ctx context.Context, d *demo) error {
	d.section("3. Heartbeat monitor: processing-time timers       (application demo-heartbeat)")
	fmt.Fprintf(d.w, "      a sensor silent for %v is reported; the engine's clock is scripted\n", heartbeat.Timeout)
	clock := &demoClock{}
	clock.set(demoStart)
	top, opts := demoConfig(d, "demo-heartbeat", "heartbeats", "sensor-events", serde.JSON[heartbeat.Event](),
		heartbeat.NewMonitor(heartbeat.Timeout, heartbeat.Retention))
	top.TimeMode = processor.ProcessingTime
	opts.Observability.Clock = clock.now
	opts.Batching.TriggerInterval = time.Second // of the scripted clock: each step moves it further

	app, err := kstate.New(top, opts)
	if err != nil {
		return err
	}
	running, stop := startDemoApp(ctx, app)
	defer func() { stop() }()
	events := &demoTail{brokers: d.brokers, topic: "sensor-events"}
	var sent int64 // heartbeats sent to the running app
	for i, b := range s.beats {
		if i == s.restartAt {
			if app, running, stop, err = s.restart(ctx, d, top, opts, stop()); err != nil {
				return err
			}
			sent = 0
		}
		clock.set(demoStart.Add(b.at))
		input := "(time passes)"
		if len(b.sensors) > 0 {
			input = "heartbeat " + strings.Join(b.sensors, " ")
			if err := d.produce(ctx, "heartbeats", b.sensors...); err != nil {
				return err
			}
			sent += int64(len(b.sensors))
			// Processed means committed: the step's events, if any,
			// are in the same transaction.
			if err := demoWaitFor(running, fmt.Sprintf("%d heartbeats processed", sent), func() bool {
				return app.Metrics().Total.RowsIn >= sent
			}); err != nil {
				return err
			}
		}
		n := strings.Count(b.want, ";") + 1
		if b.want == "-" {
			n = 0
		}
		got, err := events.next(running, n)
		if err != nil {
			return err
		}
		d.check(clock.now().Format(time.TimeOnly), input, b.want, got)
		if b.note != "" {
			d.note(b.note)
		}
	}
	if err := stop(); err != nil {
		return fmt.Errorf("demo-heartbeat: Run: %w", err)
	}
	return nil
}

// restart deletes the monitor's local state and starts it again: its state
// and timers come back from the changelog topic.
// stopErr is what Run of the stopped monitor returned.
func (s demoStory) restart(ctx context.Context, d *demo, top kstate.Topology[string, string, heartbeat.Event], opts kstate.Options, stopErr error) (
	*kstate.App[string, string, heartbeat.Event], context.Context, func() error, error) {
	d.section("4. Restart: stop the monitor, delete its local state, start it again")
	fmt.Fprintf(d.w, "      its state and timers come back from the changelog topic %s\n", opts.ApplicationID+"-changelog")
	stopped := "Run returned nil"
	if stopErr != nil {
		stopped = "Run: " + stopErr.Error()
	}
	d.check("stop", "cancel Run's context", "Run returned nil", stopped)
	if stopErr != nil {
		return nil, nil, nil, fmt.Errorf("demo-heartbeat: Run: %w", stopErr)
	}
	if err := os.RemoveAll(filepath.Join(d.stateDir, opts.ApplicationID)); err != nil {
		return nil, nil, nil, err
	}
	d.line("delete", opts.ApplicationID+"/", "its local shards are gone")
	app, err := kstate.New(top, opts)
	if err != nil {
		return nil, nil, nil, err
	}
	began := time.Now()
	running, stop := startDemoApp(ctx, app)
	err = demoWaitFor(running, "the restarted monitor to restore its partitions", func() bool {
		m := app.Metrics()
		return len(m.Assigned) == demoPartitions && len(m.Restoring) == 0
	})
	if err != nil {
		stop()
		return nil, nil, nil, err
	}
	ready := time.Since(began)
	m := app.Metrics().Total
	d.checkf(m.RestoreRecords > 0, "restore", "from the changelog",
		fmt.Sprintf("%d records into %d shards in %v", m.RestoreRecords, demoPartitions, m.RestoreTime.Round(time.Millisecond)),
		"at least 1 record restored")
	d.line("ready", "", fmt.Sprintf("%v after start (group join, restore, Init)", ready.Round(time.Millisecond)))
	return app, running, stop, nil
}

// startDemoApp runs app on a goroutine. running is cancelled, with Run's
// error as its cause, when Run returns; stop cancels Run and returns its
// error (it may be called again).
func startDemoApp[O any](ctx context.Context, app *kstate.App[string, string, O]) (running context.Context, stop func() error) {
	runCtx, cancelRun := context.WithCancel(ctx)
	running, cancelRunning := context.WithCancelCause(ctx)
	done := make(chan struct{})
	var runErr error
	go func() {
		defer close(done)
		runErr = app.Run(runCtx)
		cause := errDemoStopped
		if runErr != nil {
			cause = fmt.Errorf("%w: %w", errDemoStopped, runErr)
		}
		cancelRunning(cause)
	}()
	return running, func() error {
		cancelRun()
		<-done
		return runErr
	}
}

// produce sends one record per key (the value is the key too), partitioned
// by key like any Kafka producer.
func (d *demo) produce(ctx context.Context, topic string, keys ...string) error {
	recs := make([]kafka.Record, len(keys))
	for i, k := range keys {
		recs[i] = kafka.Record{Topic: topic, Partition: kafka.AnyPartition, Key: []byte(k), Value: []byte(k)}
	}
	return d.prod.Produce(ctx, recs...)
}

// demoTail returns the heartbeat events not returned before.
type demoTail struct {
	brokers []string
	topic   string
	seen    map[int32]int64
}

// next waits until n new events are on the topic and returns them
// formatted and sorted, "-" for none.
func (t *demoTail) next(running context.Context, n int) (string, error) {
	if t.seen == nil {
		t.seen = map[int32]int64{} // partition → next offset not returned yet
	}
	codec := serde.JSON[heartbeat.Event]()
	var fresh []kafka.Record
	var readErr error
	err := demoWaitFor(running, fmt.Sprintf("%d events on %s", n, t.topic), func() bool {
		var recs []kafka.Record
		recs, readErr = kafka.ReadAll(running, t.brokers, t.topic)
		fresh = fresh[:0]
		for _, r := range recs {
			if r.Offset >= t.seen[r.Partition] {
				fresh = append(fresh, r)
			}
		}
		return readErr == nil && len(fresh) >= n
	})
	if err != nil {
		return "", fmt.Errorf("%w (read error: %v; have %d)", err, readErr, len(fresh))
	}
	var out []string
	for _, r := range fresh {
		t.seen[r.Partition] = r.Offset + 1
		e, err := codec.Deserialize(r.Value)
		if err != nil {
			return "", fmt.Errorf("%s partition %d offset %d: %w", t.topic, r.Partition, r.Offset, err)
		}
		out = append(out, e.String())
	}
	if len(out) == 0 {
		return "-", nil
	}
	slices.Sort(out)
	return strings.Join(out, "; "), nil
}

// demoClock is the scripted Options.Observability.Clock.
type demoClock struct{ ms atomic.Int64 }

func (c *demoClock) now() time.Time  { return time.UnixMilli(c.ms.Load()).UTC() }
func (c *demoClock) set(t time.Time) { c.ms.Store(t.UnixMilli()) }

func demoFormatCounts(m map[string]int64) string {
	var kv []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		kv = append(kv, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return strings.Join(kv, " ")
}
