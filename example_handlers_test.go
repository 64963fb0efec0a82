package kstate_test

import (
	"crypto/subtle"
	"fmt"
	"iter"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/serde"
	"github.com/kstate/kstate/state"
)

// wordCounter counts the rows of each key in the ValueState "count".
type wordCounter struct {
	processor.Defaults[string, int64]
	count state.ValueState[int64]
}

func (c *wordCounter) Init(h processor.Handle) (err error) {
	c.count, err = processor.NewValueState(h, "count", state.Int64())
	return err
}

func (c *wordCounter) HandleInputRows(_ string, rows iter.Seq[string], _ processor.TimerValues, out processor.Emitter[int64]) error {
	n, _, err := c.count.Get()
	if err != nil {
		return err
	}
	for range rows {
		n++
	}
	if err := c.count.Update(n); err != nil {
		return err
	}
	return out.Emit(n)
}

// requireToken is your own authentication middleware, here a bearer token
// compared in constant time; in production whatever your other services
// use (mutual TLS, OIDC, a service mesh's identity).
func requireToken(token string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="kstate queries"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// The probes, metrics and status page for anyone who may see the
// application's health (the kubelet, Prometheus, the load balancer); the
// live state queries only for callers with a token. Here both on one mux;
// a separate port for the queries (e.g. for a NetworkPolicy) works the
// same way, see examples/production.
func ExampleApp_QueryHandler() {
	app, err := kstate.New(kstate.Topology[string, string, int64]{
		Inputs:       kstate.Topics(serde.String(), "words"),
		KeySerde:     serde.String(),
		NewProcessor: func() processor.StatefulProcessor[string, string, int64] { return &wordCounter{} },
		Output:       kstate.Output[string, int64]{Topic: "counts", Serde: serde.Int64()},
	}, kstate.Options{
		ApplicationID: "wordcount",
		Kafka:         kstate.KafkaOptions{Brokers: []string{"kafka:9092"}},
	})
	if err != nil {
		panic(err)
	}
	const token = "s3cret" // in production: from a secret, never in the code
	mux := http.NewServeMux()
	mux.Handle("/", app.Handler())                                 // probes, metrics, status
	mux.Handle("/state/", requireToken(token, app.QueryHandler())) // live queries: authenticated
	// In production: serve mux over TLS while app.Run runs, e.g.
	// go http.ListenAndServeTLS(":8443", "tls.crt", "tls.key", mux).
	srv := httptest.NewServer(mux)
	defer srv.Close()

	get := func(path, token string) string {
		req, _ := http.NewRequest("GET", srv.URL+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err.Error()
		}
		resp.Body.Close()
		return resp.Status
	}
	fmt.Println("probe, no token:      ", get("/healthz", ""))
	fmt.Println("query, no token:      ", get("/state/count/hello", ""))
	fmt.Println("query, wrong token:   ", get("/state/count/hello", "guess"))
	// The query reaches the App, which has not joined its group yet (Run
	// has not started): 503, ErrNotRunning.
	fmt.Println("query, with the token:", get("/state/count/hello", token))
	// Output:
	// probe, no token:       200 OK
	// query, no token:       401 Unauthorized
	// query, wrong token:    401 Unauthorized
	// query, with the token: 503 Service Unavailable
}
