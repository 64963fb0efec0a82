package kstate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"testing"
	"time"

	"github.com/kstate/kstate/internal/engine"
)

// partitionsAdmin is an engine.Admin whose Partitions answers from errs
// (one per call, in order) and then n; the rest is not used.
type partitionsAdmin struct {
	engine.Admin
	n     int
	errs  []error
	calls int
}

func (a *partitionsAdmin) Partitions(context.Context, string) (int, error) {
	a.calls++
	if len(a.errs) > 0 {
		err := a.errs[0]
		a.errs = a.errs[1:]
		return 0, err
	}
	return a.n, nil
}

var (
	errUnreachable = &markedError{err: errors.New("dial tcp: connection refused"), mark: engine.ErrUnavailable}
	errNoTopic     = &markedError{err: errors.New("topic not found"), mark: engine.ErrUnknownTopic}
)

// The pipeline count: Options.Batching.Pipelines when set, else one per core
// (GOMAXPROCS) up to maxAutoPipelines; never more than the input's
// partitions. Kafka unreachable at start: the automatic count retries and
// then runs as many as the partitions allow; a missing topic runs one.
func TestPipelineCount(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	defer func(n int) { maxAutoPipelines = n }(maxAutoPipelines)
	maxAutoPipelines = 4 // the shipped cap (set again: another test may change it)
	tests := []struct {
		pipelines, procs, parts int
		errs                    []error
		sink                    bool
		want                    int
	}{
		{pipelines: 0, procs: 4, parts: 8, sink: true, want: 1},
		{pipelines: 2, procs: 4, parts: 8, sink: true, want: 2},
		{pipelines: 0, procs: 1, parts: 8, want: 1},
		{pipelines: 0, procs: 2, parts: 8, want: 2},
		{pipelines: 0, procs: 2, parts: 1, want: 1},
		{pipelines: 0, procs: 3, parts: 2, want: 2},
		{pipelines: 0, procs: 16, parts: 32, want: maxAutoPipelines},
		{pipelines: 0, procs: 16, parts: 3, want: 3},
		{pipelines: 1, procs: 16, parts: 32, want: 1},
		{pipelines: 2, procs: 1, parts: 8, want: 2},
		{pipelines: 8, procs: 2, parts: 32, want: 8},
		{pipelines: 8, procs: 2, parts: 6, want: 6},
		{pipelines: 0, procs: 2, parts: 4, errs: []error{errUnreachable, errUnreachable}, want: 2},
		{pipelines: 0, procs: 4, parts: 1, errs: []error{errUnreachable}, want: 1},
		{pipelines: 0, procs: 2, errs: []error{errNoTopic}, want: 1},
		{pipelines: 3, procs: 2, errs: []error{errUnreachable}, want: 3},
	}
	for _, tt := range tests {
		name := fmt.Sprintf("Pipelines=%d/GOMAXPROCS=%d/partitions=%d/errors=%d/sink=%v", tt.pipelines, tt.procs, tt.parts, len(tt.errs), tt.sink)
		t.Run(name, func(t *testing.T) {
			runtime.GOMAXPROCS(tt.procs)
			a := &App[string, string, string]{cfg: config[string, string, string]{
				ApplicationID: "app", Inputs: []Input[string]{{Topic: "in"}}, Pipelines: tt.pipelines,
				StartupTimeout: time.Minute, Logger: slog.New(slog.DiscardHandler),
			}}
			if tt.sink {
				a.cfg.Sinks = []Sink[string, string]{SinkFunc[string, string](func(context.Context, SinkBatch[string, string]) error { return nil })}
			}
			adm := &partitionsAdmin{n: tt.parts, errs: tt.errs}
			got, err := a.pipelineCount(context.Background(), adm)
			if err != nil || got != tt.want {
				t.Fatalf("pipelineCount = %d, %v; want %d", got, err, tt.want)
			}
		})
	}
}

// The automatic count gives up after StartupTimeout with the error the
// coordinators' start-up would return.
func TestPipelineCountUnreachable(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	defer func(n int) { maxAutoPipelines = n }(maxAutoPipelines)
	maxAutoPipelines = 4
	a := &App[string, string, string]{cfg: config[string, string, string]{
		ApplicationID: "app", Inputs: []Input[string]{{Topic: "in"}},
		StartupTimeout: 250 * time.Millisecond, Logger: slog.New(slog.DiscardHandler),
	}}
	adm := &partitionsAdmin{errs: []error{errUnreachable, errUnreachable, errUnreachable, errUnreachable, errUnreachable}}
	start := time.Now()
	n, err := a.pipelineCount(context.Background(), adm)
	if !errors.Is(err, engine.ErrUnavailable) || n != 0 {
		t.Fatalf("pipelineCount = %d, %v; want an error wrapping engine.ErrUnavailable", n, err)
	}
	if d := time.Since(start); d > 2*time.Second || adm.calls < 2 {
		t.Fatalf("gave up after %v and %d calls: want retries within StartupTimeout 250ms", d, adm.calls)
	}
	t.Log(err)
}
