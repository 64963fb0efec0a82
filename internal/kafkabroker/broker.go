// Package kafkabroker runs a real Apache Kafka broker (KRaft, one combined
// broker+controller) from the official jars on Maven Central, resolved once
// into ~/.cache/kstate/kafka-<version>/. Package kafka/kafkatest, the
// benchmark and `make kafka-up` use it; it imports neither testing nor
// Docker libraries, so binaries that start a broker stay small.
package kafkabroker

import (
	"bufio"
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// KafkaVersion is the Apache Kafka release run from Maven Central.
// It is pinned here and nowhere else.
const KafkaVersion = "4.1.1"

//go:embed kafka-pom.xml
var kafkaPOM []byte

// CacheDir is where resolved jars live: $KSTATE_CACHE_DIR, else ~/.cache/kstate.
func CacheDir() (string, error) {
	if d := os.Getenv("KSTATE_CACHE_DIR"); d != "" {
		return d, nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("kafkabroker: no cache directory: %w", err)
	}
	return filepath.Join(d, "kstate"), nil
}

// ResolveJars makes sure the Kafka broker jars are in the cache and returns
// the directory holding them. It runs Maven only when the cache is empty.
func ResolveJars(ctx context.Context, logf func(string, ...any)) (string, error) {
	cache, err := CacheDir()
	if err != nil {
		return "", err
	}
	base := filepath.Join(cache, "kafka-"+KafkaVersion)
	libs := filepath.Join(base, "libs")
	done := filepath.Join(base, "RESOLVED")
	if _, err := os.Stat(done); err == nil {
		return libs, nil
	}
	if _, err := exec.LookPath("mvn"); err != nil {
		return "", fmt.Errorf("kafkabroker: mvn not found on PATH: %w", err)
	}
	if err := os.MkdirAll(base, 0o755); err != nil {
		return "", err
	}
	pom := filepath.Join(base, "pom.xml")
	if err := os.WriteFile(pom, kafkaPOM, 0o644); err != nil {
		return "", err
	}
	_ = os.RemoveAll(libs)
	start := time.Now()
	logf("kafkabroker: resolving Apache Kafka %s jars from Maven Central into %s", KafkaVersion, libs)
	cmd := exec.CommandContext(ctx, "mvn", "-B", "-q", "-f", pom,
		"-Dkafka.version="+KafkaVersion,
		"dependency:copy-dependencies", "-DincludeScope=runtime", "-DoutputDirectory="+libs)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("kafkabroker: mvn dependency:copy-dependencies failed: %w\n%s", err, out)
	}
	if err := os.WriteFile(done, []byte(time.Now().UTC().Format(time.RFC3339)+"\n"), 0o644); err != nil {
		return "", err
	}
	logf("kafkabroker: resolved Kafka jars in %s", time.Since(start).Round(time.Millisecond))
	return libs, nil
}

// Broker is a real Kafka broker process run from the jars.
type Broker struct {
	Addr    string // bootstrap address, 127.0.0.1:port
	Dir     string // temporary directory: config, data, logs
	cmd     *exec.Cmd
	exited  chan struct{}
	waitErr error
	// argv and attr start the broker again (Restart): the JVM command
	// line and its process attributes.
	argv []string
	attr *syscall.SysProcAttr
}

// freePorts returns n distinct free ports, none of them in taken. It keeps
// every port it found listening until it has all of them: a port picked
// and released one at a time can come back for the next pick (CI once
// gave the broker and controller listeners the same port, and Kafka
// refused to format its storage).
func freePorts(n int, taken ...int) ([]int, error) {
	var ports []int
	for tries := 0; len(ports) < n; tries++ {
		if tries > 100 {
			return nil, fmt.Errorf("kafkabroker: no %d free ports outside %v", n, taken)
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		if p := l.Addr().(*net.TCPAddr).Port; !slices.Contains(taken, p) {
			ports = append(ports, p)
		}
	}
	return ports, nil
}

// clusterID is a random cluster id in Kafka's form (a base64url UUID).
// Like Kafka's Uuid.randomUuid it never starts with '-', which the
// command-line parsers would take for an option ("--cluster-id: expected
// one argument", 1 format in 64 before this check).
func clusterID() string {
	for {
		var b [16]byte
		_, _ = rand.Read(b[:])
		if id := base64.RawURLEncoding.EncodeToString(b[:]); id[0] != '-' {
			return id
		}
	}
}

// brokerConfig is a single combined broker+controller tuned for tests:
// replication 1 for internal topics, no initial rebalance delay, and a short
// transaction abort/cleanup cadence so tests of zombie transactions are fast,
// and no time retention (commonConfig).
func brokerConfig(dir string, port, cport int, advertised string) string {
	if advertised == "" {
		advertised = fmt.Sprintf("127.0.0.1:%d", port)
	}
	return strings.Join(append([]string{
		"process.roles=broker,controller",
		"node.id=1",
		fmt.Sprintf("controller.quorum.voters=1@127.0.0.1:%d", cport),
		fmt.Sprintf("listeners=PLAINTEXT://127.0.0.1:%d,CONTROLLER://127.0.0.1:%d", port, cport),
		"advertised.listeners=PLAINTEXT://" + advertised,
		"controller.listener.names=CONTROLLER",
		"inter.broker.listener.name=PLAINTEXT",
		"listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
	}, commonConfig(dir)...), "\n")
}

// commonConfig is the part of the configuration that does not depend on
// the listeners.
func commonConfig(dir string) []string {
	return []string{
		"log.dirs=" + filepath.Join(dir, "data"),
		"num.partitions=1",
		"offsets.topic.replication.factor=1",
		"offsets.topic.num.partitions=4",
		"transaction.state.log.replication.factor=1",
		"transaction.state.log.min.isr=1",
		"transaction.state.log.num.partitions=4",
		"group.initial.rebalance.delay.ms=0",
		"transaction.abort.timed.out.transaction.cleanup.interval.ms=2000",
		"log.cleaner.backoff.ms=1000",
		// No time retention. The broker's default (7 days) counts from a
		// record's own timestamp, and tests use fixed event times: a
		// segment of records from 2024 is deleted by the first retention
		// check (30 s after start, then every 5 minutes), input or output
		// vanishing mid-test depending only on when the test runs.
		"log.retention.ms=-1",
		"auto.create.topics.enable=false",
		"",
	}
}

const log4jConfig = `Configuration:
  Appenders:
    File:
      name: F
      fileName: "%s"
      PatternLayout: {pattern: "[%%d] %%p %%m (%%c)%%n"}
  Loggers:
    Root: {level: INFO, AppenderRef: [{ref: F}]}
`

// StartOptions tune StartBroker; the zero value is what tests use.
type StartOptions struct {
	// Port is the client port; 0 picks a free one.
	Port int
	// Detached lets the broker outlive this process (make kafka-up); by
	// default it is killed when the process that started it dies.
	Detached bool
	// Secure, when set, replaces the PLAINTEXT listener with a SASL_SSL
	// one with ACLs enforced (see SASLSSL).
	Secure *SASLSSL
	// FullJIT runs the JVM as a production broker does (tiered
	// compilation up to C2, Kafka's 1 GiB heap), for benchmarks: by default
	// the JIT stops at C1, which starts faster (tests start many brokers)
	// but spends more CPU per request once warm, CPU a benchmark on a
	// small machine takes from the application it measures.
	FullJIT bool
	// AdvertisedAddr, host:port, is advertised to clients instead of the
	// listener's own address: a test's proxy in front of the broker then
	// carries every connection after the bootstrap (the broker's own
	// connections to its advertised listener too). Not with Secure.
	AdvertisedAddr string
}

// StartBroker formats a fresh KRaft log directory and starts a broker from
// the jars in libs. It returns once the broker accepts connections.
func StartBroker(ctx context.Context, libs string, o StartOptions, logf func(string, ...any)) (*Broker, error) {
	java, err := exec.LookPath("java")
	if err != nil {
		return nil, fmt.Errorf("kafkabroker: java not found on PATH: %w", err)
	}
	dir, err := os.MkdirTemp("", "kstate-kafka-")
	if err != nil {
		return nil, err
	}
	port, cport := o.Port, 0
	if port == 0 {
		ports, err := freePorts(2)
		if err != nil {
			return nil, err
		}
		port, cport = ports[0], ports[1]
	} else {
		ports, err := freePorts(1, port)
		if err != nil {
			return nil, err
		}
		cport = ports[0]
	}
	props := filepath.Join(dir, "server.properties")
	if o.AdvertisedAddr != "" && o.Secure != nil {
		return nil, errors.New("kafkabroker: StartOptions.AdvertisedAddr is not supported with Secure")
	}
	config := brokerConfig(dir, port, cport, o.AdvertisedAddr)
	var scram []string
	if o.Secure != nil {
		if config, err = o.Secure.config(dir, port, cport); err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
		scram = o.Secure.scramArgs()
	}
	if err := os.WriteFile(props, []byte(config), 0o644); err != nil {
		return nil, err
	}
	logCfg := filepath.Join(dir, "log4j2.yaml")
	if err := os.WriteFile(logCfg, []byte(fmt.Sprintf(log4jConfig, filepath.Join(dir, "server.log"))), 0o644); err != nil {
		return nil, err
	}
	cp := filepath.Join(libs, "*")
	jvm := jvmArgs(o.FullJIT, logCfg)

	format := exec.CommandContext(ctx, java, append(append(jvm, "-cp", cp, "kafka.tools.StorageTool",
		"format", "--cluster-id="+clusterID(), "-c", props), scram...)...)
	if out, err := format.CombinedOutput(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("kafkabroker: kafka storage format failed: %w\n%s", err, out)
	}

	b := &Broker{Addr: fmt.Sprintf("127.0.0.1:%d", port), Dir: dir,
		argv: append([]string{java}, append(jvm, "-cp", cp, "kafka.Kafka", props)...)}
	// The broker dies with the test binary even when the binary is killed.
	b.attr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if o.Detached {
		b.attr = &syscall.SysProcAttr{Setsid: true}
	}
	start := time.Now()
	if err := b.launch(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	if err := b.waitReady(ctx, 90*time.Second); err != nil {
		tail := b.logTail(30)
		b.Stop()
		return nil, fmt.Errorf("kafkabroker: kafka broker did not become ready: %w\n--- broker log tail ---\n%s", err, tail)
	}
	logf("kafkabroker: started Apache Kafka %s (KRaft, pid %d) at %s in %s; logs in %s",
		KafkaVersion, b.cmd.Process.Pid, b.Addr, time.Since(start).Round(time.Millisecond), dir)
	return b, nil
}

// jvmArgs are the JVM's options: C1 only and a 256 MiB initial heap
// (starts fast), or with fullJIT what a production broker runs.
func jvmArgs(fullJIT bool, logCfg string) []string {
	if fullJIT {
		// Kafka's own kafka-server-start.sh settings (KAFKA_HEAP_OPTS and
		// KAFKA_JVM_PERFORMANCE_OPTS).
		return []string{"-Xms1g", "-Xmx1g", "-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
			"-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent", "-XX:MaxInlineLevel=15",
			"-Djava.awt.headless=true", "-Dlog4j2.configurationFile=" + logCfg}
	}
	return []string{"-Xms256m", "-Xmx1g", "-XX:+UseG1GC", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true",
		"-Dlog4j2.configurationFile=" + logCfg}
}

// launch starts the broker process (argv), its output appended to
// stdout.log in Dir.
func (b *Broker) launch() error {
	stdout, err := os.OpenFile(filepath.Join(b.Dir, "stdout.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	b.cmd = exec.Command(b.argv[0], b.argv[1:]...)
	b.cmd.Stdout, b.cmd.Stderr = stdout, stdout
	b.cmd.SysProcAttr = b.attr
	if err := b.cmd.Start(); err != nil {
		stdout.Close()
		return fmt.Errorf("kafkabroker: start kafka: %w", err)
	}
	b.exited = make(chan struct{})
	cmd, exited := b.cmd, b.exited
	go func() { b.waitErr = cmd.Wait(); stdout.Close(); close(exited) }()
	return nil
}

// Kill ends the broker process at once with SIGKILL (a crash: no
// controlled shutdown, nothing flushed) and waits for it to exit. Its
// directory is kept: Restart starts it again on the same data and ports.
func (b *Broker) Kill() {
	_ = syscall.Kill(-b.cmd.Process.Pid, syscall.SIGKILL)
	<-b.exited
}

// Restart starts a broker killed by Kill again, on the same directory and
// ports, and returns once it accepts connections and has logged that it
// started (after the restart: the log line of the first start is skipped).
func (b *Broker) Restart(ctx context.Context) error {
	select {
	case <-b.exited:
	default:
		return errors.New("kafkabroker: Restart: the broker is still running (Kill it first)")
	}
	// waitReady looks for the started line in the log's tail: move the
	// old log aside so that the first start's line does not count.
	_ = os.Rename(filepath.Join(b.Dir, "server.log"), filepath.Join(b.Dir, fmt.Sprintf("server.log.%d", time.Now().UnixNano())))
	if err := b.launch(); err != nil {
		return err
	}
	if err := b.waitReady(ctx, 90*time.Second); err != nil {
		return fmt.Errorf("kafkabroker: restarted broker did not become ready: %w\n--- broker log tail ---\n%s", err, b.logTail(30))
	}
	return nil
}

// waitReady polls the listener and then the log line that says the server
// started, so that metadata requests are answered when it returns.
func (b *Broker) waitReady(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		select {
		case <-b.exited:
			return fmt.Errorf("broker process exited: %v", b.waitErr)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		c, err := net.DialTimeout("tcp", b.Addr, time.Second)
		if err != nil {
			continue
		}
		c.Close()
		if strings.Contains(b.logTail(200), "Kafka Server started") {
			return nil
		}
	}
	return errors.New("timed out")
}

func (b *Broker) logTail(n int) string {
	var lines []string
	for _, name := range []string{"server.log", "stdout.log"} {
		f, err := os.Open(filepath.Join(b.Dir, name))
		if err != nil {
			continue
		}
		s := bufio.NewScanner(f)
		s.Buffer(make([]byte, 64<<10), 1<<20)
		for s.Scan() {
			lines = append(lines, s.Text())
			if len(lines) > n {
				lines = lines[1:]
			}
		}
		f.Close()
	}
	return strings.Join(lines, "\n")
}

// Shutdown stops the broker as an operator does (SIGTERM: a controlled
// shutdown that moves its leaderships away first; SIGKILL after 60 s) and
// keeps its directory: Restart starts it again on the same data and ports.
func (b *Broker) Shutdown() {
	select {
	case <-b.exited:
		return
	default:
	}
	_ = syscall.Kill(-b.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-b.exited:
	case <-time.After(60 * time.Second):
		_ = syscall.Kill(-b.cmd.Process.Pid, syscall.SIGKILL)
		<-b.exited
	}
}

// Running reports whether the broker process runs.
func (b *Broker) Running() bool {
	select {
	case <-b.exited:
		return false
	default:
		return true
	}
}

// Pid is the broker's process id.
func (b *Broker) Pid() int { return b.cmd.Process.Pid }

// Stop terminates the broker (SIGTERM, then SIGKILL after 15s) and deletes its directory.
func (b *Broker) Stop() {
	if b == nil || b.cmd == nil || b.cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-b.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-b.exited:
	case <-time.After(15 * time.Second):
		_ = syscall.Kill(-b.cmd.Process.Pid, syscall.SIGKILL)
		<-b.exited
	}
	b.removeDir()
}

// Discard ends a broker whose data nobody needs again (a test's) at once,
// with SIGKILL, and deletes its directory: the controlled shutdown of Stop
// takes about 10 s on a broker that served a whole test package.
func (b *Broker) Discard() {
	if b == nil || b.cmd == nil || b.cmd.Process == nil {
		return
	}
	b.Kill()
	b.removeDir()
}

// removeDir deletes the broker's directory unless KSTATE_KEEP_BROKER_DIR is set.
func (b *Broker) removeDir() {
	if os.Getenv("KSTATE_KEEP_BROKER_DIR") == "" {
		_ = os.RemoveAll(b.Dir)
	}
}
