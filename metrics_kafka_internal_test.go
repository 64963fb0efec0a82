package kstate

import (
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/kstate/kstate/internal/testlog"
	"github.com/kstate/kstate/internal/testprocs"
	"github.com/kstate/kstate/kafka/embedded"
	"github.com/kstate/kstate/serde"
)

// TestMetricsRuntimeAndKafkaClients: GET /metrics serves the Go runtime,
// process and Kafka client (kprom) series besides kstate's, with two
// pipelines and across two Runs of the App, and the registry gathers
// without error (no series twice). It served kstate's only before (issue
// #25), though docs/OPERATIONS.md says to watch go_memstats.
func TestMetricsRuntimeAndKafkaClients(t *testing.T) {
	e, err := embedded.Start(embedded.Options{Topics: map[string]int{"in": 2, "out": 2}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	brokers := e.Brokers()
	cfg := Topology[string, string, string]{
		Inputs:       Topics(serde.String(), "in"),
		KeySerde:     serde.String(),
		NewProcessor: testprocs.NewCounter,
		Output: Output[string, string]{
			Topic: "out",
			Serde: serde.String(),
		},
	}
	opts := Options{
		ApplicationID: "app",
		InstanceID:    "i1",
		Kafka: KafkaOptions{
			Brokers: brokers,
		},
		State: StateOptions{
			Dir: t.TempDir(),
		},
		Batching: BatchingOptions{
			Pipelines: 2,
			MaxWait:   50 * time.Millisecond,
		},
		Timeouts: TimeoutOptions{
			Shutdown: 5 * time.Second,
		},
		Observability: ObservabilityOptions{
			Logger: testlog.New(t),
		},
	}
	n := 0
	var h http.Handler
	for run := 1; run <= 2; run++ { // a restart: a new App on the same state
		app, err := New(cfg, opts)
		if err != nil {
			t.Fatal(err)
		}
		h = app.Handler()
		stop := testprocs.Start(t, app)
		kvs := make([]string, 50)
		for i := range kvs {
			kvs[i] = fmt.Sprintf("k%d=x", i%7)
		}
		testprocs.Produce(t, brokers, "in", kvs...)
		n += len(kvs)
		testprocs.WaitOutputs(t, brokers, "out", n, 30*time.Second)

		if _, err := app.registry().Gather(); err != nil {
			t.Fatalf("run %d: gather: %v", run, err)
		}
		f := testprocs.Scrape(t, h)
		for _, name := range []string{
			"go_memstats_alloc_bytes", "go_goroutines", "process_cpu_seconds_total", "process_resident_memory_bytes",
			"kstate_kafka_connects_total", "kstate_kafka_write_bytes_total", "kstate_kafka_read_bytes_total",
			"kstate_kafka_produce_records_total", "kstate_kafka_fetch_records_total", "kstate_kafka_buffered_fetch_records_total",
			"kstate_kafka_request_duration_e2e_seconds", "kstate_records_in_total",
		} {
			if !f.Has(name) {
				t.Errorf("run %d: /metrics has no %s; families %v", run, name, f.Names())
			}
		}
		clients := f.Series("kstate_kafka_connects_total", "client")
		for _, c := range []string{"admin", "pipeline-0", "pipeline-1"} {
			if clients[c] < 1 {
				t.Errorf("run %d: kstate_kafka_connects_total{client=%q} = %v; clients %v", run, c, clients[c], clients)
			}
		}
		// Records fetched by the pipelines' consumers: at least this run's input.
		fetched := f.Series("kstate_kafka_fetch_records_total", "client")
		if got := fetched["pipeline-0"] + fetched["pipeline-1"]; got < float64(len(kvs)) {
			t.Errorf("run %d: kstate_kafka_fetch_records_total of the pipelines %v, want >= %d", run, fetched, len(kvs))
		}
		if v, ok := f.Value("kstate_kafka_connects_total", "application", "app"); !ok || v < 1 {
			t.Errorf("run %d: kstate_kafka_connects_total{application=app}: %v %v", run, v, ok)
		}
		if err := stop(); err != nil {
			t.Fatal(err)
		}
	}
	if names := testprocs.Scrape(t, h).Names(); !slices.Contains(names, "go_memstats_alloc_bytes") {
		t.Fatalf("after Run: families %v", names)
	}
}
