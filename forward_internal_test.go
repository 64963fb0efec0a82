package kstate

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/kstate/kstate/internal/testlog"
	"github.com/kstate/kstate/internal/testprocs"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/serde"
)

func forwardApp(t *testing.T) *App[string, string, string] {
	app, err := New(Topology[string, string, string]{
		Inputs:       Topics(serde.String(), "in"),
		KeySerde:     serde.String(),
		NewProcessor: func() processor.StatefulProcessor[string, string, string] { return testprocs.NewCounter() },
		Output:       Output[string, string]{Topic: "out", Serde: serde.String()},
	}, Options{ApplicationID: "app", InstanceID: "i1", Kafka: KafkaOptions{Brokers: []string{"k:9092"}},
		State: StateOptions{Dir: t.TempDir()}, Observability: ObservabilityOptions{Logger: testlog.New(t)}})
	if err != nil {
		t.Fatal(err)
	}
	return app
}

// An owner that does not answer within the forward timeout gives 504 with
// the owner; the caller's request is not held longer.
func TestForwardTimeout(t *testing.T) {
	defer func(d time.Duration) { forwardTimeout = d }(forwardTimeout)
	forwardTimeout = 200 * time.Millisecond
	release := make(chan struct{})
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer hang.Close()
	defer close(release)
	app := forwardApp(t)
	rec := httptest.NewRecorder()
	start := time.Now()
	app.forward(rec, httptest.NewRequest("GET", "/state/count/k", nil), KeyOwner{Partition: 1, Assigned: true, InstanceID: "i2", URL: hang.URL})
	var f queryFailure
	if err := json.Unmarshal(rec.Body.Bytes(), &f); rec.Code != 504 || err != nil || f.Owner == nil || f.Owner.URL != hang.URL ||
		!strings.Contains(f.Error, "no answer within 200ms") || rec.Header().Get(headerAnsweredBy) != "i1" {
		t.Fatalf("a hanging owner: %d %v %s", rec.Code, rec.Header(), rec.Body)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("the forward took %v", took)
	}
}

// A forwarded query keeps its own path (before http.StripPrefix) and
// query; hop-by-hop headers stay behind.
func TestForwardTarget(t *testing.T) {
	var got *http.Request
	mux := http.NewServeMux()
	mux.Handle("/q/", http.StripPrefix("/q", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got = r })))
	mux.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/q/state/count/a%2Fb?key_base64=&forward=1", nil))
	if got == nil {
		t.Fatal("not routed")
	}
	target, err := forwardTarget("http://pod-1.app:8080/", got)
	if err != nil || target != "http://pod-1.app:8080/q/state/count/a%2Fb?key_base64=&forward=1" {
		t.Fatalf("target %q, %v", target, err)
	}
	h := http.Header{"Connection": {"close, X-Private"}, "X-Private": {"1"}, "Keep-Alive": {"5"}, "Authorization": {"Basic x"}, "Te": {"trailers"}}
	out := endToEnd(h)
	if len(out) != 1 || out.Get("Authorization") != "Basic x" || h.Get("X-Private") != "1" {
		t.Fatalf("endToEnd(%v) = %v", h, out)
	}
}
