package kstate_test

import (
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/internal/testprocs"
)

// The handlers are split by trust: Handler (probes, metrics, status) does
// not serve live state queries, neither mounted nor on Options.Observability.HTTPAddr;
// QueryHandler serves them and nothing else.
func TestHandlerServesNoState(t *testing.T) {
	brokers := startEmbedded(t, 1)
	addr := freeAddr(t)
	cfg := config(brokers, t.TempDir(), testprocs.NewCounter)
	cfg.Observability.HTTPAddr = addr
	app := newApp(t, cfg)
	testprocs.Start(t, app)
	testprocs.Eventually(t, 30*time.Second, "running", func() bool {
		time.Sleep(20 * time.Millisecond)
		return app.State() == kstate.Running
	})
	testprocs.Produce(t, brokers, "in", "k=a", "k=b")
	testprocs.WaitOutputs(t, brokers, "out", 2, 30*time.Second)

	// The query handler answers with the committed count.
	q := app.QueryHandler()
	testprocs.Eventually(t, 10*time.Second, "GET /state/count/k on QueryHandler", func() bool {
		code, body := get(t, q, "/state/count/k")
		var res kstate.QueryResult
		return code == 200 && json.Unmarshal([]byte(body), &res) == nil && len(res.Entries) == 1 && string(res.Entries[0].Value) == "2"
	})
	// The probe handler does not, for a key with state or without, nor
	// for an unknown variable.
	h := app.Handler()
	for _, path := range []string{"/state/count/k", "/state/count/none", "/state/nope/k", "/state/count/k?key_base64=1"} {
		wantProbe(t, h, path, 404, "404 page not found")
	}
	// Nor does the App's own listener.
	resp, err := http.Get("http://" + addr + "/state/count/k")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Fatalf("GET /state/count/k on Options.Observability.HTTPAddr: %d %s, want 404", resp.StatusCode, body)
	}
	// The probes are still there.
	wantProbe(t, h, "/readyz", 200, "ok")
	// The query handler serves queries only: no probe, metrics or status.
	for _, path := range []string{"/", "/healthz", "/readyz", "/status", "/metrics"} {
		wantProbe(t, q, path, 404, "404 page not found")
	}
}
