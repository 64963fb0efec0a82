// Command kubernetes is a kstate application as it runs in a Kubernetes
// StatefulSet (the manifests are in deploy/, the walk-through in
// README.md): every setting comes from an environment variable, which the
// StatefulSet fills from a ConfigMap and from the pod itself (its name is
// the InstanceID, so a restarted pod is the same static group member; its
// persistent volume holds State.Dir). It serves the probes, the status
// page and /metrics on one port (Options.Observability.HTTPAddr, for the
// kubelet and Prometheus) and the live state queries on another, behind a
// bearer token (App.QueryHandler, at the URL it advertises to the other
// instances, Options.Group.AdvertisedURL), and stops gracefully on
// SIGTERM.
//
// It counts page views per user, like examples/production (which also
// shows TLS and SASL): input records keyed by user id with the page as
// value; it keeps the user's count and last page and emits them as JSON.
package main

import (
	"context"
	"crypto/subtle"
	"fmt"
	"iter"
	"log/slog"
	"net"
	"net/http"
	"net/url"
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

// Stats are a user's page views, the processor's state and output.
type Stats struct {
	Views    int64  `json:"views"`
	LastPage string `json:"last_page"`
}

// PageViews keeps Stats per user.
type PageViews struct {
	processor.Defaults[string, Stats]

	stats state.ValueState[Stats]
}

func (p *PageViews) Init(h processor.Handle) (err error) {
	p.stats, err = processor.NewValueState(h, "stats", state.JSON[Stats]())
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

// queryShutdownTimeout bounds the shutdown of the query server after Run
// returned; terminationGracePeriodSeconds counts it (see the manifests'
// test).
const queryShutdownTimeout = 5 * time.Second

// settings are what the environment configures.
type settings struct {
	top  kstate.Topology[string, string, Stats]
	opts kstate.Options
	// queryAddr serves App.QueryHandler to the requests bearing
	// queryToken.
	queryAddr, queryToken string
	logLevel              slog.Level
}

// settingsFromEnv reads the settings from environment variables (getenv
// is os.Getenv outside tests). In deploy/, the ConfigMap sets the
// application's, the StatefulSet those tied to the pod:
//
//	KSTATE_BROKERS                 Kafka bootstrap servers, comma-separated (required)
//	KSTATE_APPLICATION_ID          group id and topic prefix (default pageviews)
//	KSTATE_INPUT_TOPIC             (default page-views)
//	KSTATE_OUTPUT_TOPIC            (default user-stats)
//	KSTATE_INSTANCE_ID             the pod's name (required: stable per pod, unique in the group)
//	KSTATE_STATE_DIR               the persistent volume's mount (required)
//	KSTATE_HTTP_ADDR               probes, status page, /metrics (default :8081)
//	KSTATE_QUERY_ADDR              live state queries, GET /state/{variable}/{key} (default :8080)
//	KSTATE_QUERY_TOKEN             the bearer token the queries need (required)
//	KSTATE_ADVERTISED_URL          this pod's query URL as the other pods reach it (default: none)
//	KSTATE_STANDBYS                standby copies of each partition's state (default 0)
//	KSTATE_STATE_MEMORY            the RocksDB budget, bytes or with KiB, MiB, GiB (default 0: per shard)
//	KSTATE_SESSION_TIMEOUT         Kafka group session timeout, e.g. 30s (default kstate's)
//	KSTATE_SHUTDOWN_TIMEOUT        bound of the graceful shutdown, e.g. 30s (default kstate's, 30s)
//	KSTATE_LEAVE_GROUP_ON_SHUTDOWN "true" for a final stop (scale-in, decommission)
//	KSTATE_LOG_LEVEL               debug, info, warn or error (default info)
func settingsFromEnv(getenv func(string) string) (settings, error) {
	var s settings
	or := func(name, def string) string {
		if v := strings.TrimSpace(getenv(name)); v != "" {
			return v
		}
		return def
	}
	required := func(name, what string) (string, error) {
		if v := or(name, ""); v != "" {
			return v, nil
		}
		return "", fmt.Errorf("%s is not set: %s", name, what)
	}
	duration := func(name string) (time.Duration, error) {
		v := or(name, "0s")
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return 0, fmt.Errorf("%s=%q: want a duration such as 30s", name, v)
		}
		return d, nil
	}
	brokers, err := required("KSTATE_BROKERS", "the Kafka bootstrap servers, comma-separated")
	if err != nil {
		return s, err
	}
	instance, err := required("KSTATE_INSTANCE_ID", "the pod's name (env valueFrom fieldRef metadata.name), the instance's static group member id")
	if err != nil {
		return s, err
	}
	dir, err := required("KSTATE_STATE_DIR", "the mount path of the pod's persistent volume")
	if err != nil {
		return s, err
	}
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
		InstanceID:    instance,
		Kafka:         kstate.KafkaOptions{Brokers: strings.Split(brokers, ",")},
		State:         kstate.StateOptions{Dir: dir},
		Observability: kstate.ObservabilityOptions{HTTPAddr: or("KSTATE_HTTP_ADDR", ":8081")},
		Group:         kstate.GroupOptions{AdvertisedURL: or("KSTATE_ADVERTISED_URL", "")},
	}
	if u := s.opts.Group.AdvertisedURL; u != "" {
		if p, err := url.Parse(u); err != nil || p.Scheme == "" || p.Host == "" {
			return s, fmt.Errorf("KSTATE_ADVERTISED_URL=%q: want a URL such as http://pageviews-0.pageviews.default.svc:8080", u)
		}
	}
	if v := or("KSTATE_STANDBYS", "0"); v != "0" {
		if s.opts.Group.Standbys, err = strconv.Atoi(v); err != nil || s.opts.Group.Standbys < 0 {
			return s, fmt.Errorf("KSTATE_STANDBYS=%q: want a number of standby copies, 0 or more", v)
		}
	}
	if v := or("KSTATE_STATE_MEMORY", "0"); v != "0" {
		if s.opts.State.Memory, err = parseBytes(v); err != nil {
			return s, fmt.Errorf("KSTATE_STATE_MEMORY: %w", err)
		}
	}
	if s.opts.Kafka.SessionTimeout, err = duration("KSTATE_SESSION_TIMEOUT"); err != nil {
		return s, err
	}
	if s.opts.Timeouts.Shutdown, err = duration("KSTATE_SHUTDOWN_TIMEOUT"); err != nil {
		return s, err
	}
	leave := or("KSTATE_LEAVE_GROUP_ON_SHUTDOWN", "false")
	if s.opts.Kafka.LeaveGroupOnShutdown, err = strconv.ParseBool(leave); err != nil {
		return s, fmt.Errorf("KSTATE_LEAVE_GROUP_ON_SHUTDOWN=%q: want true or false", leave)
	}
	s.queryAddr = or("KSTATE_QUERY_ADDR", ":8080")
	if s.queryToken, err = required("KSTATE_QUERY_TOKEN", "the bearer token of the live queries (a Secret's key): "+
		"they answer with any user's state"); err != nil {
		return s, err
	}
	if err := s.logLevel.UnmarshalText([]byte(or("KSTATE_LOG_LEVEL", "info"))); err != nil {
		return s, fmt.Errorf("KSTATE_LOG_LEVEL: %w", err)
	}
	return s, nil
}

// parseBytes reads a number of bytes as GOMEMLIMIT writes it: an integer
// with an optional unit B, KiB, MiB, GiB or TiB.
func parseBytes(v string) (int64, error) {
	num, mult := v, int64(1)
	for i, unit := range []string{"TiB", "GiB", "MiB", "KiB", "B"} {
		if n, ok := strings.CutSuffix(v, unit); ok {
			num, mult = n, int64(1)<<(10*(4-i))
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("%q: want a number of bytes, optionally with a unit B, KiB, MiB, GiB or TiB (e.g. 768MiB)", v)
	}
	return n * mult, nil
}

func main() {
	// SIGTERM is how the kubelet stops a pod: the batch in flight commits
	// (or aborts) within Timeouts.Shutdown, then run returns; the pod's
	// terminationGracePeriodSeconds leaves room for that.
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
	ln, err := net.Listen("tcp", s.queryAddr)
	if err != nil {
		return fmt.Errorf("KSTATE_QUERY_ADDR: %w", err)
	}
	srv := &http.Server{Handler: requireToken(s.queryToken, app.QueryHandler()), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	// The queries are answered until Run returned: a peer may forward one
	// here while the last batch commits.
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), queryShutdownTimeout)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	log.Info("starting", "app", s.opts.ApplicationID, "instance", s.opts.InstanceID, "state_dir", s.opts.State.Dir,
		"http", s.opts.Observability.HTTPAddr, "queries", s.queryAddr, "advertised", s.opts.Group.AdvertisedURL)
	start := time.Now()
	err = app.Run(ctx)
	log.Info("stopped", "after", time.Since(start).Round(time.Millisecond), "err", err)
	return err
}

// requireToken passes to next only the requests that bear token
// ("Authorization: Bearer <token>", compared in constant time); the others
// get 401.
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
