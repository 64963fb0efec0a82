package harness

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/testcontainers/testcontainers-go"
	tckafka "github.com/testcontainers/testcontainers-go/modules/kafka"

	"github.com/kstate/kstate/internal/kafkabroker"
)

// DockerImage is the image the testcontainers path runs (the module expects
// confluent-local ≥ 7.4.0).
const DockerImage = "confluentinc/confluent-local:7.6.1"

var shared struct {
	once    sync.Once
	brokers []string
	source  string // how the broker was obtained
	err     error  // why no broker could be obtained
	stop    func()
}

func logf(format string, args ...any) { log.Printf(format, args...) }

func obtain() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	if env := strings.TrimSpace(os.Getenv("KSTATE_KAFKA_BROKERS")); env != "" {
		shared.brokers = strings.Split(env, ",")
		shared.source = "KSTATE_KAFKA_BROKERS=" + env
		return
	}

	var reasons []string
	if brokers, stop, err := fromDocker(ctx); err == nil {
		shared.brokers, shared.stop, shared.source = brokers, stop, "testcontainers ("+DockerImage+")"
		return
	} else {
		reasons = append(reasons, "docker: "+err.Error())
	}

	libs, err := kafkabroker.ResolveJars(ctx, logf)
	if err == nil {
		var b *kafkabroker.Broker
		if b, err = kafkabroker.StartBroker(ctx, libs, kafkabroker.StartOptions{}, logf); err == nil {
			shared.brokers, shared.stop = []string{b.Addr}, b.Stop
			shared.source = "Apache Kafka " + kafkabroker.KafkaVersion + " from Maven Central jars"
			return
		}
	}
	reasons = append(reasons, "jars: "+err.Error())
	shared.err = fmt.Errorf("no Kafka broker could be obtained (%s)", strings.Join(reasons, "; "))
}

// fromDocker starts Kafka with testcontainers when a Docker engine is healthy.
func fromDocker(ctx context.Context) ([]string, func(), error) {
	if _, err := exec.LookPath("docker"); err != nil {
		return nil, nil, fmt.Errorf("no docker client")
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
	c, err := tckafka.Run(ctx, DockerImage, tckafka.WithClusterID("kstate-test"))
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

// Brokers returns the bootstrap addresses of a real Kafka broker, obtaining
// one on the first call. Without one it skips the test, or fails it when
// CI=true.
func Brokers(tb testing.TB) []string {
	tb.Helper()
	shared.once.Do(obtain)
	if shared.err != nil {
		if os.Getenv("CI") == "true" {
			tb.Fatalf("REAL KAFKA REQUIRED (CI=true): %v", shared.err)
		}
		tb.Skipf("SKIPPING REAL-KAFKA TEST: %v", shared.err)
	}
	return shared.brokers
}

// KafkaVersion is the Apache Kafka release run from the jars.
const KafkaVersion = kafkabroker.KafkaVersion

// Source says how the broker of this test binary was obtained ("" before Brokers).
func Source() string { return shared.source }

// Main runs the tests and stops the broker afterwards. Use it from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(harness.Main(m)) }
func Main(m *testing.M) int {
	code := m.Run()
	if shared.stop != nil {
		shared.stop()
	}
	return code
}
