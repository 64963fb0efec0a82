package kstate_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/internal/testlog"
	"github.com/kstate/kstate/internal/testprocs"
)

// frozenBroker is a TCP listener that accepts connections and never
// answers (a broker whose process is stopped, SIGSTOP, or a black hole
// behind a proxy). It returns its address.
func frozenBroker(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c) // kept open, never read
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	return ln.Addr().String()
}

// Run against a broker that accepts connections and never answers returns
// within StartupTimeout (and a little slack) with a *StartupTimeoutError
// naming the brokers and the timeout, having warned meanwhile (issue #25:
// 40.2 s with StartupTimeout 20 s, and no Warn). With one pipeline and
// with an automatic count (the count's own retry shares the deadline).
func TestStartupTimeoutFrozenBroker(t *testing.T) {
	for _, pipelines := range []int{1, 0} {
		t.Run(map[int]string{1: "one pipeline", 0: "automatic pipelines"}[pipelines], func(t *testing.T) {
			t.Parallel()
			addr := frozenBroker(t)
			const timeout = 3 * time.Second
			cfg := config([]string{addr}, t.TempDir(), testprocs.NewCounter)
			cfg.Timeouts.Startup = timeout
			cfg.Batching.Pipelines = pipelines
			var logs testlog.Buffer
			cfg.Observability.Logger = slog.New(slog.NewTextHandler(io.MultiWriter(&logs, t.Output()), nil))
			app, err := kstate.New(cfg.Topology, cfg.Options)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			start := time.Now()
			err = app.Run(ctx)
			took := time.Since(start)
			var st *kstate.StartupTimeoutError
			if !errors.As(err, &st) {
				t.Fatalf("Run after %v: %v (%T), want a *kstate.StartupTimeoutError", took, err, err)
			}
			if took > timeout+3*time.Second {
				t.Errorf("Run returned after %v, want within StartupTimeout %v (+3s slack)", took, timeout)
			}
			if len(st.Brokers) != 1 || st.Brokers[0] != addr || st.Timeout != timeout {
				t.Errorf("error names brokers %q and timeout %v, want [%q] and %v", st.Brokers, st.Timeout, addr, timeout)
			}
			if msg := err.Error(); !strings.Contains(msg, addr) || !strings.Contains(msg, "StartupTimeout 3s") {
				t.Errorf("message does not name the broker and StartupTimeout: %s", msg)
			}
			if !strings.Contains(logs.String(), "level=WARN") {
				t.Errorf("no Warn logged while waiting:\n%s", logs.String())
			}
			t.Logf("Run returned after %v: %v", took.Round(time.Millisecond), err)
		})
	}
}
