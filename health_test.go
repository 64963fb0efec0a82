package kstate_test

import (
	"encoding/json"
	"iter"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/internal/testprocs"
	"github.com/kstate/kstate/processor"
)

// get calls the handler and returns the status code and body.
func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
	return rec.Code, rec.Body.String()
}

func wantProbe(t *testing.T, h http.Handler, path string, code int, body string) {
	t.Helper()
	c, b := get(t, h, path)
	if c != code || !strings.Contains(b, body) {
		t.Fatalf("GET %s: %d %q, want %d containing %q", path, c, b, code, body)
	}
}

type changes struct {
	mu  sync.Mutex
	got []string
}

func (c *changes) record(old, new kstate.State) {
	c.mu.Lock()
	c.got = append(c.got, old.String()+">"+new.String())
	c.mu.Unlock()
}

func (c *changes) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Join(c.got, " ")
}

func TestHealthLifecycle(t *testing.T) {
	brokers := startEmbedded(t, 2)
	var ch changes
	cfg := config(brokers, t.TempDir(), testprocs.NewCounter)
	cfg.Observability.OnStateChange = ch.record
	// One pipeline: the test reads /status once both partitions are
	// assigned, and with two pipelines on the embedded cluster (no initial
	// rebalance delay) a partition can still move to the second pipeline
	// in the first second (TestStatusPageChromium runs two).
	cfg.Batching.Pipelines = 1
	app := newApp(t, cfg)
	h := app.Handler()
	if app.State() != kstate.Created {
		t.Fatalf("state %v before Run", app.State())
	}
	wantProbe(t, h, "/healthz", 200, "ok")
	wantProbe(t, h, "/readyz", 503, "Created")

	stop, _ := testprocs.StartWatch(t, app)
	testprocs.Eventually(t, 30*time.Second, "Running with both partitions", func() bool {
		time.Sleep(20 * time.Millisecond)
		return app.State() == kstate.Running && len(app.Metrics().Assigned) == 2
	})
	wantProbe(t, h, "/readyz", 200, "ok")
	wantProbe(t, h, "/healthz", 200, "ok")
	testprocs.Produce(t, brokers, "in", "a=1", "b=1")
	testprocs.WaitOutputs(t, brokers, "out", 2, 30*time.Second)

	code, body := get(t, h, "/status")
	var st kstate.Status
	if err := json.Unmarshal([]byte(body), &st); code != 200 || err != nil {
		t.Fatalf("/status: %d %v\n%s", code, err, body)
	}
	if st.ApplicationID != "app" || st.InstanceID != "i1" || st.State != "Running" || len(st.Partitions) != 2 ||
		st.Partitions[0].Partition != 0 || st.Partitions[1].Partition != 1 || st.Partitions[0].Restoring || st.Total.RowsIn != 2 ||
		st.SinceCommit <= 0 || st.Error != "" {
		t.Fatalf("/status:\n%s", body)
	}

	if err := stop(); err != nil {
		t.Fatal(err)
	}
	// Run returned after the listener's last call.
	got := ch.String()
	if !strings.HasPrefix(got, "Created>Starting ") || !strings.HasSuffix(got, " Running>Stopping Stopping>Stopped") ||
		!strings.Contains(got, "Restoring>Running") {
		t.Fatalf("state changes: %s", got)
	}
	wantProbe(t, h, "/healthz", 503, "Stopped")
	wantProbe(t, h, "/readyz", 503, "Stopped")
}

func TestHealthFailed(t *testing.T) {
	brokers := startEmbedded(t, 1)
	var ch changes
	cfg := config(brokers, t.TempDir(), func() processor.StatefulProcessor[string, string, string] { return &failing{} })
	cfg.Observability.OnStateChange = ch.record
	app := newApp(t, cfg)
	_, done := testprocs.StartWatch(t, app)
	testprocs.Produce(t, brokers, "in", "k=boom")
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not fail")
	}
	if app.State() != kstate.Failed || !strings.HasSuffix(ch.String(), ">Failed") {
		t.Fatalf("state %v, changes %s", app.State(), ch.String())
	}
	wantProbe(t, app.Handler(), "/healthz", 503, "Failed")
	if st := app.Status(); !strings.Contains(st.Error, "HandleInputRows") {
		t.Fatalf("status error %q", st.Error)
	}
}

// blocking blocks HandleInputRows until release is closed.
type blocking struct {
	processor.StatefulProcessor[string, string, string]
	entered chan struct{}
	release chan struct{}
}

func (b *blocking) HandleInputRows(key string, rows iter.Seq[string], tv processor.TimerValues, out processor.Emitter[string]) error {
	select {
	case b.entered <- struct{}{}:
	default:
	}
	<-b.release
	return b.StatefulProcessor.HandleInputRows(key, rows, tv, out)
}

// /healthz fails once a batch is in flight for MaxBatchDuration/2, before
// the watchdog gives it up at MaxBatchDuration.
func TestHealthStuck(t *testing.T) {
	brokers := startEmbedded(t, 1)
	entered, release := make(chan struct{}, 1), make(chan struct{})
	t.Cleanup(func() { close(release) })
	cfg := config(brokers, t.TempDir(), func() processor.StatefulProcessor[string, string, string] {
		return &blocking{StatefulProcessor: testprocs.NewCounter(), entered: entered, release: release}
	})
	cfg.Batching.MaxDuration = 4 * time.Second
	app := newApp(t, cfg)
	h := app.Handler()
	_, done := testprocs.StartWatch(t, app)
	testprocs.Produce(t, brokers, "in", "a=1")
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the processor was not called")
	}
	wantProbe(t, h, "/healthz", 200, "ok")
	testprocs.Eventually(t, 10*time.Second, "/healthz fails", func() bool {
		time.Sleep(50 * time.Millisecond)
		c, _ := get(t, h, "/healthz")
		return c == 503
	})
	if age := app.Metrics().BatchInFlight; age < cfg.Batching.MaxDuration/2 || app.State() != kstate.Running {
		t.Fatalf("/healthz failed with the batch in flight for %v, state %v", age, app.State())
	}
	wantProbe(t, h, "/healthz", 503, "stuck: a batch has been in flight for")
	<-done
	if app.State() != kstate.Failed {
		t.Fatalf("state %v after the watchdog gave up", app.State())
	}
}

// Options.Observability.HTTPAddr serves the handler while Run runs; an address that
// cannot be listened on fails Run.
func TestHealthHTTPAddr(t *testing.T) {
	brokers := startEmbedded(t, 1)
	addr := freeAddr(t)
	cfg := config(brokers, t.TempDir(), testprocs.NewCounter)
	cfg.Observability.HTTPAddr = addr
	app := newApp(t, cfg)
	stop, _ := testprocs.StartWatch(t, app)
	testprocs.Eventually(t, 30*time.Second, "/readyz on HTTPAddr", func() bool {
		time.Sleep(20 * time.Millisecond)
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get("http://" + addr + "/healthz"); err == nil {
		t.Fatal("the server still answers after Run returned")
	}

	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	cfg.Observability.HTTPAddr = busy.Addr().String()
	app2 := newApp(t, cfg)
	if err := app2.Run(t.Context()); err == nil || !strings.Contains(err.Error(), "HTTPAddr") || app2.State() != kstate.Failed {
		t.Fatalf("Run on a busy HTTPAddr: %v, state %v", err, app2.State())
	}
}

// freeAddr returns a local address nothing listens on (one the kernel just
// handed out and that was closed again).
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}
