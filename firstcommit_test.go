package kstate_test

import (
	"io"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/kstate/kstate/internal/testprocs"
)

// lateProxy returns an address that refuses connections for closedFor,
// then forwards them to target: a cluster that comes up after the
// application (a pod started before Kafka). opens is when it starts
// listening, at the earliest.
func lateProxy(t *testing.T, target string, closedFor time.Duration) (addr string, opens time.Time) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr = ln.Addr().String()
	ln.Close()
	opens = time.Now().Add(closedFor)
	var (
		mu     sync.Mutex
		open   net.Listener
		closed bool
	)
	timer := time.AfterFunc(closedFor, func() {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Errorf("proxy: listen again on %s: %v", addr, err)
			return
		}
		mu.Lock()
		if closed {
			mu.Unlock()
			l.Close()
			return
		}
		open = l
		mu.Unlock()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				u, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer u.Close()
				go func() { _, _ = io.Copy(u, c); u.Close() }()
				_, _ = io.Copy(c, u)
			}()
		}
	})
	t.Cleanup(func() {
		timer.Stop()
		mu.Lock()
		closed = true
		if open != nil {
			open.Close()
		}
		mu.Unlock()
	})
	return addr, opens
}

// TestEmbeddedFirstCommitFromRunStart: issue #25, Metrics.FirstCommit left
// out the start-up wait (1.08 s reported, the first commit came 32.6 s
// after Run started): it is measured from the call of Run, including a
// wait for a cluster that is not up yet.
func TestEmbeddedFirstCommitFromRunStart(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		// Automatic pipelines (more than one) read the partition count
		// before the pipelines start: the wait the issue saw.
		prev := runtime.GOMAXPROCS(2)
		t.Cleanup(func() { runtime.GOMAXPROCS(prev) })
	}
	brokers := startEmbedded(t, 2)
	testprocs.Produce(t, brokers, "in", "a=1", "b=1")
	const down = 2 * time.Second
	addr, opens := lateProxy(t, brokers[0], down)
	cfg := config([]string{addr}, t.TempDir(), testprocs.NewCounter)
	app := newApp(t, cfg)
	start := time.Now()
	wait := opens.Sub(start) // Run cannot commit before the cluster is reachable
	stop := testprocs.Start(t, app)
	want(t, testprocs.WaitOutputs(t, brokers, "out", 2, 60*time.Second), "a=[1] b=[1]")
	seen := time.Since(start)
	var first time.Duration
	testprocs.Eventually(t, 10*time.Second, "Metrics.FirstCommit", func() bool {
		first = app.Metrics().FirstCommit
		return first > 0
	})
	// Run's clock starts a little after start (in Run's goroutine): a
	// first commit right at the cluster's return reads slightly under
	// wait (1 ms under load once); the wait it must include is 2 s.
	const slack = 100 * time.Millisecond
	if first < wait-slack || first > seen {
		t.Errorf("Metrics.FirstCommit %v: want it from Run's start, between the %v the cluster was still down and the %v until the output was read",
			first, wait, seen)
	}
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
}
