package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/internal/engine"
	"github.com/kstate/kstate/internal/kafka"
	"github.com/kstate/kstate/internal/kafkabroker"
	"github.com/kstate/kstate/internal/kv"
	"github.com/kstate/kstate/serde"
)

// benchOptions are the flags of `kstate bench`.
type benchOptions struct {
	Brokers     []string      `json:"brokers,omitempty"`
	Keys        int           `json:"keys"`
	Records     int           `json:"records"`
	Partitions  int           `json:"partitions"`
	Processors  []string      `json:"processors"`
	Batch       int           `json:"batch"`
	Runs        int           `json:"runs"`
	Rate        int           `json:"rate"`
	LatencyFor  time.Duration `json:"latency_for_ns"`
	ValueBytes  int           `json:"value_bytes"`
	History     int           `json:"history"`
	SessionGap  time.Duration `json:"session_gap_ns"`
	NewKeys     int           `json:"new_keys"`
	Seed        uint64        `json:"seed"`
	Warmup      bool          `json:"warmup"`
	StateMemory int64         `json:"state_memory"`
	StateCache  int64         `json:"state_cache"`
	Backends    []string      `json:"backends,omitempty"`
	Pipelines   []int         `json:"pipelines,omitempty"`
	JSON        string        `json:"-"`
	CPUProfile  string        `json:"-"`
	Verbose     bool          `json:"-"`
	Timeout     time.Duration `json:"-"`
	BrokerLabel string        `json:"broker"`
}

func defaultBenchOptions() benchOptions {
	return benchOptions{
		Keys: 100_000, Records: 200_000, Partitions: 6, Processors: []string{"count", "heavy"},
		Batch: 0, Runs: 3, Rate: 5000, LatencyFor: 8 * time.Second, ValueBytes: 64, History: 5, SessionGap: time.Second, NewKeys: 20_000,
		Seed: 1, Warmup: true, Timeout: 30 * time.Minute,
	}
}

func newBenchCmd() *cobra.Command {
	o := defaultBenchOptions()
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "End-to-end benchmark on a real Kafka broker: throughput, latency, restore",
		Long: `bench measures a stateful application end to end, exactly-once, against a
real Kafka broker (started from the test harness's Apache Kafka jars unless
--brokers is given). For every run and every processor it:

  1. produces --records input rows, keyed uniformly over --keys keys, and
     times the application from its first to its last committed output
     (the outputs are read read_committed, as a downstream consumer would);
  2. produces at a fixed --rate for --latency-for, stamping each row, and
     reports the end-to-end latency (produce → committed output visible) at
     p50/p90/p99/max;
  3. stops the application, deletes its local state, restarts it and
     reports the changelog restore speed and the time to the first
     committed batch;
  4. checks exactly-once: one output per input row and every key's final
     count equal to its input rows.

Processors: "count" (one ValueState per key), "heavy" (a bounded
ListState, a MapState of aggregates and a timer per key) and "churn"
(sessions: a MapState and a ListState per key, its timer moved on every row,
the session cleared when the timer fires after --session-gap: deleted
entries pile up, as in a heartbeat or session processor). For churn, after
phase 2 the benchmark waits until every session has closed, stops the
application, produces --new-keys rows of keys never seen (one row each),
restarts it on the same state directory (the deleted entries stay) and
times those new keys: issue #25's defect, where a new key's scans stepped
over the closed sessions' deleted entries. Runs alternate the
processor order; the summary gives medians with [min–max] over the runs and
the within-run ratio of each processor to the first one.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), o.Timeout)
			defer cancel()
			return runBenchCmd(ctx, cmd.OutOrStdout(), cmd.ErrOrStderr(), o)
		},
	}
	fl := cmd.Flags()
	fl.StringSliceVar(&o.Brokers, "brokers", nil, "bootstrap addresses of a running cluster (default: start a real broker from the harness's Kafka jars and stop it after)")
	fl.IntVar(&o.Keys, "keys", o.Keys, "distinct keys")
	fl.IntVar(&o.Records, "records", o.Records, "input rows of the throughput phase, per processor and run")
	fl.IntVar(&o.Partitions, "partitions", o.Partitions, "partitions of the input, output and changelog topics")
	fl.StringSliceVar(&o.Processors, "processor", o.Processors, "processors to compare: count, heavy, churn (the first one is the base of the ratios)")
	fl.IntVar(&o.Batch, "batch", o.Batch, "Options.Batching.MaxRecords (0: the default, adaptive batches)")
	fl.IntVar(&o.Runs, "runs", o.Runs, "repetitions (medians and min/max are reported)")
	fl.IntVar(&o.Rate, "rate", o.Rate, "records/s of the latency phase (keep it below the slowest processor's throughput)")
	fl.DurationVar(&o.LatencyFor, "latency-for", o.LatencyFor, "duration of the latency phase")
	fl.IntVar(&o.ValueBytes, "value-bytes", o.ValueBytes, "input value size (at least 16)")
	fl.IntVar(&o.History, "history", o.History, "heavy, churn: values kept per key in the ListState")
	fl.DurationVar(&o.SessionGap, "session-gap", o.SessionGap, "churn: a key's session closes this long after its last row (its timer fires)")
	fl.IntVar(&o.NewKeys, "new-keys", o.NewKeys, "churn: rows of the phase after the churn, one per new key, timed after a restart on the same state (0: no such phase)")
	fl.Uint64Var(&o.Seed, "seed", o.Seed, "seed of the key sequence")
	fl.BoolVar(&o.Warmup, "warmup", o.Warmup, "run a small unreported pass first, so that run 1 does not meet a cold broker (JIT) alone")
	fl.Int64Var(&o.StateMemory, "state-memory", 0, "Options.State.Memory in bytes (0, the default: a 64 MiB cache and a 32 MiB memtable per shard; positive: one shared budget)")
	fl.Int64Var(&o.StateCache, "state-cache", 0, "Options.State.CacheBytes: bytes of the committed-state cache (0: kstate's default, 64 MiB; negative: off)")
	fl.StringSliceVar(&o.Backends, "backend", nil, "Options.State.Backend values to compare (rocksdb, pebble): every processor runs once per backend in each run, interleaved, named processor.backend (e.g. count.pebble); default: the build's default backend only")
	fl.IntSliceVar(&o.Pipelines, "pipelines", nil, "Options.Batching.Pipelines values to compare: every processor runs once per value in each run, interleaved, named processor-pN (e.g. count-p2); default: kstate's default (automatic: one per core, at most 4 and the partitions) only")
	fl.StringVar(&o.JSON, "json", "", "also write every run and the summary as JSON to this file")
	fl.StringVar(&o.CPUProfile, "cpuprofile", "", "write a CPU profile of the whole benchmark process (go tool pprof)")
	fl.BoolVarP(&o.Verbose, "verbose", "v", false, "show the applications' logs")
	fl.DurationVar(&o.Timeout, "timeout", o.Timeout, "give up after this long")
	cmd.AddCommand(newBenchScaleCmd()) // bench_scale.go
	return cmd
}

// runResult is one processor in one run.
type runResult struct {
	Processor string `json:"processor"`
	Run       int    `json:"run"`

	InputRecords int     `json:"input_records"`
	ProduceRate  float64 `json:"input_produce_rps"` // how fast the input was written (not the app)

	Startup       time.Duration `json:"startup_ns"` // Run → first committed output
	Throughput    float64       `json:"throughput_rps"`
	Commits       int64         `json:"throughput_commits"`
	FirstTxn      time.Duration `json:"first_commit_latency_ns"` // End(commit) of the app's first transaction
	CommitMean    time.Duration `json:"throughput_commit_mean_ns"`
	RowsPerCommit float64       `json:"throughput_rows_per_commit"`
	// ThroughputCPU is this process's CPU time (user + system) from the
	// app's start to its last throughput output: the app, plus the output
	// reader; not the broker. CPUBusy is it over that wall time, in cores.
	ThroughputCPU time.Duration `json:"throughput_cpu_ns"`
	CPUBusy       float64       `json:"throughput_cpu_cores"`

	LatencyRate          int           `json:"latency_rate_rps"`
	LatencyRecords       int           `json:"latency_records"`
	LatencySamples       int           `json:"latency_samples"`
	LatencyP50           time.Duration `json:"latency_p50_ns"`
	LatencyP90           time.Duration `json:"latency_p90_ns"`
	LatencyP99           time.Duration `json:"latency_p99_ns"`
	LatencyMax           time.Duration `json:"latency_max_ns"`
	InputAckP50          time.Duration `json:"latency_input_ack_p50_ns"`  // the input producer's Produce call (included)
	ToOutputP50          time.Duration `json:"latency_to_output_p50_ns"`  // input produced → output produced
	ToVisibleP50         time.Duration `json:"latency_to_visible_p50_ns"` // output produced → visible downstream
	ToVisibleP99         time.Duration `json:"latency_to_visible_p99_ns"`
	LatencyCommits       int64         `json:"latency_commits"`
	LatencyCommitMean    time.Duration `json:"latency_commit_mean_ns"`
	LatencyRowsPerCommit float64       `json:"latency_rows_per_commit"`

	// Commit latencies sampled from Metrics (intervals with exactly one
	// commit), per phase.
	ThroughputCommitP50 time.Duration  `json:"throughput_commit_p50_ns"`
	ThroughputCommitP99 time.Duration  `json:"throughput_commit_p99_ns"`
	LatencyCommitP50    time.Duration  `json:"latency_commit_p50_ns"`
	LatencyCommitP99    time.Duration  `json:"latency_commit_p99_ns"`
	CommitSamples       []commitSample `json:"commit_samples"`

	// The same rows inside the application (latencyProbe): input produced
	// → fetched by the app's consumer, → returned by the engine's Poll; and
	// the round trips of the transactions' requests.
	FetchedP50         time.Duration `json:"latency_fetched_p50_ns"`
	FetchedP99         time.Duration `json:"latency_fetched_p99_ns"`
	PolledP50          time.Duration `json:"latency_polled_p50_ns"`
	PolledP99          time.Duration `json:"latency_polled_p99_ns"`
	ProduceReqP50      time.Duration `json:"latency_produce_request_p50_ns"`
	ProduceReqP99      time.Duration `json:"latency_produce_request_p99_ns"`
	OffsetCommitReqP50 time.Duration `json:"latency_txn_offset_commit_p50_ns"`
	OffsetCommitReqP99 time.Duration `json:"latency_txn_offset_commit_p99_ns"`
	EndTxnReqP50       time.Duration `json:"latency_end_txn_p50_ns"`
	EndTxnReqP99       time.Duration `json:"latency_end_txn_p99_ns"`

	Batches         int64   `json:"batches"`
	Rounds          int64   `json:"rounds"`
	Aborts          int64   `json:"aborts"`
	ChangelogPerRow float64 `json:"changelog_records_per_row"`

	// The churn workload's new keys after the restart (churnRestart).
	SessionsFired      int64         `json:"churn_sessions_fired"`
	SessionsClosed     time.Duration `json:"churn_sessions_closed_wait_ns"` // end of phase 2 → no timer left
	NewKeys            int           `json:"churn_new_keys"`
	NewKeysRate        float64       `json:"churn_new_keys_rps"`             // restart → last output
	NewKeysSpanRate    float64       `json:"churn_new_keys_span_rps"`        // first → last output
	NewKeysFirst       time.Duration `json:"churn_new_keys_first_output_ns"` // restart → first output
	NewKeysFirstCommit time.Duration `json:"churn_new_keys_first_commit_ns"` // Metrics.FirstCommit
	NewKeysCommitMean  time.Duration `json:"churn_new_keys_commit_mean_ns"`

	RestoreRecords int64         `json:"restore_records"`
	RestoreTime    time.Duration `json:"restore_slowest_partition_ns"`
	RestoreRate    float64       `json:"restore_rps"`
	RestoreReady   time.Duration `json:"restore_ready_ns"` // restart → all partitions ready
	FirstCommit    time.Duration `json:"restart_first_commit_ns"`
}

type benchReport struct {
	Options benchOptions `json:"options"`
	Machine struct {
		NumCPU     int    `json:"num_cpu"`
		GOMAXPROCS int    `json:"gomaxprocs"`
		GoVersion  string `json:"go_version"`
		Started    string `json:"started"`
	} `json:"machine"`
	Runs    []*runResult `json:"runs"`
	Summary summary      `json:"summary"`
	// PeakRSS is this process's peak resident set (VmHWM) at the end:
	// the application, the input producer and the output consumer, not
	// the broker. 0 where /proc is missing.
	PeakRSS int64 `json:"peak_rss_bytes"`
}

func (o *benchOptions) validate() error {
	procs := benchProcs(*o)
	switch {
	case o.Keys <= 0 || o.Records <= 0 || o.Partitions <= 0 || o.Runs <= 0 || o.Batch < 0:
		return errors.New("bench: --keys, --records, --partitions and --runs must be positive, --batch not negative")
	case o.Rate < 0 || o.LatencyFor < 0:
		return errors.New("bench: --rate and --latency-for must not be negative")
	case o.ValueBytes < minValueBytes:
		return fmt.Errorf("bench: --value-bytes %d: at least %d", o.ValueBytes, minValueBytes)
	case o.History <= 0:
		return errors.New("bench: --history must be positive")
	case o.SessionGap <= 0:
		return errors.New("bench: --session-gap must be positive")
	case o.NewKeys < 0 || o.NewKeys > 1_000_000:
		return errors.New("bench: --new-keys must be within 0..1000000")
	case len(o.Processors) == 0:
		return errors.New("bench: no --processor")
	}
	for _, p := range o.Processors {
		name, pipes := cutPipelines(p) // bench_pipelines.go
		if pipes < 0 {
			return fmt.Errorf("bench: processor %q: want -p<N> with N >= 1", p)
		}
		base, backend, _ := strings.Cut(name, ".")
		if _, ok := procs[base]; !ok {
			return fmt.Errorf("bench: unknown processor %q (want count, heavy or churn, optionally .rocksdb or .pebble)", p)
		}
		if backend != "" {
			if err := kv.Backend(backend).Check(); err != nil {
				return fmt.Errorf("bench: processor %q: %w", p, err)
			}
		}
	}
	return nil
}

// expandBackends turns --processor × --backend into the variants run, in
// order: count.rocksdb, count.pebble, heavy.rocksdb, ...
func (o *benchOptions) expandBackends() {
	if len(o.Backends) == 0 {
		return
	}
	var vs []string
	for _, p := range o.Processors {
		for _, b := range o.Backends {
			vs = append(vs, p+"."+b)
		}
	}
	o.Processors = vs
}

// variant returns the processor of a variant name (count or count.pebble)
// named after the variant, and the backend ("" = the default).
func variant(procs map[string]benchProc, name string) (benchProc, string) {
	bare, _ := cutPipelines(name)
	base, backend, _ := strings.Cut(bare, ".")
	p := procs[base]
	p.name = name
	return p, backend
}

func runBenchCmd(ctx context.Context, stdout, stderr io.Writer, o benchOptions) error {
	if o.CPUProfile != "" {
		f, err := os.Create(o.CPUProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	rep, err := runBench(ctx, stderr, o)
	if rep != nil && len(rep.Runs) > 0 {
		fmt.Fprintf(stdout, "\nkstate bench: %d keys, %d records, %d partitions, batch %d (0: adaptive), latency at %d records/s for %v, %d run(s), broker %s, %d CPUs\n",
			o.Keys, o.Records, o.Partitions, o.Batch, o.Rate, o.LatencyFor, o.Runs, rep.Options.BrokerLabel, runtime.NumCPU())
		printTable(stdout, rep.Summary)
		rep.PeakRSS = peakRSS()
		fmt.Fprintf(stdout, "peak RSS of this process (VmHWM; not the broker): %.0f MiB\n", float64(rep.PeakRSS)/(1<<20))
		if o.JSON != "" {
			b, jerr := json.MarshalIndent(rep, "", "  ")
			if jerr == nil {
				jerr = os.WriteFile(o.JSON, append(b, '\n'), 0o644)
			}
			if jerr != nil && err == nil {
				err = jerr
			}
		}
	}
	return err
}

// runBench runs every run and returns the report (partial on error).
func runBench(ctx context.Context, progress io.Writer, o benchOptions) (*benchReport, error) {
	o.expandBackends()
	o.expandPipelines()
	if err := o.validate(); err != nil {
		return nil, err
	}
	logf := func(format string, args ...any) { fmt.Fprintf(progress, "bench: "+format+"\n", args...) }
	rep := &benchReport{Options: o}
	rep.Machine.NumCPU, rep.Machine.GOMAXPROCS = runtime.NumCPU(), runtime.GOMAXPROCS(0)
	rep.Machine.GoVersion, rep.Machine.Started = runtime.Version(), time.Now().UTC().Format(time.RFC3339)

	brokers, label, stopBroker, err := benchBroker(ctx, "bench", o.Brokers, o.BrokerLabel, o.Verbose, logf)
	if err != nil {
		return nil, err
	}
	defer stopBroker()
	o.Brokers, o.BrokerLabel = brokers, label
	rep.Options = o
	rep.Options.Brokers = nil

	dir, err := os.MkdirTemp("", "kstate-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)

	procs := benchProcs(o)
	id := fmt.Sprintf("%x", time.Now().UnixNano()&0xffffffff)
	if o.Warmup {
		wo := o
		wo.Records, wo.Rate, wo.NewKeys = min(o.Records, 20_000), 0, min(o.NewKeys, 1000)
		t0 := time.Now()
		proc, backend := variant(procs, o.Processors[0])
		b := &benchRun{o: wo, proc: proc, backend: backend, pipelines: pipelinesOf(o.Processors[0]), run: 0, id: id, dir: dir, logf: logf}
		if _, err := b.do(ctx); err != nil {
			return rep, fmt.Errorf("bench: warm-up: %w", err)
		}
		logf("warm-up pass (%d records, not reported) took %v", wo.Records, time.Since(t0).Round(time.Millisecond))
	}
	for run := 1; run <= o.Runs; run++ {
		order := slices.Clone(o.Processors)
		if run%2 == 0 {
			slices.Reverse(order) // alternate, so drift does not favour one processor
		}
		for _, name := range order {
			proc, backend := variant(procs, name)
			b := &benchRun{o: o, proc: proc, backend: backend, pipelines: pipelinesOf(name), run: run, id: id, dir: dir, logf: logf}
			r, err := b.do(ctx)
			if r != nil {
				rep.Runs = append(rep.Runs, r)
			}
			if err != nil {
				rep.Summary = summarize(o.Processors, rep.Runs)
				return rep, fmt.Errorf("bench: run %d, processor %s: %w", run, name, err)
			}
			logf("run %d %-5s: %.0f records/s (CPU %.2f cores), latency p50 %v p99 %v, commit mean %v, restore %.0f records/s, first commit after restart %v",
				run, name, r.Throughput, r.CPUBusy, r.LatencyP50.Round(time.Millisecond), r.LatencyP99.Round(time.Millisecond),
				r.CommitMean.Round(100*time.Microsecond), r.RestoreRate, r.FirstCommit.Round(time.Millisecond))
		}
	}
	rep.Summary = summarize(o.Processors, rep.Runs)
	return rep, nil
}

// benchRun is one processor in one run.
type benchRun struct {
	o       benchOptions
	proc    benchProc
	backend string // Options.State.Backend; "" = the default
	run     int
	id      string
	dir     string
	logf    func(string, ...any)

	pipelines int // Options.Batching.Pipelines; 0 = the default
}

// benchConfig is one bench application's Topology and Options.
type benchConfig struct {
	top  kstate.Topology[string, benchRow, benchOut]
	opts kstate.Options
}

func (b *benchRun) config(appID, in, out string) benchConfig {
	logger := slog.New(slog.DiscardHandler)
	if b.o.Verbose {
		logger = slog.Default()
	}
	return benchConfig{kstate.Topology[string, benchRow, benchOut]{
		Inputs:       kstate.Topics(rowCodec{}, in),
		KeySerde:     serde.String(),
		NewProcessor: b.proc.newProc,
		TimeMode:     b.proc.timeMode,
		Output: kstate.Output[string, benchOut]{
			Topic: out,
			Serde: outCodec{},
		},
	}, kstate.Options{
		ApplicationID: appID,
		InstanceID:    "bench",
		Kafka: kstate.KafkaOptions{
			Brokers: b.o.Brokers,
		},
		State: kstate.StateOptions{
			Memory:     b.o.StateMemory,
			CacheBytes: b.o.StateCache,
			Backend:    b.backend,
			Dir:        filepath.Join(b.dir, appID),
		},
		Batching: kstate.BatchingOptions{
			MaxRecords: b.o.Batch,
			Pipelines:  b.pipelines,
		},
		Timeouts: kstate.TimeoutOptions{
			Shutdown: 20 * time.Second,
		},
		Observability: kstate.ObservabilityOptions{
			Logger: logger,
		},
	}}
}

// app is a running App.
type app struct {
	*kstate.App[string, benchRow, benchOut]
	start    time.Time
	cancel   context.CancelFunc
	finished chan struct{} // closed when Run returned
	err      error         // Run's error, once finished
}

func startApp(ctx context.Context, cfg benchConfig) (*app, error) {
	a, err := kstate.New(cfg.top, cfg.opts)
	if err != nil {
		return nil, err
	}
	actx, cancel := context.WithCancel(ctx)
	r := &app{App: a, start: time.Now(), cancel: cancel, finished: make(chan struct{})}
	go func() {
		r.err = a.Run(actx)
		close(r.finished)
	}()
	return r, nil
}

// stop cancels Run and returns its error. Idempotent.
func (a *app) stop() error {
	a.cancel()
	<-a.finished
	return a.err
}

// failed returns an error if Run already returned.
func (a *app) failed() error {
	select {
	case <-a.finished:
		if a.err == nil {
			return errors.New("application stopped without error")
		}
		return fmt.Errorf("application stopped: %w", a.err)
	default:
		return nil
	}
}

// waitOutputs waits for n outputs, failing early if the app stops.
func waitOutputs(ctx context.Context, c *collector, a *app, n int) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-a.finished:
			cancel()
		case <-ctx.Done():
		}
	}()
	err := c.waitFor(ctx, n)
	if ferr := a.failed(); ferr != nil && err != nil {
		return ferr
	}
	return err
}

func (b *benchRun) do(ctx context.Context) (*runResult, error) {
	o := b.o
	r := &runResult{Processor: b.proc.name, Run: b.run, InputRecords: o.Records, LatencyRate: o.Rate}
	appID := fmt.Sprintf("kbench-%s-%s-%d", b.id, b.proc.name, b.run)
	in, out := appID+"-in", appID+"-out"

	adm, err := kafka.NewAdmin(o.Brokers)
	if err != nil {
		return nil, err
	}
	defer adm.Close()
	for _, t := range []string{in, out} {
		if err := adm.EnsureTopic(ctx, kafka.TopicSpec{Name: t, Partitions: o.Partitions, ReplicationFactor: -1}); err != nil {
			return nil, err
		}
	}

	t0 := time.Now()
	seed := o.Seed*1000 + uint64(b.run)
	perKey, err := produceInput(ctx, o.Brokers, in, o.Records, o.Keys, o.ValueBytes, seed)
	if err != nil {
		return nil, err
	}
	r.ProduceRate = float64(o.Records) / time.Since(t0).Seconds()

	col, err := newCollector(o.Brokers, appID+"-reader", out)
	if err != nil {
		return nil, err
	}
	cctx, stopCol := context.WithCancel(ctx)
	go col.run(cctx)
	defer func() {
		stopCol()
		<-col.done
		col.close()
	}()
	select {
	case <-col.assigned:
	case <-col.done:
		return nil, fmt.Errorf("output consumer: %v", col.err)
	case <-ctx.Done():
		return nil, ctx.Err()
	}

	// 1. Throughput: the input is all there; time first → last output.
	cfg := b.config(appID, in, out)
	probe := newLatencyProbe(in)
	cfg.opts.Kafka.ClientOptions = append(cfg.opts.Kafka.ClientOptions, kgo.WithHooks(probe))
	cpu0, wall0 := processCPU(), time.Now() // bench_pipelines.go
	a, err := startApp(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer func() { _ = a.stop() }()
	sampler := sampleCommits(a, "throughput")
	if err := waitOutputs(ctx, col, a, o.Records); err != nil {
		sampler.stop()
		return nil, fmt.Errorf("throughput phase: %w", err)
	}
	r.ThroughputCPU = processCPU() - cpu0
	r.CPUBusy = r.ThroughputCPU.Seconds() / time.Since(wall0).Seconds()
	n, first, span := col.throughputSpan()
	r.Startup = first.Sub(a.start)
	if n > 0 && span > 0 {
		r.Throughput = float64(n) / span.Seconds()
	} else if r.Startup > 0 {
		// Everything arrived in one poll (tiny runs): count from the start.
		r.Throughput = float64(o.Records) / r.Startup.Seconds()
	}
	// Row counters are updated after the local commit, which may lag the
	// outputs becoming visible; the input size is known exactly.
	m1 := a.Metrics()
	r.Commits = m1.Total.Commits
	r.CommitMean = mean(m1.Total.CommitLatency, m1.Total.Commits)
	if m1.Total.Commits > 0 {
		r.RowsPerCommit = float64(o.Records) / float64(m1.Total.Commits)
	}

	// 2. Latency: a steady rate below saturation; the app is caught up.
	total := o.Records
	sampler.mark("latency")
	if o.Rate > 0 && o.LatencyFor > 0 {
		from := time.Now()
		col.window(from, from.Add(24*time.Hour))
		probe.on.Store(true)
		sent, acks, err := paced(ctx, o.Brokers, in, o.Rate, o.LatencyFor, o.Keys, o.ValueBytes, seed, perKey)
		if err != nil {
			sampler.stop()
			return nil, err
		}
		col.window(from, time.Now())
		total += sent
		r.LatencyRecords = sent
		if err := waitOutputs(ctx, col, a, total); err != nil {
			sampler.stop()
			return nil, fmt.Errorf("latency phase: %w", err)
		}
		probe.on.Store(false)
		lat, toOut, toVis := col.latencySamples()
		ps := probe.samples()
		r.FetchedP50, r.FetchedP99 = quantile(ps.fetched, 0.5), quantile(ps.fetched, 0.99)
		r.PolledP50, r.PolledP99 = quantile(ps.polled, 0.5), quantile(ps.polled, 0.99)
		r.ProduceReqP50, r.ProduceReqP99 = quantile(ps.produce, 0.5), quantile(ps.produce, 0.99)
		r.OffsetCommitReqP50, r.OffsetCommitReqP99 = quantile(ps.offsetCommit, 0.5), quantile(ps.offsetCommit, 0.99)
		r.EndTxnReqP50, r.EndTxnReqP99 = quantile(ps.endTxns, 0.5), quantile(ps.endTxns, 0.99)
		r.LatencySamples = len(lat)
		r.LatencyP50, r.LatencyP90 = quantile(lat, 0.50), quantile(lat, 0.90)
		r.LatencyP99, r.LatencyMax = quantile(lat, 0.99), quantile(lat, 1)
		r.ToOutputP50, r.InputAckP50 = quantile(toOut, 0.5), quantile(acks, 0.5)
		r.ToVisibleP50, r.ToVisibleP99 = quantile(toVis, 0.5), quantile(toVis, 0.99)
		m2 := a.Metrics()
		r.LatencyCommits = m2.Total.Commits - m1.Total.Commits
		r.LatencyCommitMean = mean(m2.Total.CommitLatency-m1.Total.CommitLatency, r.LatencyCommits)
		if r.LatencyCommits > 0 {
			r.LatencyRowsPerCommit = float64(sent) / float64(r.LatencyCommits)
		}
	}
	r.CommitSamples = sampler.stop()
	tc, lc := latencies(r.CommitSamples, "throughput"), latencies(r.CommitSamples, "latency")
	if len(tc) > 0 {
		// The sampler polls every 2ms and transactions take longer, so
		// its first sample is the first transaction, reported on its own
		// (see docs/benchmarks/history.md, "What bounds the numbers": it
		// costs a fixed 500ms).
		r.FirstTxn, tc = tc[0], tc[1:]
	}
	r.ThroughputCommitP50, r.ThroughputCommitP99 = quantile(tc, 0.5), quantile(tc, 0.99)
	r.LatencyCommitP50, r.LatencyCommitP99 = quantile(lc, 0.5), quantile(lc, 0.99)
	if bare, _ := cutPipelines(b.proc.name); strings.HasPrefix(bare, "churn") && o.NewKeys > 0 {
		if total, err = b.churnRestart(ctx, a, cfg, col, r, total); err != nil {
			return r, err
		}
	}
	if err := a.stop(); err != nil {
		return nil, fmt.Errorf("stop: %w", err)
	}
	m := a.Metrics()
	r.Batches, r.Rounds, r.Aborts = m.Total.Batches, m.Total.Rounds, m.Total.Aborts
	if m.Total.RowsIn > 0 {
		r.ChangelogPerRow = float64(m.Total.ChangelogRecords) / float64(m.Total.RowsIn)
	}

	// 3. Restore: no local state; same instance id, so the static member
	// gets its partitions back at once and fences its predecessor.
	if err := os.RemoveAll(cfg.opts.State.Dir); err != nil {
		return nil, err
	}
	a2, err := startApp(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer func() { _ = a2.stop() }()
	// One row per partition, so that every partition commits a batch once
	// restored (FirstCommit needs a commit).
	probes, err := probeRecords(in, o.Partitions, o.Keys, o.ValueBytes, perKey)
	if err != nil {
		return nil, err
	}
	if err := produce(ctx, o.Brokers, probes); err != nil {
		return nil, err
	}
	total += len(probes)
	for {
		m := a2.Metrics()
		if r.RestoreReady == 0 && len(m.Assigned) == o.Partitions && len(m.Restoring) == 0 && len(m.Partitions) == o.Partitions {
			r.RestoreReady = time.Since(a2.start)
			r.RestoreRecords = m.Total.RestoreRecords
			for _, c := range m.Partitions {
				r.RestoreTime = max(r.RestoreTime, c.RestoreTime)
			}
		}
		if r.RestoreReady > 0 && m.FirstCommit > 0 {
			r.FirstCommit = m.FirstCommit
			break
		}
		if err := a2.failed(); err != nil {
			return r, fmt.Errorf("restore: %w", err)
		}
		select {
		case <-ctx.Done():
			return r, fmt.Errorf("restore: %w", ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
	if r.RestoreTime > 0 {
		r.RestoreRate = float64(r.RestoreRecords) / r.RestoreTime.Seconds()
	}
	if err := waitOutputs(ctx, col, a2, total); err != nil {
		return r, fmt.Errorf("after restore: %w", err)
	}
	if err := a2.stop(); err != nil {
		return r, fmt.Errorf("stop after restore: %w", err)
	}
	// Late duplicates would arrive after the last expected output: give
	// them a moment before checking.
	time.Sleep(200 * time.Millisecond)
	if err := col.check(perKey, total); err != nil {
		return r, err
	}
	return r, nil
}

// probeRecords returns one input row per partition, each with a key of
// that partition (Kafka's murmur2 partitioner), counted in perKey.
func probeRecords(topic string, partitions, keys, valueBytes int, perKey []int32) ([]kafka.Record, error) {
	var out []kafka.Record
	seen := make(map[int32]bool)
	now := time.Now().UnixNano()
	for k := 0; k < keys && len(seen) < partitions; k++ {
		p := engine.PartitionFor(keyBytes(k), partitions)
		if seen[p] {
			continue
		}
		seen[p] = true
		perKey[k]++
		out = append(out, kafka.Record{Topic: topic, Partition: kafka.AnyPartition, Key: keyBytes(k),
			Value: encodeRow(make([]byte, valueBytes), benchRow{ProducedNs: now, V: 1})})
	}
	if len(seen) < partitions {
		return nil, fmt.Errorf("bench: %d keys do not cover %d partitions", keys, partitions)
	}
	return out, nil
}

func produce(ctx context.Context, brokers []string, recs []kafka.Record) error {
	p, err := kafka.NewProducer(brokers)
	if err != nil {
		return err
	}
	defer p.Close()
	return p.Produce(ctx, recs...)
}

// commitSampler polls App.Metrics every few ms and keeps the latency of
// every interval in which exactly one transaction committed: a sampled
// distribution of commit latencies (Metrics only has their sum). Samples
// are tagged with the phase set by mark.
type commitSampler struct {
	stopc chan struct{}
	wg    sync.WaitGroup
	mu    struct {
		sync.Mutex
		phase   string
		samples []commitSample
	}
}

// commitSample is one sampled commit.
type commitSample struct {
	Phase   string        `json:"phase"`
	At      time.Duration `json:"at_ns"` // since Run started
	Latency time.Duration `json:"latency_ns"`
}

func sampleCommits(a *app, phase string) *commitSampler {
	s := &commitSampler{stopc: make(chan struct{})}
	s.mu.phase = phase
	s.wg.Go(func() {
		t := time.NewTicker(2 * time.Millisecond)
		defer t.Stop()
		prev := a.Metrics().Total
		for {
			select {
			case <-s.stopc:
				return
			case <-t.C:
			}
			cur := a.Metrics().Total
			if cur.Commits == prev.Commits+1 {
				s.mu.Lock()
				s.mu.samples = append(s.mu.samples, commitSample{Phase: s.mu.phase, At: time.Since(a.start),
					Latency: cur.CommitLatency - prev.CommitLatency})
				s.mu.Unlock()
			}
			prev = cur
		}
	})
	return s
}

// mark tags the following samples with phase.
func (s *commitSampler) mark(phase string) {
	s.mu.Lock()
	s.mu.phase = phase
	s.mu.Unlock()
}

func (s *commitSampler) stop() []commitSample {
	select {
	case <-s.stopc:
	default:
		close(s.stopc)
	}
	s.wg.Wait()
	return s.mu.samples
}

// latencies returns the latencies of phase's samples ("" = all).
func latencies(ss []commitSample, phase string) []time.Duration {
	var out []time.Duration
	for _, s := range ss {
		if phase == "" || s.Phase == phase {
			out = append(out, s.Latency)
		}
	}
	return out
}

// benchBroker gives a benchmark its cluster: brokers as given (labelled
// label, or by the addresses), or, without brokers, a real broker started
// from the harness's Kafka jars with the JIT of production (the tests'
// default, C1 only, spends CPU these 2-core benchmarks take from the
// application). stop stops the broker it started (a no-op otherwise).
// what names the benchmark in errors.
func benchBroker(ctx context.Context, what string, brokers []string, label string, verbose bool, logf func(string, ...any)) (addrs []string, brokerLabel string, stop func(), err error) {
	if len(brokers) > 0 {
		if label == "" {
			label = strings.Join(brokers, ",")
		}
		return brokers, label, func() {}, nil
	}
	quiet := func(string, ...any) {}
	if verbose {
		quiet = logf
	}
	libs, err := kafkabroker.ResolveJars(ctx, logf)
	if err != nil {
		return nil, "", nil, fmt.Errorf("%s: no --brokers and no real broker: %w", what, err)
	}
	t0 := time.Now()
	b, err := kafkabroker.StartBroker(ctx, libs, kafkabroker.StartOptions{FullJIT: true}, quiet)
	if err != nil {
		return nil, "", nil, fmt.Errorf("%s: start a real broker: %w", what, err)
	}
	logf("started Apache Kafka %s at %s in %v", kafkabroker.KafkaVersion, b.Addr, time.Since(t0).Round(time.Millisecond))
	return []string{b.Addr}, "Apache Kafka " + kafkabroker.KafkaVersion + " (harness, 1 node, KRaft, full JIT)", b.Stop, nil
}
