package integration

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/internal/engine"
	"github.com/kstate/kstate/internal/testprocs"
)

// The health endpoints on a real broker: /readyz is 503 while a partition
// restores and 200 after; /healthz turns 503 while a processor call is
// stuck; /status lists the partitions.

func probe(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
	return rec.Code, rec.Body.String()
}

func TestHealthReadyzDuringRestore(t *testing.T) {
	t.Parallel()
	e := newSpecEnv(t, 2)
	cfg := e.config(t, testprocs.NewCounter)
	app := newSpecApp(t, cfg)
	stop, _ := testprocs.StartWatch(t, app)
	testprocs.Produce(t, e.brokers, e.in, "a=1", "b=1", "c=1", "d=1")
	testprocs.WaitOutputs(t, e.brokers, e.out, 4, waitOut)
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	// A new instance on an empty state directory restores from the
	// changelog; the kill hook holds the restore at its first chunk.
	cfg.State.Dir = t.TempDir()
	app2 := newSpecApp(t, cfg)
	h := app2.Handler()
	held, release := make(chan struct{}, 4), make(chan struct{})
	var once sync.Once
	defer once.Do(func() { close(release) })
	ctx := engine.WithKillHook(t.Context(), func(p engine.KillPoint) {
		if p == engine.DuringRestore {
			held <- struct{}{}
			<-release
		}
	})
	done := make(chan error, 1)
	go func() { done <- app2.Run(ctx) }()
	// Run must have returned before the state directory (a TempDir made
	// above, so cleaned up after this) is removed and the test's logger
	// closes: t.Context is cancelled before the cleanups run.
	t.Cleanup(func() {
		once.Do(func() { close(release) })
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(2 * waitOut):
			t.Error("Run did not return after the test's context was cancelled")
		}
	})
	select {
	case <-held:
	case <-time.After(waitOut):
		t.Fatal("the restore never reached the changelog")
	}
	code, body := probe(t, h, "/readyz")
	if code != 503 || !strings.HasPrefix(body, "Restoring") {
		t.Fatalf("/readyz during the restore: %d %q, want 503 Restoring", code, body)
	}
	if code, body := probe(t, h, "/healthz"); code != 200 {
		t.Fatalf("/healthz during the restore: %d %q", code, body)
	}
	once.Do(func() { close(release) })
	testprocs.Eventually(t, waitOut, "/readyz 200 after the restore", func() bool {
		time.Sleep(50 * time.Millisecond)
		code, _ := probe(t, h, "/readyz")
		return code == 200
	})
	code, body = probe(t, h, "/status")
	var st kstate.Status
	if err := json.Unmarshal([]byte(body), &st); code != 200 || err != nil {
		t.Fatalf("/status: %d %v\n%s", code, err, body)
	}
	var restored int64
	for _, p := range st.Partitions {
		restored += p.RestoredRecords
		if p.Restoring {
			t.Fatalf("/status: partition %d restoring while Running:\n%s", p.Partition, body)
		}
	}
	if st.State != "Running" || st.InstanceID != "i1" || len(st.Partitions) != 2 || st.Partitions[0].Partition != 0 ||
		st.Partitions[1].Partition != 1 || restored == 0 {
		t.Fatalf("/status:\n%s", body)
	}
	testprocs.Produce(t, e.brokers, e.in, "a=2")
	testprocs.WaitOutputs(t, e.brokers, e.out, 5, waitOut)
}

func TestHealthHealthzStuck(t *testing.T) {
	t.Parallel()
	e := newSpecEnv(t, 1)
	g := newStuckGate(t, "stuck")
	cfg := e.config(t, g.newProcessor)
	cfg.Batching.MaxDuration = 4 * time.Second
	cfg.Observability.Logger = g.logger(t)
	app := newSpecApp(t, cfg)
	h := app.Handler()
	_, done := testprocs.StartWatch(t, app)
	testprocs.Produce(t, e.brokers, e.in, "a=1")
	testprocs.WaitOutputs(t, e.brokers, e.out, 1, waitOut)
	if code, body := probe(t, h, "/healthz"); code != 200 {
		t.Fatalf("/healthz: %d %q", code, body)
	}
	testprocs.Produce(t, e.brokers, e.in, "stuck=1")
	waitEntered(t, g)
	testprocs.Eventually(t, cfg.Batching.MaxDuration, "/healthz 503 while the call is stuck", func() bool {
		time.Sleep(50 * time.Millisecond)
		code, body := probe(t, h, "/healthz")
		return code == 503 && strings.HasPrefix(body, "stuck:")
	})
	select {
	case <-done:
	case <-time.After(cfg.Batching.MaxDuration + 10*time.Second):
		t.Fatal("Run did not give up")
	}
	if code, body := probe(t, h, "/healthz"); code != 503 || app.State() != kstate.Failed {
		t.Fatalf("/healthz after the watchdog gave up: %d %q, state %v", code, body, app.State())
	}
}
