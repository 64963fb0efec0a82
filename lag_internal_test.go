package kstate

import (
	"fmt"
	"testing"
	"time"

	"github.com/kstate/kstate/internal/testlog"
	"github.com/kstate/kstate/internal/testprocs"
	"github.com/kstate/kstate/kafka/embedded"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/serde"
)

// TestLagWhileBatchStuck: while a batch is stuck in a processor call, the
// lag of /metrics and /status follows a backlog produced meanwhile, as
// Kafka counts it (last stable offset minus the group's committed offset),
// within the end offsets' refresh; with one and two pipelines. (The lag
// came from the fetches' high watermarks, noted after each batch: it kept
// its value from before the batch, 0 here, issue #25.) The real-broker
// proof is integration's TestLagRealBrokerStuckBatch.
func TestLagWhileBatchStuck(t *testing.T) {
	old := lagRefresh
	lagRefresh = 200 * time.Millisecond
	t.Cleanup(func() { lagRefresh = old })
	for _, pipelines := range []int{1, 2} {
		t.Run(fmt.Sprintf("pipelines=%d", pipelines), func(t *testing.T) {
			e, err := embedded.Start(embedded.Options{Topics: map[string]int{"in": 2, "out": 2}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(e.Close)
			brokers := e.Brokers()
			entered, release := make(chan struct{}, 4), make(chan struct{})
			app, err := New(Topology[string, string, string]{
				Inputs:   Topics(serde.String(), "in"),
				KeySerde: serde.String(),
				NewProcessor: func() processor.StatefulProcessor[string, string, string] {
					return &testprocs.GatedCounter{Counter: testprocs.NewCounter().(*testprocs.Counter), Entered: entered, Release: release}
				},
				Output: Output[string, string]{
					Topic: "out",
					Serde: serde.String(),
				},
			}, Options{
				ApplicationID: "app",
				InstanceID:    "i1",
				Kafka: KafkaOptions{
					Brokers: brokers,
				},
				State: StateOptions{
					Dir: t.TempDir(),
				},
				Batching: BatchingOptions{
					Pipelines: pipelines,
					MaxWait:   50 * time.Millisecond,
				},
				Timeouts: TimeoutOptions{
					Shutdown: 5 * time.Second,
				},
				Observability: ObservabilityOptions{
					Logger: testlog.New(t),
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			h := app.Handler()
			testprocs.Start(t, app)
			released := false
			releaseOnce := func() {
				if !released {
					released = true
					close(release)
				}
			}
			t.Cleanup(releaseOnce) // before the app stops (cleanups run last first)

			const warm = 40
			produce := func(from, n int) {
				kvs := make([]string, n)
				for i := range kvs {
					kvs[i] = fmt.Sprintf("k%d=x", (from+i)%23)
				}
				testprocs.Produce(t, brokers, "in", kvs...)
			}
			produce(0, warm)
			testprocs.WaitOutputs(t, brokers, "out", warm, 30*time.Second)
			// matches waits until the App's lag is Kafka's, with at least
			// min records behind (with two pipelines, the other one
			// processes its partition's share of the backlog).
			matches := func(what string, min int64) {
				t.Helper()
				if pipelines > 1 {
					min /= 4
				}
				var l testprocs.AppLag
				var real map[int32]int64
				deadline := time.Now().Add(20 * time.Second)
				for {
					r, err := testprocs.RealLag(brokers, "app", "in")
					if err == nil {
						real = r
						l = testprocs.ReadAppLag(t, h)
						if l.Matches(real) && l.Total >= min {
							break
						}
					}
					if time.Now().After(deadline) {
						t.Fatalf("%s: waited 20s; last: %v; Kafka's lag %v (%v)", what, l, real, err)
					}
					time.Sleep(20 * time.Millisecond)
				}
				t.Logf("%s: %v; Kafka's lag %v", what, l, real)
			}
			matches("lag 0 once caught up", 0)

			// A batch stuck in a processor call, and a backlog behind it.
			testprocs.Produce(t, brokers, "in", "stuck=1")
			select {
			case <-entered:
			case <-time.After(30 * time.Second):
				t.Fatal("the processor never reached the stuck key")
			}
			const backlog = 500
			produce(warm, backlog)
			matches("the backlog's lag while the batch is stuck", backlog)
			if l := testprocs.ReadAppLag(t, h); l.BatchInFlight <= 0 || len(l.InBatch) != 1 {
				t.Fatalf("while stuck: %v, want a batch in flight on one partition", l)
			}
			produce(warm+backlog, backlog)
			matches("the lag of more backlog, the batch still stuck", 2*backlog)

			releaseOnce()
			testprocs.WaitOutputs(t, brokers, "out", warm+1+2*backlog, 30*time.Second)
			matches("lag 0 once the backlog is processed", 0)
		})
	}
}
