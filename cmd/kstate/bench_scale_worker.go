package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/internal/optpath"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/serde"
	"github.com/kstate/kstate/state"
)

// The worker of `kstate bench scale`: one application instance in its own
// OS process (the kstate binary re-executing itself), so that the
// benchmark can SIGKILL it. It writes its Status as one JSON line to
// stdout every --status-every, and a last line when Run returned; its
// logs go to stderr.

// workerOptions are the flags of the hidden `kstate bench scale worker`.
type workerOptions struct {
	Brokers     []string
	AppID       string
	In, Out     string
	StateDir    string
	Instance    string
	StateBytes  int
	Sets        []string
	StatusEvery time.Duration
	LogLevel    string
}

// workerLine is one line of a worker's stdout.
type workerLine struct {
	At     int64          `json:"at_ns"` // unix ns
	Status *kstate.Status `json:"status,omitempty"`
	// Stopped is set on the last line, Err to Run's error.
	Stopped bool   `json:"stopped,omitempty"`
	Err     string `json:"err,omitempty"`
}

func newScaleWorkerCmd() *cobra.Command {
	o := workerOptions{StateBytes: 512, StatusEvery: 100 * time.Millisecond, LogLevel: "warn"}
	cmd := &cobra.Command{
		Use:    "worker",
		Short:  "one application instance of `kstate bench scale` (started by it)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, os.Interrupt)
			defer stop()
			return runScaleWorker(ctx, cmd.OutOrStdout(), cmd.ErrOrStderr(), o)
		},
	}
	fl := cmd.Flags()
	fl.StringSliceVar(&o.Brokers, "brokers", nil, "bootstrap addresses")
	fl.StringVar(&o.AppID, "app-id", "", "Options.ApplicationID")
	fl.StringVar(&o.In, "in", "", "input topic")
	fl.StringVar(&o.Out, "out", "", "output topic")
	fl.StringVar(&o.StateDir, "state-dir", "", "Options.State.Dir")
	fl.StringVar(&o.Instance, "instance", "", "Options.InstanceID")
	fl.IntVar(&o.StateBytes, "state-bytes", o.StateBytes, "bytes of every key's state value")
	fl.StringArrayVar(&o.Sets, "set", nil, "Path=value: a kstate.Options field (repeatable)")
	fl.DurationVar(&o.StatusEvery, "status-every", o.StatusEvery, "status line interval")
	fl.StringVar(&o.LogLevel, "log", o.LogLevel, "log level of stderr")
	return cmd
}

// scaleConfig is the benchmark application: the fat count.
func scaleConfig(o workerOptions, logger *slog.Logger) (kstate.Topology[string, benchRow, benchOut], kstate.Options, error) {
	top := kstate.Topology[string, benchRow, benchOut]{
		Inputs:   kstate.Topics(rowCodec{}, o.In),
		KeySerde: serde.String(),
		NewProcessor: func() processor.StatefulProcessor[string, benchRow, benchOut] {
			return &fatCount{size: o.StateBytes}
		},
		Output: kstate.Output[string, benchOut]{Topic: o.Out, Serde: outCodec{}},
	}
	opts := kstate.Options{
		ApplicationID: o.AppID,
		InstanceID:    o.Instance,
		Kafka:         kstate.KafkaOptions{Brokers: o.Brokers},
		State:         kstate.StateOptions{Dir: o.StateDir},
		Timeouts:      kstate.TimeoutOptions{Shutdown: 30 * time.Second},
		Observability: kstate.ObservabilityOptions{Logger: logger},
	}
	for _, s := range o.Sets {
		if err := setOption(&opts, s); err != nil {
			return top, opts, err
		}
	}
	return top, opts, nil
}

func runScaleWorker(ctx context.Context, stdout, stderr io.Writer, o workerOptions) error {
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.LogLevel)); err != nil {
		return fmt.Errorf("bench scale worker: --log %q: %w", o.LogLevel, err)
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	top, opts, err := scaleConfig(o, logger)
	if err != nil {
		return err
	}
	app, err := kstate.New(top, opts)
	if err != nil {
		return err
	}
	if dir := os.Getenv(workerProfileEnv); dir != "" {
		stopProfile, err := startWorkerProfile(dir, o)
		if err != nil {
			return err
		}
		defer stopProfile()
	}
	enc := json.NewEncoder(stdout)
	done := make(chan struct{})
	reported := make(chan struct{})
	go func() {
		defer close(reported)
		t := time.NewTicker(o.StatusEvery)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			st := app.Status()
			if err := enc.Encode(workerLine{At: time.Now().UnixNano(), Status: &st}); err != nil {
				return // the benchmark went away
			}
		}
	}()
	err = app.Run(ctx)
	close(done)
	<-reported
	last := workerLine{At: time.Now().UnixNano(), Stopped: true}
	st := app.Status()
	last.Status = &st
	if err != nil {
		last.Err = err.Error()
	}
	_ = enc.Encode(last)
	return err
}

// workerProfileEnv names a directory: a worker started with it set writes
// a CPU profile of its whole run to <dir>/<app id>-<instance>.pprof (set by
// `kstate bench scale throughput --cpuprofile-dir`; the environment reaches
// the workers without a flag of their own).
const workerProfileEnv = "KSTATE_BENCH_WORKER_CPUPROFILE_DIR"

func startWorkerProfile(dir string, o workerOptions) (stop func(), err error) {
	f, err := os.Create(filepath.Join(dir, fmt.Sprintf("%s-%s.pprof", o.AppID, o.Instance)))
	if err != nil {
		return nil, fmt.Errorf("bench scale worker: CPU profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("bench scale worker: CPU profile: %w", err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// fatCount is the count of bench_procs.go with a large state: every key's
// ValueState holds its count (8 bytes) and size-8 bytes of incompressible
// padding, rewritten on every call, so that the changelog and the local
// store hold about size bytes per key, as an application keeping a
// profile or a session per key does.
type fatCount struct {
	size int
	v    state.ValueState[[]byte]
	rng  *rand.Rand
}

func (c *fatCount) Init(h processor.Handle) (err error) {
	c.rng = rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	c.v, err = processor.NewValueState(h, "v", state.Bytes())
	return err
}

func (c *fatCount) HandleInputRows(_ string, rows iter.Seq[benchRow], _ processor.TimerValues, out processor.Emitter[benchOut]) error {
	old, _, err := c.v.Get()
	if err != nil {
		return err
	}
	var n int64
	if len(old) >= 8 {
		n = int64(binary.BigEndian.Uint64(old))
	}
	for r := range rows {
		n++
		if err := out.Emit(benchOut{Count: n, ProducedNs: r.ProducedNs}); err != nil {
			return err
		}
	}
	return c.v.Update(fatValue(c.rng, n, c.size))
}

// fatValue is a state value: n big-endian, then random padding up to size
// bytes (at least 8 in all).
func fatValue(rng *rand.Rand, n int64, size int) []byte {
	b := make([]byte, max(size, 8))
	binary.BigEndian.PutUint64(b, uint64(n))
	for i := 8; i < len(b); i += 8 {
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], rng.Uint64())
		copy(b[i:], w[:])
	}
	return b
}

func (c *fatCount) HandleExpiredTimer(string, processor.TimerValues, processor.ExpiredTimerInfo, processor.Emitter[benchOut]) error {
	return nil
}

func (c *fatCount) Close() error { return nil }

// setOption sets one field of *opts from --set's "Path=value"
// (internal/optpath: the syntax of kstate-count's -set).
func setOption(opts any, assignment string) error {
	if err := optpath.Set(opts, assignment); err != nil {
		return fmt.Errorf("--set %w", err)
	}
	return nil
}
