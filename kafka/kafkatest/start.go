package kafkatest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/testcontainers/testcontainers-go"
	tckafka "github.com/testcontainers/testcontainers-go/modules/kafka"

	"github.com/kstate/kstate/internal/kafkabroker"
	"github.com/kstate/kstate/kafka/embedded"
)

// dockerImage is the image of the testcontainers path (the module expects
// confluent-local >= 7.4.0).
const dockerImage = "confluentinc/confluent-local:7.6.1"

// Option changes what Start accepts.
type Option func(*options)

type options struct {
	requireReal bool
}

// RequireReal makes Start refuse the in-process fallback: without a real
// broker the test is skipped with a loud message, or fails when CI=true.
func RequireReal() Option { return func(o *options) { o.requireReal = true } }

// Cluster is the Kafka cluster of a test binary, shared by its tests.
type Cluster struct {
	brokers []string
	source  string
	real    bool
	passed  string // why the real options were passed over (fallback only)
	logged  sync.Once
}

// Brokers returns the bootstrap addresses, for kstate.Options.Kafka.Brokers.
func (c *Cluster) Brokers() []string { return append([]string(nil), c.brokers...) }

// Source says which cluster this is, for logs: "KSTATE_KAFKA_BROKERS",
// "testcontainers (<image>)", "Apache Kafka <version> from Maven jars" or
// "embedded in-process cluster (kfake)".
func (c *Cluster) Source() string { return c.source }

// Real reports whether the cluster is a real Kafka broker rather than the
// in-process stand-in.
func (c *Cluster) Real() bool { return c.real }

// The cluster outlives every test of the binary (starting a broker takes
// seconds), so it is process state by nature, as the test binary is; it is
// kept here and only here.
var shared struct {
	real     onceCluster
	fallback onceCluster
	main     atomic.Bool // Main is running the tests

	mu    sync.Mutex
	stops []func() // run by Main, newest first
}

type onceCluster struct {
	once sync.Once
	c    *Cluster
	err  error
}

func (o *onceCluster) get(start func() (*Cluster, error)) (*Cluster, error) {
	o.once.Do(func() { o.c, o.err = start() })
	return o.c, o.err
}

func atExit(stop func()) {
	shared.mu.Lock()
	shared.stops = append(shared.stops, stop)
	shared.mu.Unlock()
}

// Start returns the test binary's Kafka cluster, obtaining it on the first
// call (see the package documentation for the order). It fails t if no
// cluster at all can be started, and with RequireReal skips or fails t when
// there is no real broker.
func Start(t testing.TB, opts ...Option) *Cluster {
	t.Helper()
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	c, err := shared.real.get(startReal)
	if err != nil {
		if o.requireReal {
			if os.Getenv("CI") == "true" {
				t.Fatalf("REAL KAFKA REQUIRED (CI=true): %v", err)
			}
			t.Skipf("SKIPPING REAL-KAFKA TEST: %v", err)
		}
		c, err = shared.fallback.get(func() (*Cluster, error) { return startEmbedded(err) })
		if err != nil {
			t.Fatalf("kafkatest: %v", err)
		}
	}
	c.announce()
	t.Logf("kafkatest: using %s at %s", c.source, strings.Join(c.brokers, ","))
	if c.passed != "" {
		t.Logf("kafkatest: no real broker: %s", c.passed)
	}
	return c
}

// announce tells stderr, once per cluster, which cluster the tests use.
func (c *Cluster) announce() {
	c.logged.Do(func() {
		logf("using %s at %s", c.source, strings.Join(c.brokers, ","))
		if c.passed != "" {
			logf("no real broker (%s); tests with RequireReal are skipped (and fail when CI=true)", c.passed)
		}
		if !shared.main.Load() && c.source != envSource && c.real {
			logf("no TestMain calls kafkatest.Main: the broker stops only when the test binary exits " +
				"(func TestMain(m *testing.M) { os.Exit(kafkatest.Main(m)) } stops it cleanly)")
		}
	})
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "kafkatest: "+format+"\n", args...)
}

// Main runs the tests and then stops the cluster they used. Call it from
// TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(kafkatest.Main(m)) }
func Main(m *testing.M) int {
	shared.main.Store(true)
	code := m.Run()
	shared.mu.Lock()
	stops := shared.stops
	shared.stops = nil
	shared.mu.Unlock()
	for i := len(stops) - 1; i >= 0; i-- {
		stops[i]()
	}
	return code
}

const envSource = "KSTATE_KAFKA_BROKERS"

// startReal obtains a real broker: the user's, Docker's, or the jars'.
func startReal() (*Cluster, error) {
	if env := strings.TrimSpace(os.Getenv(envSource)); env != "" {
		return &Cluster{brokers: strings.Split(env, ","), source: envSource, real: true}, nil
	}
	// Resolving the jars with an empty Maven cache takes a few minutes.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	var reasons []string
	brokers, stop, err := fromDocker(ctx)
	if err == nil {
		atExit(stop)
		return &Cluster{brokers: brokers, source: "testcontainers (" + dockerImage + ")", real: true}, nil
	}
	reasons = append(reasons, "docker: "+err.Error())

	libs, err := kafkabroker.ResolveJars(ctx, logf)
	if err == nil {
		var b *kafkabroker.Broker
		if b, err = kafkabroker.StartBroker(ctx, libs, kafkabroker.StartOptions{}, logf); err == nil {
			atExit(b.Discard)
			return &Cluster{brokers: []string{b.Addr}, source: "Apache Kafka " + kafkabroker.KafkaVersion + " from Maven jars", real: true}, nil
		}
	}
	reasons = append(reasons, "jars: "+err.Error())
	return nil, fmt.Errorf("no Kafka broker could be obtained (%s)", strings.Join(reasons, "; "))
}

// fromDocker starts Kafka with testcontainers when a Docker engine is healthy.
func fromDocker(ctx context.Context) ([]string, func(), error) {
	if _, err := exec.LookPath("docker"); err != nil {
		return nil, nil, errors.New("no docker client on PATH")
	}
	p, err := testcontainers.NewDockerProvider()
	if err != nil {
		return nil, nil, err
	}
	hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err = p.Health(hctx)
	cancel()
	_ = p.Close()
	if err != nil {
		return nil, nil, fmt.Errorf("engine not healthy: %w", err)
	}
	c, err := tckafka.Run(ctx, dockerImage, tckafka.WithClusterID("kstate-test"))
	if err != nil {
		return nil, nil, err
	}
	brokers, err := c.Brokers(ctx)
	if err != nil {
		_ = testcontainers.TerminateContainer(c)
		return nil, nil, err
	}
	return brokers, func() { _ = testcontainers.TerminateContainer(c) }, nil
}

// startEmbedded starts the in-process fallback; why says why no real broker
// was used.
func startEmbedded(why error) (*Cluster, error) {
	e, err := embedded.Start(embedded.Options{})
	if err != nil {
		return nil, fmt.Errorf("no real broker (%v), and the embedded cluster did not start: %w", why, err)
	}
	atExit(e.Close)
	return &Cluster{brokers: e.Brokers(), source: "embedded in-process cluster (kfake)", passed: why.Error()}, nil
}
