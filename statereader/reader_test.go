package statereader_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/examples/heartbeat/heartbeat"
	"github.com/kstate/kstate/internal/murmur2"
	"github.com/kstate/kstate/kafka/kafkatest"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/serde"
	"github.com/kstate/kstate/statereader"
)

// running starts app.Run and returns a stop function returning Run's error.
func running[K, I, O any](t *testing.T, app *kstate.App[K, I, O]) func() error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx) }()
	var once bool
	var err error
	stop := func() error {
		if !once {
			once = true
			cancel()
			err = <-done
		}
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// heartbeatApp runs the heartbeat example's monitor on a scripted clock
// standing at t0, and feeds it one heartbeat per sensor.
type heartbeatRun struct {
	brokers  []string
	app      string
	stateDir string
	parts    int
	stop     func() error
}

var t0 = time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)

func startHeartbeat(t *testing.T, sensors []string) heartbeatRun {
	cluster := kafkatest.Start(t, kafkatest.RequireReal())
	const parts = 3
	in := cluster.CreateTopic(t, "hb-in", parts)
	out := cluster.CreateTopic(t, "hb-out", parts)
	appID := kafkatest.Name(t, "hb-app")
	dir := t.TempDir()
	app, err := kstate.New(kstate.Topology[string, string, heartbeat.Event]{
		Inputs:       kstate.Topics(serde.String(), in),
		KeySerde:     serde.String(),
		NewProcessor: heartbeat.NewMonitor(heartbeat.Timeout, heartbeat.Retention),
		TimeMode:     processor.ProcessingTime,
		Output: kstate.Output[string, heartbeat.Event]{
			Topic: out,
			Serde: serde.JSON[heartbeat.Event](),
		},
	}, kstate.Options{
		ApplicationID: appID,
		Kafka: kstate.KafkaOptions{
			Brokers: cluster.Brokers(),
		},
		State: kstate.StateOptions{
			Dir: dir,
		},
		Batching: kstate.BatchingOptions{
			TriggerInterval: time.Second,
			MaxWait:         50 * time.Millisecond,
		},
		Observability: kstate.ObservabilityOptions{
			Clock: func() time.Time { return t0 },
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	stop := running(t, app)
	var recs []kafkatest.Record
	for _, s := range sensors {
		recs = append(recs, kafkatest.Record{Key: []byte(s), Value: []byte("beat")})
	}
	cluster.Produce(t, in, recs...)
	until(t, "heartbeats processed", func() bool { return app.Metrics().Total.RowsIn >= int64(len(sensors)) })
	cluster.ReadCommitted(t, out, len(sensors), time.Minute)
	return heartbeatRun{brokers: cluster.Brokers(), app: appID, stateDir: dir, parts: parts, stop: stop}
}

func openBoth(t *testing.T, r heartbeatRun) map[string]*statereader.Reader {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := statereader.OpenChangelog(ctx, r.brokers, r.app)
	if err != nil {
		t.Fatalf("OpenChangelog: %v", err)
	}
	local, err := statereader.OpenStateDir(r.stateDir, r.app)
	if err != nil {
		t.Fatalf("OpenStateDir: %v", err)
	}
	return map[string]*statereader.Reader{"changelog": cl, "statedir": local}
}

// TestHeartbeatState reads the heartbeat monitor's state from the changelog
// and from the local state directory, while the application runs and after
// it stopped: the values, TTL expiries, timers and metadata are the model's.
func TestHeartbeatState(t *testing.T) {
	sensors := []string{"s1", "s2", "s3", "s4", "s5", "s6"}
	run := startHeartbeat(t, sensors)
	check := func(phase string) {
		for src, rd := range openBoth(t, run) {
			t.Run(phase+"/"+src, func(t *testing.T) {
				checkHeartbeat(t, rd, run, sensors)
			})
		}
	}
	check("running")
	if err := run.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	check("stopped")
}

func checkHeartbeat(t *testing.T, rd *statereader.Reader, run heartbeatRun, sensors []string) {
	md := rd.Metadata()
	var names []string
	for _, v := range md.Variables {
		names = append(names, fmt.Sprintf("%s %s %s ttl=%v", v.Name, v.Kind, v.Schema, v.TTL))
	}
	want := []string{"lastSeen value int64 ttl=1h0m0s", "silent value bool ttl=1h0m0s"}
	if !slices.Equal(names, want) {
		t.Errorf("variables %q, want %q", names, want)
	}
	if len(md.Partitions) != run.parts {
		t.Errorf("%d partitions, want %d", len(md.Partitions), run.parts)
	}
	for _, p := range md.Partitions {
		if p.TimeMode != "ProcessingTime" || p.OutputMode != "Append" {
			t.Errorf("partition %d modes %q %q", p.Partition, p.TimeMode, p.OutputMode)
		}
	}
	ms := t0.UnixMilli()
	expiry := ms + heartbeat.Retention.Milliseconds()
	got, err := rd.Read("lastSeen", statereader.Query{})
	if err != nil {
		t.Fatal(err)
	}
	gotMap := map[string]string{}
	for _, e := range got {
		if e.ExpiryMs == nil || *e.ExpiryMs != expiry {
			t.Errorf("%s: expiry %v, want %d", e.Key, e.ExpiryMs, expiry)
		}
		if wantP := murmur2.Partition([]byte(e.Key), run.parts); e.Partition != wantP {
			t.Errorf("%s: partition %d, want %d", e.Key, e.Partition, wantP)
		}
		gotMap[e.Key] = string(e.Value)
	}
	wantMap := map[string]string{}
	for _, s := range sensors {
		wantMap[s] = fmt.Sprint(ms)
	}
	if !maps.Equal(gotMap, wantMap) {
		t.Errorf("lastSeen %v, want %v", gotMap, wantMap)
	}
	if silent, err := rd.Read("silent", statereader.Query{}); err != nil || len(silent) != 0 {
		t.Errorf("silent: %v, %v; want none", silent, err)
	}
	one, err := rd.Read("lastSeen", statereader.Query{Key: []byte("s3")})
	if err != nil || len(one) != 1 || one[0].Key != "s3" {
		t.Errorf("lastSeen of s3: %+v, %v", one, err)
	}
	if _, err := rd.Read("nope", statereader.Query{}); err == nil {
		t.Errorf("Read of an unknown variable: no error")
	}
	timers, err := rd.Timers(statereader.Query{})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, tm := range timers {
		keys = append(keys, tm.Key)
		if tm.ExpiryMs != ms+heartbeat.Timeout.Milliseconds() || tm.Expiry != "2025-01-01T12:00:10.000Z" {
			t.Errorf("timer %+v", tm)
		}
	}
	slices.Sort(keys)
	if !slices.Equal(keys, sensors) {
		t.Errorf("timers of %v, want %v", keys, sensors)
	}
	b, _ := json.Marshal(got[0])
	t.Logf("%s: %s", t.Name(), b)
}

func TestMain(m *testing.M) { os.Exit(kafkatest.Main(m)) }
