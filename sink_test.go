package kstate_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/internal/testprocs"
)

// memSink records every batch and applies it idempotently by (partition,
// batch id), like a database sink with a high-water mark table.
type memSink struct {
	mu    sync.Mutex
	fail  error // returned (once) by the next call when set
	calls []string
	seen  map[[2]int64]string
	hwm   map[int32]int64
	table map[string]string
	rows  int
}

func newMemSink() *memSink {
	return &memSink{seen: map[[2]int64]string{}, hwm: map[int32]int64{}, table: map[string]string{}}
}

func (s *memSink) WriteBatch(_ context.Context, b kstate.SinkBatch[string, string]) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.fail; err != nil {
		s.fail = nil
		return err
	}
	var rows []string
	for _, r := range b.Rows {
		rows = append(rows, r.Key+"="+r.Value)
	}
	line := strings.Join(rows, " ")
	k := [2]int64{int64(b.Partition), b.ID}
	if prev, ok := s.seen[k]; ok && prev != line {
		return fmt.Errorf("batch p%d/%d seen with other rows: %q then %q", b.Partition, b.ID, prev, line)
	}
	s.seen[k] = line
	s.calls = append(s.calls, fmt.Sprintf("p%d/%d: %s", b.Partition, b.ID, line))
	if h, ok := s.hwm[b.Partition]; ok && b.ID <= h {
		return nil
	}
	for _, r := range b.Rows {
		s.table[r.Key] = r.Value
		s.rows++
	}
	s.hwm[b.Partition] = b.ID
	return nil
}

func (s *memSink) snapshot() (map[string]string, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]string, len(s.table))
	for k, v := range s.table {
		out[k] = v
	}
	return out, s.rows
}

// Two sinks and no output topic, over kfake: every emitted row reaches
// both sinks; the second sink failing stops Run with a SinkError naming it
// (the first sink already wrote the batch), and the restart retries the
// same batch with the same id and rows in both.
func TestEmbeddedSinkWithoutOutputTopic(t *testing.T) {
	brokers := startEmbedded(t, 2)
	dir := t.TempDir()
	sink, sink2 := newMemSink(), newMemSink()
	cfg := config(brokers, dir, testprocs.NewCounter)
	cfg.Output.Topic, cfg.Output.Serde = "", nil
	cfg.Output.Sinks = []kstate.Sink[string, string]{sink, sink2}
	app := newApp(t, cfg)
	stop, done := testprocs.StartWatch(t, app)
	testprocs.Produce(t, brokers, "in", "a=x", "a=y", "b=y")
	testprocs.Eventually(t, 20*time.Second, "3 rows in the sink", func() bool { _, n := sink.snapshot(); return n == 3 })

	// The next batch fails in the sink: Run returns the SinkError.
	boom := errors.New("database down")
	sink2.mu.Lock()
	sink2.fail = boom
	sink2.mu.Unlock()
	testprocs.Produce(t, brokers, "in", "a=z", "c=x")
	var err error
	select {
	case err = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not stop on the sink error")
	}
	_ = stop
	var se *kstate.SinkError
	if !errors.As(err, &se) || !errors.Is(err, boom) || se.Sink != 1 {
		t.Fatalf("Run: %v, want a SinkError wrapping %v", err, boom)
	}

	// Restart: the failed batch runs again with its id and rows.
	app2 := newApp(t, cfg)
	stop2 := testprocs.Start(t, app2)
	// The first sink may have all rows already (it wrote the failed
	// batch): wait for the second, called after it.
	testprocs.Eventually(t, 20*time.Second, "5 rows in the second sink", func() bool { _, n := sink2.snapshot(); return n == 5 })
	if err := stop2(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	for i, s := range []*memSink{sink, sink2} {
		got, _ := s.snapshot()
		if fmt.Sprint(got) != "map[a:3 b:1 c:1]" {
			t.Fatalf("sink %d: table %v, calls %v", i, got, s.calls)
		}
	}
	if len(sink.calls) <= len(sink2.calls) {
		t.Fatalf("the first sink saw the failed batch before the second failed it: calls %v and %v", sink.calls, sink2.calls)
	}
}

func TestSinkConfig(t *testing.T) {
	cfg := config([]string{"localhost:1"}, t.TempDir(), testprocs.NewCounter)
	cfg.Output.Topic = ""
	if _, err := kstate.New(cfg.Topology, cfg.Options); !errors.Is(err, kstate.ErrConfig) || !strings.Contains(err.Error(), "Topology.Output.Topic is required unless Output.Sinks is set") {
		t.Fatalf("New without OutputTopic and Sinks: %v", err)
	}
	cfg.Output.Topic, cfg.Output.Serde = "out", nil
	if _, err := kstate.New(cfg.Topology, cfg.Options); !errors.Is(err, kstate.ErrConfig) || !strings.Contains(err.Error(), "Topology.Output.Serde is required with Output.Topic") {
		t.Fatalf("New without OutputSerde: %v", err)
	}
	cfg.Output.Topic = ""
	cfg.Output.Sinks = []kstate.Sink[string, string]{kstate.SinkFunc[string, string](func(context.Context, kstate.SinkBatch[string, string]) error { return nil })}
	if _, err := kstate.New(cfg.Topology, cfg.Options); err != nil {
		t.Fatalf("New with Sinks only: %v", err)
	}
}
