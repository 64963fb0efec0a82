package integration

import (
	"context"
	"errors"
	"io"
	"iter"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/internal/kafka"
	"github.com/kstate/kstate/internal/testlog"
	"github.com/kstate/kstate/internal/testprocs"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/state"
)

// Resource limits and faults on the real broker: record sizes, brokers
// down at start, two instances on one state directory. (A full disk is
// tested on a tmpfs: the store in internal/kv, TestRocksDBDiskFull; the
// application in fault_diskfull_test.go.)

// sizer emits, for an input row "n", a row of n bytes (no state).
type sizer struct{}

func newSizer() processor.StatefulProcessor[string, string, string] { return sizer{} }

func (sizer) Init(processor.Handle) error { return nil }
func (sizer) HandleInputRows(_ string, rows iter.Seq[string], _ processor.TimerValues, out processor.Emitter[string]) error {
	for v := range rows {
		n, err := strconv.Atoi(v)
		if err != nil {
			return err
		}
		if err := out.Emit(strings.Repeat("x", n)); err != nil {
			return err
		}
	}
	return nil
}
func (sizer) HandleExpiredTimer(string, processor.TimerValues, processor.ExpiredTimerInfo, processor.Emitter[string]) error {
	return nil
}
func (sizer) Close() error { return nil }

// newSizedEnv is newSpecEnv with an output topic allowing maxMessage bytes.
func newSizedEnv(t *testing.T, maxMessage int) specEnv {
	t.Helper()
	e := newSpecEnv(t, 1)
	e.out += "-sized"
	adm, err := kafka.NewAdmin(e.brokers)
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	spec := kafka.TopicSpec{Name: e.out, Partitions: 1, ReplicationFactor: -1,
		Configs: map[string]string{"max.message.bytes": strconv.Itoa(maxMessage)}}
	if err := adm.EnsureTopic(ctx, spec); err != nil {
		t.Fatal(err)
	}
	return e
}

func runUntilError(t *testing.T, app *kstate.App[string, string, string], timeout time.Duration) error {
	t.Helper()
	_, done := testprocs.StartWatch(t, app)
	select {
	case err := <-done:
		return err
	case <-time.After(timeout):
		t.Fatalf("Run still running after %v", timeout)
		return nil
	}
}

// Outputs over franz-go's default 1,000,012-byte limit work when
// MaxRecordBytes and the topic allow them; one over MaxRecordBytes is found
// at Emit (where OnProcessingError could dead-letter its key) and, under the
// default Fail policy, stops Run with a UserError wrapping ErrOutputTooLarge
// that names the limit; nothing of its batch is committed.
func TestFaultRecordSize(t *testing.T) {
	t.Parallel()
	const topicMax = 4 << 20
	const limit = 3 << 20
	e := newSizedEnv(t, topicMax)
	cfg := e.config(t, newSizer)
	cfg.Kafka.MaxRecordBytes = limit
	app := newSpecApp(t, cfg)
	_, done := testprocs.StartWatch(t, app)
	testprocs.Produce(t, e.brokers, e.in, "k=2000000")
	got := testprocs.WaitOutputs(t, e.brokers, e.out, 1, waitOut)
	if v := got["k"]; len(v) != 1 || len(v[0]) != 2_000_000 {
		t.Fatalf("outputs: %d rows of key k", len(v))
	}

	testprocs.Produce(t, e.brokers, e.in, "k=3500000")
	var err error
	select {
	case err = <-done:
	case <-time.After(waitOut):
		t.Fatal("Run did not stop on an output over MaxRecordBytes")
	}
	var ue *kstate.UserError
	if !errors.As(err, &ue) || !errors.Is(err, kstate.ErrOutputTooLarge) {
		t.Fatalf("Run: %v; want a *kstate.UserError wrapping kstate.ErrOutputTooLarge", err)
	}
	if ue.Method != "HandleInputRows" || ue.Key != `"k"` {
		t.Errorf("error fields %+v", *ue)
	}
	for _, want := range []string{"MaxRecordBytes", strconv.Itoa(limit), "3500"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message %q does not name %s", err, want)
		}
	}
	if got := testprocs.WaitOutputs(t, e.brokers, e.out, 1, time.Second); got.Count() != 1 {
		t.Errorf("%d outputs committed, want only the first", got.Count())
	}
}

// A MaxRecordBytes above the output topic's max.message.bytes is a
// start-up error naming both numbers.
func TestFaultRecordSizeOverTopic(t *testing.T) {
	t.Parallel()
	e := newSizedEnv(t, 2<<20)
	cfg := e.config(t, newSizer)
	cfg.Kafka.MaxRecordBytes = 3 << 20
	err := runUntilError(t, newSpecApp(t, cfg), 60*time.Second)
	if !errors.Is(err, kstate.ErrConfig) {
		t.Fatalf("Run: %v; want ErrConfig", err)
	}
	for _, want := range []string{"MaxRecordBytes 3145728", "max.message.bytes 2097152", e.out} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message %q does not say %q", err, want)
		}
	}
}

// lateProxy listens on a free port only after delay, then forwards every
// connection to target: a bootstrap broker that is down at start.
func lateProxy(t *testing.T, target string, delay time.Duration) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // connection refused until the proxy starts
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	wg.Go(func() {
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Errorf("proxy listen %s: %v", addr, err)
			return
		}
		go func() { <-ctx.Done(); l.Close() }()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				u, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer u.Close()
				go func() { <-ctx.Done(); c.Close(); u.Close() }()
				go func() { _, _ = io.Copy(u, c); u.Close() }()
				_, _ = io.Copy(c, u)
			})
		}
	})
	return addr
}

// An application started while its bootstrap broker is down waits (Warn
// per retry) instead of failing in milliseconds, then processes exactly.
func TestFaultBrokerDownAtStart(t *testing.T) {
	t.Parallel()
	e := newSpecEnv(t, 2)
	cfg := e.config(t, testprocs.NewCounter)
	cfg.Kafka.Brokers = []string{lateProxy(t, e.brokers[0], 4*time.Second)}
	var logs testlog.Buffer
	cfg.Observability.Logger = slog.New(slog.NewTextHandler(io.MultiWriter(&logs, t.Output()), nil))
	app := newSpecApp(t, cfg)
	start := time.Now()
	stop, done := testprocs.StartWatch(t, app)
	testprocs.Produce(t, e.brokers, e.in, "a=x", "b=y", "a=x")
	select {
	case err := <-done:
		t.Fatalf("Run returned %v after %v while the broker was down", err, time.Since(start))
	case <-time.After(3 * time.Second):
	}
	wantOutputs(t, testprocs.WaitOutputs(t, e.brokers, e.out, 3, waitOut), "a=[1 2] b=[1]")
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if n := strings.Count(logs.String(), "Kafka unreachable at start-up: retrying"); n < 2 {
		t.Errorf("%d start-up retries logged, want several:\n%s", n, logs.String())
	}
}

// Two instances on one StateDir have the same default InstanceID. The
// newer one takes the transactional id and the static membership; the
// older one stops with kstate.ErrFenced and the clear message. The newer
// one either finds the shards still locked by the older one (a clear
// state.ErrLocked error) or, once the older one released them, processes
// exactly.
func TestFaultSameStateDir(t *testing.T) {
	t.Parallel()
	e := newSpecEnv(t, 2)
	cfg := e.config(t, testprocs.NewCounter)
	cfg.InstanceID = "" // the default, from the host name and StateDir
	app1 := newSpecApp(t, cfg)
	app2 := newSpecApp(t, cfg)
	if app1.InstanceID() != app2.InstanceID() {
		t.Fatalf("instance ids %q and %q differ", app1.InstanceID(), app2.InstanceID())
	}
	_, done1 := testprocs.StartWatch(t, app1)
	testprocs.Produce(t, e.brokers, e.in, "a=x", "b=y")
	wantOutputs(t, testprocs.WaitOutputs(t, e.brokers, e.out, 2, waitOut), "a=[1] b=[1]")

	stop2, done2 := testprocs.StartWatch(t, app2)
	var err1 error
	select {
	case err1 = <-done1:
	case <-time.After(90 * time.Second):
		t.Fatal("the older instance did not stop after the newer one started")
	}
	t.Logf("older instance: %v", err1)
	if !errors.Is(err1, kstate.ErrFenced) {
		t.Fatalf("older instance: %v; want kstate.ErrFenced", err1)
	}
	if !strings.Contains(err1.Error(), "was fenced by a newer instance with the same instance id") {
		t.Errorf("older instance's message is not the clear fencing one: %v", err1)
	}

	select {
	case err2 := <-done2:
		t.Logf("newer instance: %v", err2)
		if !errors.Is(err2, state.ErrLocked) || !strings.Contains(err2.Error(), "StateDir") {
			t.Fatalf("newer instance: %v; want state.ErrLocked telling to give every instance its own StateDir", err2)
		}
	case <-time.After(5 * time.Second):
		// Still running: it must process exactly from where the older
		// one committed.
		testprocs.Produce(t, e.brokers, e.in, "a=x")
		wantOutputs(t, testprocs.WaitOutputs(t, e.brokers, e.out, 3, waitOut), "a=[1 2] b=[1]")
		if err := stop2(); err != nil {
			t.Fatalf("newer instance: %v", err)
		}
	}
}
