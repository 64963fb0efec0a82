package kstate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kstate/kstate/internal/testlog"
	"github.com/kstate/kstate/internal/testprocs"
	"github.com/kstate/kstate/serde"
)

// TestReadyIdleAppLosesKafka: an idle application (no input arriving)
// whose broker stops answering turns not ready within a bound, with the
// reason in /readyz and /status, stays live, and is ready again once the
// broker answers and the partitions are assigned; it then processes new
// records exactly once. The broker "dies" by closing every connection on
// its first request (a kfake control), so no request is answered. Before
// the fix, /readyz kept answering 200 (Running) while nothing reached
// Kafka. The real-broker proof is integration's
// TestReadyRealBrokerKilledWhileIdle.
func TestReadyIdleAppLosesKafka(t *testing.T) {
	old := kafkaUnreachableAfter
	kafkaUnreachableAfter = 2 * time.Second
	t.Cleanup(func() { kafkaUnreachableAfter = old })
	// Two pipelines too: the group rebalances again after the outage,
	// and an idle pipeline must be told of every revoke (kafka's
	// revokes.go; before, 1 run in ~7 kept a moved partition's shard
	// locked for minutes).
	for _, pipelines := range []int{1, 2} {
		t.Run(fmt.Sprintf("pipelines=%d", pipelines), func(t *testing.T) {
			c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "in", "out"),
				kfake.GroupMinSessionTimeout(100*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			var down atomic.Bool
			c.Control(func(kmsg.Request) (kmsg.Response, error, bool) {
				c.KeepControl()
				if down.Load() {
					return nil, errors.New("broker down"), true // closes the connection
				}
				return nil, nil, false
			})
			brokers := c.ListenAddrs()
			app, err := New(Topology[string, string, string]{
				Inputs:       Topics(serde.String(), "in"),
				KeySerde:     serde.String(),
				NewProcessor: testprocs.NewCounter,
				Output: Output[string, string]{
					Topic: "out",
					Serde: serde.String(),
				},
			}, Options{
				ApplicationID: "app",
				InstanceID:    "i1",
				Kafka: KafkaOptions{
					Brokers: brokers,
					// Longer than the outage plus franz-go's join
					// backoff (up to 5 s). kfake, unlike Kafka, expires
					// a member waiting in JoinGroup at its session
					// timeout, counted from its last heartbeat before
					// the outage, and never answers the join: the first
					// pipeline back waited for its sibling (still in
					// backoff), was dropped, and its join hung until
					// franz-go's 70 s request timeout, out of the group
					// (1 run in 3 with the default 10 s). Kafka counts
					// a member awaiting its join as alive.
					SessionTimeout: 30 * time.Second,
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
			probe := func(path string) (int, string) {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
				b, _ := io.ReadAll(rec.Body)
				return rec.Code, strings.TrimSpace(string(b))
			}
			stop, done := testprocs.StartWatch(t, app)
			testprocs.Produce(t, brokers, "in", "a=x", "b=x", "a=y")
			testprocs.WaitOutputs(t, brokers, "out", 3, 30*time.Second)
			// Ready, and every pipeline owns a partition. The owners
			// first: read after /readyz, a partition that moved to the
			// second pipeline since (kfake has no initial rebalance
			// delay) counted as owned while /readyz had answered before
			// its restore, and the idle check below then saw it restoring.
			settled := func() bool {
				owners := map[int]bool{}
				for _, p := range app.Status().Partitions {
					if p.Restoring {
						return false
					}
					owners[p.Pipeline] = true
				}
				code, _ := probe("/readyz")
				return code == 200 && len(owners) == pipelines
			}
			testprocs.Eventually(t, 30*time.Second, "ready", settled)

			// Idle and healthy for longer than the bound: no false alarm.
			for end := time.Now().Add(kafkaUnreachableAfter * 3 / 2); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
				if code, body := probe("/readyz"); code != 200 {
					t.Fatalf("idle healthy app: /readyz %d %q", code, body)
				}
			}

			down.Store(true)
			lost := time.Now()
			for code, body := probe("/readyz"); code != 503 || !strings.Contains(body, "Kafka unreachable"); code, body = probe("/readyz") {
				if time.Since(lost) > 15*time.Second {
					t.Fatalf("/readyz %v after the broker stopped answering: %d %q, want 503 naming Kafka unreachable", time.Since(lost).Round(time.Millisecond), code, body)
				}
				time.Sleep(50 * time.Millisecond)
			}
			t.Logf("not ready %v after the broker stopped answering", time.Since(lost).Round(time.Millisecond))
			if ok, why := app.Live(); !ok {
				t.Errorf("Live while Kafka is unreachable: %s, want ok (a restart does not help)", why)
			}
			if code, body := probe("/healthz"); code != 200 {
				t.Errorf("/healthz while Kafka is unreachable: %d %q", code, body)
			}
			if st := app.Status(); st.Ready || !strings.Contains(st.ReadyReason, "Kafka unreachable") {
				t.Errorf("Status while Kafka is unreachable: Ready %v, ReadyReason %q", st.Ready, st.ReadyReason)
			}
			time.Sleep(kafkaUnreachableAfter) // an outage longer than the bound
			if code, body := probe("/readyz"); code != 503 {
				t.Errorf("/readyz during the outage: %d %q, want 503", code, body)
			}

			down.Store(false)
			back := time.Now()
			for !settled() {
				if time.Since(back) > 60*time.Second {
					code, body := probe("/readyz")
					t.Fatalf("not ready 60s after the broker answered again: /readyz %d %q, state %v, partitions %+v", code, body, app.State(), app.Status().Partitions)
				}
				time.Sleep(50 * time.Millisecond)
			}
			t.Logf("ready %v after the broker answered again", time.Since(back).Round(time.Millisecond))
			select {
			case err := <-done:
				t.Fatalf("Run returned: %v", err)
			default:
			}
			testprocs.Produce(t, brokers, "in", "a=z", "c=x")
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			testprocs.Eventually(t, 30*time.Second, "the records after the outage", func() bool {
				out, err := testprocs.Read(ctx, brokers, "out")
				return err == nil && out.Count() >= 5
			})
			if err := stop(); err != nil {
				t.Fatalf("Run: %v", err)
			}
			out, err := testprocs.Read(ctx, brokers, "out")
			if err != nil {
				t.Fatal(err)
			}
			if got, want := out.String(), "a=[1 2 3] b=[1] c=[1]"; got != want {
				t.Fatalf("outputs\n got %s\nwant %s", got, want)
			}
		})
	}
}

// kafkaReach: reachable while answers come, unreachable (with the last
// error) once none came for kafkaUnreachableAfter, reachable again on an
// answer, and silent when no Run tracks.
func TestKafkaReach(t *testing.T) {
	old := kafkaUnreachableAfter
	kafkaUnreachableAfter = 50 * time.Millisecond
	t.Cleanup(func() { kafkaUnreachableAfter = old })
	var r kafkaReach
	r.answered()
	time.Sleep(60 * time.Millisecond)
	if got := r.unreachable(); got != "" {
		t.Fatalf("before start: %q, want none", got)
	}
	r.start()
	if got := r.unreachable(); got != "" {
		t.Fatalf("just started: %q", got)
	}
	r.failed(errors.New("dial tcp 127.0.0.1:9092: connect: connection refused"))
	time.Sleep(60 * time.Millisecond)
	if got := r.unreachable(); !strings.HasPrefix(got, "Kafka unreachable: no broker has answered for") ||
		!strings.HasSuffix(got, "(last error: dial tcp 127.0.0.1:9092: connect: connection refused)") {
		t.Fatalf("no answer for longer than the bound: %q", got)
	}
	r.answered()
	if got := r.unreachable(); got != "" {
		t.Fatalf("after an answer: %q", got)
	}
	time.Sleep(60 * time.Millisecond)
	if got := r.unreachable(); got != "Kafka unreachable: no broker has answered for 0s" {
		t.Fatalf("silent broker, no error: %q", got)
	}
	r.stop()
	if got := r.unreachable(); got != "" {
		t.Fatalf("after stop: %q", got)
	}
}
