// Command production is kstate deployed the way a service runs in a
// cluster: configured by environment variables (brokers, TLS, SASL, state
// directory, instance id), serving its status page, /metrics, /healthz
// and /readyz on one HTTP port and, when asked, live state queries on
// another behind a bearer token (App.QueryHandler: the probes' port can be
// open to the kubelet and Prometheus without exposing any user's state),
// logging JSON, and shutting down gracefully on SIGTERM (Kubernetes,
// systemd) as on Ctrl-C.
//
// It counts page views per user: input records keyed by user id with the
// page as value; it keeps per-user stats in an Avro-encoded ValueState
// (so fields can be added later, see state.Avro) and emits them as JSON.
//
//	KSTATE_BROKERS=kafka-0:9093 KSTATE_TLS_CA_FILE=/etc/kafka/ca.pem \
//	KSTATE_SASL_MECHANISM=SCRAM-SHA-512 KSTATE_SASL_USERNAME=pageviews \
//	KSTATE_SASL_PASSWORD=... go run ./examples/production
//
// Every variable is listed in settingsFromEnv. The principal needs the
// ACLs of docs/OPERATIONS.md ("Security").
package main

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/serde"
	"github.com/kstate/kstate/state"
)

// Stats are a user's page-view stats, the processor's state and output.
type Stats struct {
	Views    int64  `avro:"views" json:"views"`
	LastPage string `avro:"last_page" json:"last_page"`
}

// PageViews keeps Stats per user.
type PageViews struct {
	processor.Defaults[string, Stats]

	stats state.ValueState[Stats]
}

func (p *PageViews) Init(h processor.Handle) (err error) {
	p.stats, err = processor.NewValueState(h, "stats", state.Avro[Stats]())
	return err
}

func (p *PageViews) HandleInputRows(_ string, pages iter.Seq[string], _ processor.TimerValues, out processor.Emitter[Stats]) error {
	s, _, err := p.stats.Get()
	if err != nil {
		return err
	}
	for page := range pages {
		s.Views++
		s.LastPage = page
	}
	if err := p.stats.Update(s); err != nil {
		return err
	}
	return out.Emit(s)
}

// settings are what the environment configures.
type settings struct {
	top      kstate.Topology[string, string, Stats]
	opts     kstate.Options
	logLevel slog.Level
	// queryAddr serves the live state queries (App.QueryHandler) to
	// requests bearing queryToken; "": not served.
	queryAddr, queryToken string
}

// settingsFromEnv reads the configuration from environment variables
// (getenv is os.Getenv outside tests):
//
//	KSTATE_BROKERS                 bootstrap servers, comma-separated (required)
//	KSTATE_APPLICATION_ID          group id and topic prefix (default pageviews)
//	KSTATE_INPUT_TOPIC             (default page-views)
//	KSTATE_OUTPUT_TOPIC            (default user-stats)
//	KSTATE_INSTANCE_ID             stable per instance, e.g. a StatefulSet pod name (default: the host name)
//	KSTATE_STATE_DIR               local state, on a persistent volume (default /var/lib/kstate)
//	KSTATE_HTTP_ADDR               status page, /metrics, probes (default :8080)
//	KSTATE_QUERY_ADDR              live state queries, GET /state/{variable}/{key} (default: not served)
//	KSTATE_QUERY_TOKEN             the bearer token KSTATE_QUERY_ADDR requires (required with it)
//	KSTATE_TLS                     "true": TLS with the system's roots (implied by any KSTATE_TLS_*_FILE)
//	KSTATE_TLS_CA_FILE             PEM certificates that sign the brokers' certificates
//	KSTATE_TLS_CERT_FILE, KSTATE_TLS_KEY_FILE   client certificate and key (mutual TLS)
//	KSTATE_SASL_MECHANISM          PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (default: no SASL)
//	KSTATE_SASL_USERNAME, KSTATE_SASL_PASSWORD
//	KSTATE_STATE_MEMORY            bytes of the shared RocksDB budget (default 0: per shard)
//	KSTATE_LEAVE_GROUP_ON_SHUTDOWN "true" for a final shutdown (scale-in, decommission)
//	KSTATE_LOG_LEVEL               debug, info, warn or error (default info)
func settingsFromEnv(getenv func(string) string) (settings, error) {
	or := func(name, def string) string {
		if v := strings.TrimSpace(getenv(name)); v != "" {
			return v
		}
		return def
	}
	boolean := func(name string) (bool, error) {
		v := or(name, "false")
		b, err := strconv.ParseBool(v)
		if err != nil {
			return false, fmt.Errorf("%s=%q: want true or false", name, v)
		}
		return b, nil
	}
	var s settings
	brokers := or("KSTATE_BROKERS", "")
	if brokers == "" {
		return s, errors.New("KSTATE_BROKERS is not set: the Kafka bootstrap servers, comma-separated")
	}
	host, _ := os.Hostname()
	s.top = kstate.Topology[string, string, Stats]{
		Inputs:       kstate.Topics(serde.String(), or("KSTATE_INPUT_TOPIC", "page-views")),
		KeySerde:     serde.String(),
		NewProcessor: func() processor.StatefulProcessor[string, string, Stats] { return &PageViews{} },
		Output: kstate.Output[string, Stats]{
			Topic: or("KSTATE_OUTPUT_TOPIC", "user-stats"),
			Serde: serde.JSON[Stats](),
		},
	}
	s.opts = kstate.Options{
		ApplicationID: or("KSTATE_APPLICATION_ID", "pageviews"),
		InstanceID:    or("KSTATE_INSTANCE_ID", host),
		Kafka: kstate.KafkaOptions{
			Brokers: strings.Split(brokers, ","),
		},
		State: kstate.StateOptions{
			Dir: or("KSTATE_STATE_DIR", "/var/lib/kstate"),
		},
		Observability: kstate.ObservabilityOptions{
			HTTPAddr: or("KSTATE_HTTP_ADDR", ":8080"),
		},
	}
	ca, cert, key := getenv("KSTATE_TLS_CA_FILE"), getenv("KSTATE_TLS_CERT_FILE"), getenv("KSTATE_TLS_KEY_FILE")
	useTLS, err := boolean("KSTATE_TLS")
	if err != nil {
		return s, err
	}
	if useTLS || ca != "" || cert != "" || key != "" {
		if s.opts.Kafka.TLS, err = kstate.TLSConfigFromFiles(ca, cert, key); err != nil {
			return s, fmt.Errorf("KSTATE_TLS_*: %w", err)
		}
	}
	if s.opts.Kafka.SASL, err = kstate.SASLFromStrings(getenv("KSTATE_SASL_MECHANISM"), getenv("KSTATE_SASL_USERNAME"), getenv("KSTATE_SASL_PASSWORD")); err != nil {
		return s, fmt.Errorf("KSTATE_SASL_*: %w", err)
	}
	if v := or("KSTATE_STATE_MEMORY", "0"); v != "0" {
		if s.opts.State.Memory, err = strconv.ParseInt(v, 10, 64); err != nil || s.opts.State.Memory < 0 {
			return s, fmt.Errorf("KSTATE_STATE_MEMORY=%q: want a number of bytes", v)
		}
	}
	if s.opts.Kafka.LeaveGroupOnShutdown, err = boolean("KSTATE_LEAVE_GROUP_ON_SHUTDOWN"); err != nil {
		return s, err
	}
	s.queryAddr, s.queryToken = or("KSTATE_QUERY_ADDR", ""), or("KSTATE_QUERY_TOKEN", "")
	if s.queryAddr != "" && s.queryToken == "" {
		return s, errors.New("KSTATE_QUERY_ADDR is set but KSTATE_QUERY_TOKEN is not: the live queries answer with any user's state, " +
			"so they need the token their callers send (Authorization: Bearer <token>)")
	}
	if err := s.logLevel.UnmarshalText([]byte(or("KSTATE_LOG_LEVEL", "info"))); err != nil {
		return s, fmt.Errorf("KSTATE_LOG_LEVEL: %w", err)
	}
	return s, nil
}

func main() {
	// SIGTERM is how Kubernetes and systemd stop a service: the batch in
	// flight commits (or aborts) within ShutdownTimeout, then Run returns.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Getenv); err != nil {
		slog.Error("pageviews stopped", "err", err)
		os.Exit(1)
	}
}

// run builds the App from the environment and runs it until ctx is done.
func run(ctx context.Context, getenv func(string) string) error {
	s, err := settingsFromEnv(getenv)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: s.logLevel}))
	s.opts.Observability.Logger = log
	app, err := kstate.New(s.top, s.opts)
	if err != nil {
		return err
	}
	if s.queryAddr != "" {
		ln, err := net.Listen("tcp", s.queryAddr)
		if err != nil {
			return fmt.Errorf("KSTATE_QUERY_ADDR: %w", err)
		}
		// In production put TLS in front (srv.ServeTLS, or the mesh's):
		// the token and the state travel in the clear otherwise.
		srv := &http.Server{Handler: requireToken(s.queryToken, app.QueryHandler()), ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(sctx)
		}()
	}
	log.Info("starting", "app", s.opts.ApplicationID, "instance", s.opts.InstanceID, "http", s.opts.Observability.HTTPAddr,
		"queries", s.queryAddr, "tls", s.opts.Kafka.TLS != nil, "sasl", s.opts.Kafka.SASL != nil)
	start := time.Now()
	err = app.Run(ctx)
	log.Info("stopped", "after", time.Since(start).Round(time.Millisecond), "err", err)
	return err
}

// requireToken passes to next only the requests that bear token
// ("Authorization: Bearer <token>", compared in constant time); the others
// get 401. Put your own authentication here (mutual TLS, OIDC, ...).
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
