package engine_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kstate/kstate/internal/engine"
	"github.com/kstate/kstate/internal/engine/enginetest"
)

// instantClock is an engine.Clock whose Sleep returns at once after moving
// time forward, recording each pause: start-up backoff without waiting.
type instantClock struct {
	mu      sync.Mutex
	elapsed time.Duration
	sleeps  []time.Duration
}

func (c *instantClock) Now() time.Time { return time.Unix(0, 0).Add(c.Elapsed()) }
func (c *instantClock) Elapsed() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.elapsed
}
func (c *instantClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.elapsed += d
	c.sleeps = append(c.sleeps, d)
	return nil
}

// flakyAdmin fails Partitions with err for its first n calls.
type flakyAdmin struct {
	enginetest.Admin
	n     int
	err   error
	calls int
}

func (a *flakyAdmin) Partitions(ctx context.Context, topic string) (int, error) {
	a.calls++
	if a.calls <= a.n {
		return 0, a.err
	}
	return a.Admin.Partitions(ctx, topic)
}

var errJoined = errors.New("test: setup reached NewSession")

// runSetup runs a coordinator whose NewSession ends the run, so Run
// returns once setup is done (or failed).
func runSetup(t *testing.T, adm *flakyAdmin, startupTimeout time.Duration) (*instantClock, string, error) {
	t.Helper()
	b := enginetest.NewBroker("app", "in", map[string]int{"in": 2, "out": 2})
	adm.Admin = enginetest.Admin{B: b}
	clk := &instantClock{}
	var logs bytes.Buffer
	c, err := engine.NewCoordinator(engine.CoordinatorConfig{
		ApplicationID: "app", InstanceID: "i1", RunID: "r1",
		Topic: "in", OutputTopic: "out", ChangelogTopic: "app-changelog",
		MaxBatchRecords: 10, RestoreTimeout: time.Second, ShutdownTimeout: time.Second,
		StartupTimeout: startupTimeout,
		Admin:          adm,
		NewSession:     func() (engine.Session, error) { return nil, errJoined },
		Changelog:      enginetest.Changelog{B: b},
		Clock:          clk,
		NewTask:        func(int32) (engine.TaskHandle, error) { return nil, errors.New("test: no tasks") },
		Logger:         slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		t.Fatal(err)
	}
	err = c.Run(context.Background())
	return clk, logs.String(), err
}

func unreachable(i int) error {
	return fmt.Errorf("dial %d: connection refused: %w", i, engine.ErrUnavailable)
}

// Brokers that come up after the application: setup retries with backoff,
// one Warn per retry, then goes on.
func TestStartupRetriesUnreachable(t *testing.T) {
	adm := &flakyAdmin{n: 3, err: unreachable(0)}
	clk, logs, err := runSetup(t, adm, time.Minute)
	if !errors.Is(err, errJoined) {
		t.Fatalf("Run: %v, want setup to reach NewSession", err)
	}
	if adm.calls != 6 {
		t.Errorf("Partitions called %d times, want 6 (3 failures, then the input, the changelog and the output topic)", adm.calls)
	}
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond}
	if fmt.Sprint(clk.sleeps) != fmt.Sprint(want) {
		t.Errorf("backoff %v, want %v", clk.sleeps, want)
	}
	if n := strings.Count(logs, "level=WARN msg=\"Kafka unreachable at start-up: retrying\""); n != 3 {
		t.Errorf("%d Warn lines, want 3:\n%s", n, logs)
	}
}

// Never reachable: the error says so and names the timeout, and the
// waiting stays within StartupTimeout.
func TestStartupTimeoutExpires(t *testing.T) {
	adm := &flakyAdmin{n: 1 << 30, err: unreachable(0)}
	clk, _, err := runSetup(t, adm, 10*time.Second)
	if !errors.Is(err, engine.ErrUnavailable) || !strings.Contains(err.Error(), "StartupTimeout 10s") {
		t.Fatalf("Run: %v, want ErrUnavailable naming StartupTimeout 10s", err)
	}
	if clk.Elapsed() > 10*time.Second || clk.Elapsed() < 5*time.Second {
		t.Errorf("waited %v, want close to but within StartupTimeout 10s (sleeps %v)", clk.Elapsed(), clk.sleeps)
	}
	for _, d := range clk.sleeps {
		if d > 5*time.Second {
			t.Errorf("a backoff of %v is over the 5s cap", d)
		}
	}
}

// Errors retrying cannot fix, and a zero StartupTimeout, fail at once.
func TestStartupNoRetry(t *testing.T) {
	for _, tc := range []struct {
		name    string
		err     error
		timeout time.Duration
	}{
		{"not unreachable", errors.New("topic not found"), time.Minute},
		{"zero timeout", unreachable(0), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			adm := &flakyAdmin{n: 1, err: tc.err}
			clk, _, err := runSetup(t, adm, tc.timeout)
			if err == nil || errors.Is(err, errJoined) || adm.calls != 1 || len(clk.sleeps) != 0 {
				t.Fatalf("Run: %v after %d calls and pauses %v; want the first error, no retry", err, adm.calls, clk.sleeps)
			}
		})
	}
}

// CheckTopics runs within the retry and its errors stop setup.
func TestStartupCheckTopics(t *testing.T) {
	b := enginetest.NewBroker("app", "in", map[string]int{"in": 2, "out": 2})
	calls := 0
	errLimit := errors.New("test: MaxRecordBytes over the topic's max.message.bytes")
	c, err := engine.NewCoordinator(engine.CoordinatorConfig{
		ApplicationID: "app", InstanceID: "i1", RunID: "r1",
		Topic: "in", OutputTopic: "out", ChangelogTopic: "app-changelog",
		MaxBatchRecords: 10, RestoreTimeout: time.Second, ShutdownTimeout: time.Second,
		StartupTimeout: time.Minute,
		Admin:          enginetest.Admin{B: b},
		CheckTopics: func(context.Context) error {
			calls++
			if calls == 1 {
				return unreachable(1)
			}
			return errLimit
		},
		NewSession: func() (engine.Session, error) { return nil, errJoined },
		Changelog:  enginetest.Changelog{B: b},
		Clock:      &instantClock{},
		NewTask:    func(int32) (engine.TaskHandle, error) { return nil, errors.New("test: no tasks") },
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Run(context.Background()); !errors.Is(err, errLimit) || calls != 2 {
		t.Fatalf("Run: %v after %d CheckTopics calls; want errLimit after a retry", err, calls)
	}
}
