package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kstate/kstate/internal/kafkabroker"
	"github.com/kstate/kstate/internal/testprocs"
)

// TestReadyRealBrokerKilledWhileIdle: an idle application (no input
// arriving) whose only broker is SIGKILLed turns not ready (/readyz 503
// naming "Kafka unreachable", /status ready false) within 20s, stays live
// (/healthz 200: a restart would not help), and is ready again after the
// broker's restart once its partitions are assigned; records produced
// then are processed exactly once. Before the fix /readyz answered 200
// (Running) through the whole outage: franz-go retries an idle
// consumer's fetches silently, and no batch ran to meet the error.
// With 1 and 2 pipelines. The fast variant is the root package's
// TestReadyIdleAppLosesKafka (embedded Kafka).
func TestReadyRealBrokerKilledWhileIdle(t *testing.T) {
	longTest(t)
	for _, pipelines := range []int{1, 2} {
		t.Run(fmt.Sprintf("pipelines=%d", pipelines), func(t *testing.T) { readyBrokerKill(t, pipelines) })
	}
}

func readyBrokerKill(t *testing.T, pipelines int) {
	b := ownBroker(t, kafkabroker.StartOptions{})
	id := fmt.Sprintf("readyprobe-%d-%d", pipelines, time.Now().UnixNano()%1_000_000_000)
	e := specEnv{brokers: []string{b.Addr}, app: id, in: id + "-in", out: id + "-out"}
	newTopic(t, e.brokers, e.in, 4)
	newTopic(t, e.brokers, e.out, 4)
	cfg := e.config(t, testprocs.NewCounter)
	cfg.Batching.Pipelines = pipelines
	app := newSpecApp(t, cfg)
	h := app.Handler()
	stop, done := testprocs.StartWatch(t, app)
	testprocs.Produce(t, e.brokers, e.in, "a=1", "b=1", "a=2")
	testprocs.WaitOutputs(t, e.brokers, e.out, 3, waitOut)
	// Ready, and every pipeline owns a restored partition: the owners
	// before /readyz, which answered 200 before a partition that moved
	// to the second pipeline since was counted as owned and restoring
	// (kstate's TestReadyIdleAppLosesKafka once, on kfake).
	settled := func() bool {
		owners := map[int]bool{}
		for _, p := range app.Status().Partitions {
			if p.Restoring {
				return false
			}
			owners[p.Pipeline] = true
		}
		code, _ := probe(t, h, "/readyz")
		return code == 200 && len(owners) == pipelines
	}
	testprocs.Eventually(t, waitOut, "ready", settled)

	// Idle on a healthy broker for longer than the bound: no false alarm.
	for end := time.Now().Add(12 * time.Second); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
		if code, body := probe(t, h, "/readyz"); code != 200 {
			t.Fatalf("idle app on a healthy broker: /readyz %d %q", code, body)
		}
	}

	b.Kill()
	killed := time.Now()
	var code int
	var body string
	for code, body = probe(t, h, "/readyz"); code != 503 || !strings.Contains(body, "Kafka unreachable"); code, body = probe(t, h, "/readyz") {
		if time.Since(killed) > 20*time.Second {
			t.Fatalf("/readyz %v after the broker's SIGKILL: %d %q, want 503 naming Kafka unreachable", time.Since(killed).Round(time.Millisecond), code, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("/readyz 503 %v after the SIGKILL: %s", time.Since(killed).Round(time.Millisecond), strings.TrimSpace(body))
	if st := app.Status(); st.Ready || !strings.Contains(st.ReadyReason, "Kafka unreachable") {
		t.Errorf("/status while the broker is down: ready %v, ready_reason %q", st.Ready, st.ReadyReason)
	}
	for time.Since(killed) < 25*time.Second {
		if code, body := probe(t, h, "/healthz"); code != 200 {
			t.Fatalf("/healthz while the broker is down: %d %q (a restart does not bring the broker back)", code, body)
		}
		if code, body := probe(t, h, "/readyz"); code != 503 {
			t.Fatalf("/readyz while the broker is down: %d %q", code, body)
		}
		time.Sleep(250 * time.Millisecond)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	if err := b.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	testprocs.Eventually(t, 2*time.Minute, "/readyz 200 after the broker's restart", settled)
	t.Logf("/readyz 200 %v after the broker's restart", time.Since(restarted).Round(time.Millisecond))
	select {
	case err := <-done:
		t.Fatalf("Run returned: %v", err)
	default:
	}
	testprocs.Produce(t, e.brokers, e.in, "a=3", "c=1")
	testprocs.WaitOutputs(t, e.brokers, e.out, 5, 2*time.Minute)
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	out, err := testprocs.Read(ctx, e.brokers, e.out)
	if err != nil {
		t.Fatal(err)
	}
	wantOutputs(t, out, "a=[1 2 3] b=[1] c=[1]")
}
