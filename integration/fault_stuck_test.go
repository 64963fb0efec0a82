package integration

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/internal/engine"
	"github.com/kstate/kstate/internal/testlog"
	"github.com/kstate/kstate/internal/testprocs"
	"github.com/kstate/kstate/processor"
)

// A processor call that never returns, on a real broker: Run returns
// within ShutdownTimeout of its cancellation, and past MaxBatchDuration the
// instance gives its partitions up to another one, outputs staying exact.

// stuckGate makes HandleInputRows block on the keys it was told to block
// (in the instances whose processors use it) until the test ends.
type stuckGate struct {
	mu      sync.Mutex
	keys    map[string]bool
	entered chan string // the key, each time a call starts blocking
	release chan struct{}
	closed  chan struct{} // closed when an abandoned task was closed by its goroutine
	once    sync.Once
}

func newStuckGate(t *testing.T, keys ...string) *stuckGate {
	g := &stuckGate{keys: map[string]bool{}, entered: make(chan string, 16), release: make(chan struct{}), closed: make(chan struct{})}
	for _, k := range keys {
		g.keys[k] = true
	}
	// After the apps stopped (cleanups run last-registered first), let the
	// stuck goroutine go: it must then close its task, and log that, before
	// the test ends.
	t.Cleanup(func() {
		close(g.release)
		select {
		case <-g.closed:
		case <-time.After(10 * time.Second):
			t.Error("the abandoned task was not closed after its stuck call returned")
		}
	})
	return g
}

// logger is the test's logger, noticing the abandoned task's close.
func (g *stuckGate) logger(t *testing.T) *slog.Logger {
	return slog.New(&closeWatch{Handler: testlog.New(t).Handler(), g: g})
}

type closeWatch struct {
	slog.Handler
	g *stuckGate
}

func (h *closeWatch) Handle(ctx context.Context, r slog.Record) error {
	err := h.Handler.Handle(ctx, r)
	if strings.HasPrefix(r.Message, "the stuck processor call returned after its batch was abandoned") {
		h.g.once.Do(func() { close(h.g.closed) })
	}
	return err
}

func (h *closeWatch) WithAttrs(as []slog.Attr) slog.Handler {
	return &closeWatch{Handler: h.Handler.WithAttrs(as), g: h.g}
}

func (h *closeWatch) WithGroup(name string) slog.Handler {
	return &closeWatch{Handler: h.Handler.WithGroup(name), g: h.g}
}

func (g *stuckGate) newProcessor() processor.StatefulProcessor[string, string, string] {
	return &blockingCounter{Counter: testprocs.NewCounter().(*testprocs.Counter), g: g}
}

type blockingCounter struct {
	*testprocs.Counter
	g *stuckGate
}

func (b *blockingCounter) HandleInputRows(key string, rows iter.Seq[string], tv processor.TimerValues, out processor.Emitter[string]) error {
	b.g.mu.Lock()
	block := b.g.keys[key]
	b.g.mu.Unlock()
	if block {
		b.g.entered <- key
		<-b.g.release
	}
	return b.Counter.HandleInputRows(key, rows, tv, out)
}

func waitEntered(t *testing.T, g *stuckGate) time.Time {
	t.Helper()
	select {
	case <-g.entered:
		return time.Now()
	case <-time.After(waitOut):
		t.Fatal("the processor never reached the blocking key")
	}
	return time.Time{}
}

func TestStuckProcessorShutdown(t *testing.T) {
	// Not parallel (main_test.go): Run must return within ShutdownTimeout + 5 s.
	e := newSpecEnv(t, 2)
	g := newStuckGate(t, "stuck")
	cfg := e.config(t, g.newProcessor)
	cfg.Timeouts.Shutdown = 3 * time.Second
	cfg.Observability.Logger = g.logger(t)
	cfg.Batching.Pipelines = 1 // "a" and "stuck" (two partitions) in one abandoned batch
	app := newSpecApp(t, cfg)
	stop, _ := testprocs.StartWatch(t, app)
	testprocs.Produce(t, e.brokers, e.in, "a=1", "b=1")
	testprocs.WaitOutputs(t, e.brokers, e.out, 2, waitOut)
	testprocs.Produce(t, e.brokers, e.in, "stuck=1", "a=2")
	waitEntered(t, g)
	testprocs.Eventually(t, waitOut, "the batch in flight is seen ageing", func() bool {
		time.Sleep(100 * time.Millisecond)
		return app.Metrics().BatchInFlight >= 500*time.Millisecond
	})

	start := time.Now()
	err := stop()
	took := time.Since(start)
	t.Logf("Run returned %v after cancellation: %v", took.Round(time.Millisecond), err)
	if took > cfg.Timeouts.Shutdown+5*time.Second {
		t.Fatalf("Run returned %v after cancellation, want within ShutdownTimeout %v + 5s", took, cfg.Timeouts.Shutdown)
	}
	var se *kstate.StuckError
	if !errors.As(err, &se) || !errors.Is(err, kstate.ErrStuck) || se.Limit != "ShutdownTimeout" ||
		se.Method != "HandleInputRows" || se.Key != `"stuck"` {
		t.Fatalf("Run: %v; want a StuckError of HandleInputRows(key \"stuck\") at ShutdownTimeout", err)
	}
	// Nothing of the abandoned batch was committed.
	out, rerr := testprocs.Read(t.Context(), e.brokers, e.out)
	if rerr != nil {
		t.Fatal(rerr)
	}
	wantOutputs(t, out, "a=[1] b=[1]")
}

func TestStuckProcessorGivesPartitionsUp(t *testing.T) {
	// Not parallel (main_test.go): the give-up is timed against MaxBatchDuration.
	const parts, keys = 4, 20
	e := newSpecEnv(t, parts)
	g := newStuckGate(t) // keys are chosen below, once the assignment is known
	cfg1 := e.config(t, g.newProcessor)
	cfg1.Kafka.SessionTimeout = 6 * time.Second // the broker's minimum
	cfg1.Batching.MaxDuration = 3 * time.Second
	cfg1.Observability.Logger = g.logger(t)
	cfg2 := e.config(t, testprocs.NewCounter)
	cfg2.Kafka.SessionTimeout, cfg2.Batching.MaxDuration = cfg1.Kafka.SessionTimeout, cfg1.Batching.MaxDuration
	cfg2.InstanceID = "i2"
	app1, app2 := newSpecApp(t, cfg1), newSpecApp(t, cfg2)
	_, done1 := testprocs.StartWatch(t, app1)
	testprocs.Start(t, app2)

	in := &testprocs.KeyCycler{T: t, Brokers: e.brokers, Topic: e.in, Keys: keys}
	in.Produce(100)
	testprocs.Eventually(t, waitOut, "both instances own partitions", func() bool {
		in.Produce(10)
		time.Sleep(100 * time.Millisecond)
		return len(app1.Metrics().Assigned) > 0 && len(app2.Metrics().Assigned) > 0 &&
			len(app1.Metrics().Restoring) == 0 && len(app2.Metrics().Restoring) == 0
	})
	checkCounts(t, testprocs.WaitOutputs(t, e.brokers, e.out, in.Sent, waitOut), in.Sent, keys)

	// A key on a partition of instance 1 (a rebalance may still move it:
	// then choose again).
	var stuck string
	var entered time.Time
	for attempt := 0; stuck == "" && attempt < 10; attempt++ {
		owned := app1.Metrics().Assigned
		var key string
		for i := 0; key == ""; i++ {
			if k := fmt.Sprintf("stuck-%d-%d", attempt, i); slices.Contains(owned, engine.PartitionFor([]byte(k), parts)) {
				key = k
			}
		}
		g.mu.Lock()
		g.keys[key] = true
		g.mu.Unlock()
		testprocs.Produce(t, e.brokers, e.in, key+"=v")
		select {
		case <-g.entered:
			stuck, entered = key, time.Now()
		case <-time.After(10 * time.Second):
			// Processed by instance 2 after a move: its outputs count.
			in.Sent++
		}
	}
	if stuck == "" {
		t.Fatal("instance 1 never processed a blocking key")
	}
	in.Produce(40) // flows on while instance 1 is stuck

	var err error
	select {
	case err = <-done1:
	case <-time.After(cfg1.Batching.MaxDuration + 10*time.Second):
		t.Fatalf("instance 1 still running %v after its call got stuck (MaxBatchDuration %v)", time.Since(entered), cfg1.Batching.MaxDuration)
	}
	took := time.Since(entered)
	t.Logf("instance 1 gave up %v after the call got stuck: %v", took.Round(time.Millisecond), err)
	var se *kstate.StuckError
	if !errors.As(err, &se) || se.Limit != "MaxBatchDuration" || se.Method != "HandleInputRows" || se.Key != strconv.Quote(stuck) {
		t.Fatalf("instance 1: %v; want a StuckError of HandleInputRows(key %q) at MaxBatchDuration", err, stuck)
	}
	if took < cfg1.Batching.MaxDuration-500*time.Millisecond || took > cfg1.Batching.MaxDuration+5*time.Second {
		t.Fatalf("instance 1 gave up %v after the call got stuck, want about MaxBatchDuration %v", took, cfg1.Batching.MaxDuration)
	}

	start := time.Now()
	testprocs.Eventually(t, waitOut, "instance 2 owns all partitions", func() bool {
		in.Produce(5)
		time.Sleep(100 * time.Millisecond)
		return len(app2.Metrics().Assigned) == parts && len(app2.Metrics().Restoring) == 0
	})
	t.Logf("partitions of the stuck instance moved in %v", time.Since(start).Round(time.Millisecond))
	in.Produce(50)
	// Every key 1..n exactly once, the stuck key included (processed by
	// instance 2 from the same committed offsets).
	out := testprocs.WaitOutputs(t, e.brokers, e.out, in.Sent+1, waitOut)
	checkCounts(t, out, in.Sent+1, len(out))
	if got := out[stuck]; !slices.Equal(got, []string{"1"}) {
		t.Fatalf("outputs of the stuck key %s: %v, want [1]", stuck, got)
	}
	for k := range keys {
		if len(out[fmt.Sprintf("k%d", k)]) == 0 {
			t.Fatalf("key k%d has no output: %v", k, out)
		}
	}
}
