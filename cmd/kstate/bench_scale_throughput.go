package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/internal/kafka"
)

// `kstate bench scale throughput`: does keeping standby replicas slow the
// processing (issue #27: "throughput at N=3M with NumStandbys 1 and two
// instances within 10 % of NumStandbys 0, same run, interleaved")? Two
// instance processes (the workers of bench scale: the fat count) process
// a preloaded input of --records rows; each run has its own application id
// (an empty group, state and changelog) and output topic, and the values
// of --standbys alternate run by run.

// tputOptions are the flags of `kstate bench scale throughput`.
type tputOptions struct {
	Brokers     []string      `json:"brokers,omitempty"`
	Records     int           `json:"records"`
	Keys        int           `json:"keys"`
	StateBytes  int           `json:"state_bytes"`
	ValueBytes  int           `json:"value_bytes"`
	Partitions  int           `json:"partitions"`
	Instances   int           `json:"instances"`
	Standbys    []int         `json:"standbys"`
	Repeats     int           `json:"repeats"`
	Sets        []string      `json:"sets,omitempty"`
	JSON        string        `json:"-"`
	Verbose     bool          `json:"-"`
	Keep        bool          `json:"-"`
	Timeout     time.Duration `json:"-"`
	RunLimit    time.Duration `json:"run_limit_ns"`
	WorkerExe   string        `json:"-"`
	ProfileDir  string        `json:"-"`
	BrokerLabel string        `json:"broker"`
}

func defaultTputOptions() tputOptions {
	return tputOptions{Records: 3_000_000, Keys: 100_000, StateBytes: 512, ValueBytes: 64, Partitions: 6, Instances: 2,
		Standbys: []int{0, 1}, Repeats: 3, Timeout: 2 * time.Hour, RunLimit: 20 * time.Minute}
}

func newScaleThroughputCmd() *cobra.Command {
	o := defaultTputOptions()
	cmd := &cobra.Command{
		Use:   "throughput",
		Short: "Throughput of two instances with and without standby replicas (interleaved runs, medians)",
		Long: `throughput measures whether standby replicas slow the processing (issue
#27): --instances instance processes (the workers of bench scale: the
fat count, every key's state --state-bytes bytes) process a preloaded input
of --records rows over --keys keys, --repeats times for every value of
--standbys (Options.Group.Standbys), the values interleaved (their order
reversed every other repeat). Every run has its own application id (an
empty group, state and changelog) and output topic. A run's records/s is
--records over the time from the start of its instances to the last output
a read_committed consumer receives; "first to last" leaves out the start
(process start, group join, first batch). Every run checks exactly-once
(every key's counts 1..n, each once) and reports how many standby
partitions the group view of its instances listed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, os.Interrupt)
			defer stop()
			ctx, cancel := context.WithTimeout(ctx, o.Timeout)
			defer cancel()
			return runTputCmd(ctx, cmd.OutOrStdout(), cmd.ErrOrStderr(), o)
		},
	}
	fl := cmd.Flags()
	fl.StringSliceVar(&o.Brokers, "brokers", nil, "bootstrap addresses of a running cluster (default: start a real broker from the harness's Kafka jars and stop it after)")
	fl.IntVar(&o.Records, "records", o.Records, "input rows, preloaded once, processed by every run")
	fl.IntVar(&o.Keys, "keys", o.Keys, "distinct keys of the input (row i has key i mod keys)")
	fl.IntVar(&o.StateBytes, "state-bytes", o.StateBytes, "bytes of every key's state value (at least 8)")
	fl.IntVar(&o.ValueBytes, "value-bytes", o.ValueBytes, "input value size (at least 16)")
	fl.IntVar(&o.Partitions, "partitions", o.Partitions, "partitions of the input, output and changelog topics")
	fl.IntVar(&o.Instances, "instances", o.Instances, "instance processes of every run")
	fl.IntSliceVar(&o.Standbys, "standbys", o.Standbys, "Options.Group.Standbys values, interleaved")
	fl.IntVar(&o.Repeats, "repeats", o.Repeats, "runs of every --standbys value")
	fl.StringArrayVar(&o.Sets, "set", nil, "Path=value: a kstate.Options field of every instance (repeatable)")
	fl.StringVar(&o.JSON, "json", "", "also write the report as JSON to this file")
	fl.BoolVarP(&o.Verbose, "verbose", "v", false, "show the instances' logs (info) and the broker's start")
	fl.BoolVar(&o.Keep, "keep", false, "keep the work directory (state directories, instance logs)")
	fl.DurationVar(&o.Timeout, "timeout", o.Timeout, "give up after this long")
	fl.DurationVar(&o.RunLimit, "run-limit", o.RunLimit, "give up on a run after this long")
	fl.StringVar(&o.ProfileDir, "cpuprofile-dir", "", "write a CPU profile of every instance process to <dir>/<app id>-<instance>.pprof (go tool pprof)")
	fl.StringVar(&o.WorkerExe, "worker-exe", "", "the kstate binary the instances run (default: this one)")
	_ = fl.MarkHidden("worker-exe")
	return cmd
}

func (o *tputOptions) validate() error {
	switch {
	case o.Records <= 0 || o.Keys <= 0 || o.Partitions <= 0:
		return errors.New("bench scale throughput: --records, --keys and --partitions must be positive")
	case o.Instances < 1:
		return fmt.Errorf("bench scale throughput: --instances %d: at least 1", o.Instances)
	case o.Repeats < 1:
		return fmt.Errorf("bench scale throughput: --repeats %d: at least 1", o.Repeats)
	case o.StateBytes < 8:
		return fmt.Errorf("bench scale throughput: --state-bytes %d: at least 8", o.StateBytes)
	case o.ValueBytes < minValueBytes:
		return fmt.Errorf("bench scale throughput: --value-bytes %d: at least %d", o.ValueBytes, minValueBytes)
	case len(o.Standbys) == 0:
		return errors.New("bench scale throughput: no --standbys value")
	}
	for _, s := range o.Standbys {
		if s < 0 {
			return fmt.Errorf("bench scale throughput: --standbys %d: must not be negative", s)
		}
	}
	var probe kstate.Options
	for _, s := range o.Sets {
		if err := setOption(&probe, s); err != nil {
			return fmt.Errorf("bench scale throughput: %w", err)
		}
	}
	return nil
}

// tputRun is one run's measurements.
type tputRun struct {
	Repeat   int     `json:"repeat"`
	Standbys int     `json:"standbys"`
	Load1    float64 `json:"load1"`
	// Took is the time from the instances' start to the last output,
	// Span from the first output to the last; PerSec and SpanPerSec the
	// records/s over them.
	Took       time.Duration `json:"took_ns"`
	Span       time.Duration `json:"span_ns"`
	PerSec     float64       `json:"records_per_sec"`
	SpanPerSec float64       `json:"span_records_per_sec"`
	// Active is every instance's active partitions at the end,
	// StandbyParts the standby and warm-up partitions the group view
	// listed (summed over the members), Generation the group's last
	// generation as an instance reported it.
	Active       map[string][]int32 `json:"active"`
	StandbyParts int                `json:"standby_partitions"`
	WarmupParts  int                `json:"warmup_partitions"`
	Generation   int32              `json:"generation"`
	// BalancedAfter is the time from the start to when every instance
	// first held an active partition.
	BalancedAfter time.Duration `json:"balanced_after_ns"`
	ExactlyOnce   string        `json:"exactly_once"`
	// CPUPerM is the instances' CPU time (user and system) from start to
	// exit, per million records.
	CPUPerM time.Duration `json:"cpu_per_million_ns"`
}

type tputReport struct {
	Options tputOptions `json:"options"`
	Machine struct {
		NumCPU    int     `json:"num_cpu"`
		GoVersion string  `json:"go_version"`
		Started   string  `json:"started"`
		Load1     float64 `json:"load1_at_start"`
	} `json:"machine"`
	Runs []*tputRun `json:"runs"`
	// Medians per --standbys value (records/s from start, and first to
	// last output).
	Median     map[int]float64 `json:"median_records_per_sec"`
	SpanMedian map[int]float64 `json:"median_span_records_per_sec"`
}

func runTputCmd(ctx context.Context, stdout, stderr io.Writer, o tputOptions) error {
	rep, err := runTput(ctx, stderr, o)
	if rep != nil {
		printTputTable(stdout, rep)
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

func runTput(ctx context.Context, progress io.Writer, o tputOptions) (*tputReport, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	if o.WorkerExe == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("bench scale throughput: the workers run this binary: %w", err)
		}
		o.WorkerExe = exe
	}
	if o.ProfileDir != "" {
		dir, err := filepath.Abs(o.ProfileDir)
		if err == nil {
			o.ProfileDir = dir
			err = os.MkdirAll(dir, 0o755)
		}
		if err != nil {
			return nil, fmt.Errorf("bench scale throughput: --cpuprofile-dir: %w", err)
		}
		// The workers inherit the environment (bench_scale_worker.go).
		if err := os.Setenv(workerProfileEnv, o.ProfileDir); err != nil {
			return nil, err
		}
	}
	logf := func(format string, args ...any) {
		fmt.Fprintf(progress, "bench scale throughput %s: "+format+"\n", append([]any{time.Now().UTC().Format("15:04:05")}, args...)...)
	}
	rep := &tputReport{Median: map[int]float64{}, SpanMedian: map[int]float64{}}
	rep.Machine.NumCPU, rep.Machine.GoVersion = runtime.NumCPU(), runtime.Version()
	rep.Machine.Started, rep.Machine.Load1 = time.Now().UTC().Format(time.RFC3339), load1()
	brokers, label, stopBroker, err := benchBroker(ctx, "bench scale throughput", o.Brokers, o.BrokerLabel, o.Verbose, logf)
	if err != nil {
		return nil, err
	}
	defer stopBroker()
	o.Brokers, o.BrokerLabel = brokers, label
	rep.Options = o
	rep.Options.Brokers = nil

	dir, err := os.MkdirTemp("", "kstate-bench-tput-")
	if err != nil {
		return nil, err
	}
	if o.Keep {
		logf("work directory (kept): %s", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	adm, err := kafka.NewAdmin(o.Brokers)
	if err != nil {
		return nil, err
	}
	defer adm.Close()
	id := fmt.Sprintf("ktput-%x", time.Now().UnixNano()&0xffffffff)
	in := id + "-in"
	if err := adm.EnsureTopic(ctx, kafka.TopicSpec{Name: in, Partitions: o.Partitions, ReplicationFactor: -1}); err != nil {
		return nil, err
	}
	t0 := time.Now()
	if err := produceBacklog(ctx, o.Brokers, in, o.Records, o.Keys, o.ValueBytes); err != nil {
		return nil, err
	}
	logf("preload: %d rows over %d keys produced in %v", o.Records, o.Keys, time.Since(t0).Round(time.Millisecond))
	perKey := make([]int32, o.Keys)
	for i := range o.Records {
		perKey[i%o.Keys]++
	}

	n := 0
	for rpt := 1; rpt <= o.Repeats; rpt++ {
		order := slices.Clone(o.Standbys)
		if rpt%2 == 0 {
			slices.Reverse(order)
		}
		for _, sb := range order {
			n++
			run, err := tputOnce(ctx, logf, o, adm, tputRunSpec{
				dir: filepath.Join(dir, fmt.Sprintf("run%d", n)), appID: fmt.Sprintf("%s-r%d", id, n), in: in,
				repeat: rpt, standbys: sb, perKey: perKey,
			})
			if run != nil {
				rep.Runs = append(rep.Runs, run)
			}
			if err != nil {
				return rep, err
			}
			logf("repeat %d, standbys %d: %.0f records/s (start → last output %v), %.0f records/s (first → last output), standby partitions %d, warm-ups %d, active %v, CPU %.1f s per 1M records, load %.1f",
				rpt, sb, run.PerSec, run.Took.Round(time.Millisecond), run.SpanPerSec, run.StandbyParts, run.WarmupParts, run.Active, run.CPUPerM.Seconds(), run.Load1)
		}
	}
	for _, sb := range o.Standbys {
		var a, s []float64
		for _, r := range rep.Runs {
			if r.Standbys == sb {
				a, s = append(a, r.PerSec), append(s, r.SpanPerSec)
			}
		}
		rep.Median[sb], rep.SpanMedian[sb] = medianF(a), medianF(s)
	}
	return rep, nil
}

type tputRunSpec struct {
	dir, appID, in   string
	repeat, standbys int
	perKey           []int32
}

// tputOnce runs the instances of one run over the preloaded input until
// every output arrived, checks exactly-once and removes the run's topics
// and state.
func tputOnce(ctx context.Context, logf func(string, ...any), o tputOptions, adm *kafka.Admin, s tputRunSpec) (*tputRun, error) {
	out := s.appID + "-out"
	if err := adm.EnsureTopic(ctx, kafka.TopicSpec{Name: out, Partitions: o.Partitions, ReplicationFactor: -1}); err != nil {
		return nil, err
	}
	defer func() {
		// The runs' changelogs would fill the broker's disk.
		_, _ = adm.Kadm().DeleteTopics(context.WithoutCancel(ctx), out, s.appID+"-changelog")
	}()
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return nil, err
	}
	if !o.Keep {
		defer os.RemoveAll(s.dir)
	}
	col, err := newGapCollector(o.Brokers, s.appID+"-reader", out, o.Keys)
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
	// The collector joins its group before the instances start: its first
	// poll must not wait for a rebalance while outputs arrive.
	select {
	case <-col.assigned:
	case <-time.After(30 * time.Second):
		return nil, errors.New("bench scale throughput: the output consumer got no assignment in 30s")
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	r := &scaleRun{
		o: scaleOptions{Brokers: o.Brokers, StateBytes: o.StateBytes, Sets: o.Sets, Leave: true, WorkerExe: o.WorkerExe,
			Verbose: o.Verbose, Partitions: o.Partitions},
		logf: logf, dir: s.dir, appID: s.appID, in: s.in, out: out, col: col,
	}
	defer r.killAll()
	run := &tputRun{Repeat: s.repeat, Standbys: s.standbys, Load1: load1(), Active: map[string][]int32{}}
	t0 := time.Now()
	for range o.Instances {
		if _, err := r.start(ctx, s.standbys); err != nil {
			return nil, err
		}
	}
	if err := r.waitOutputs(ctx, o.Records, o.RunLimit); err != nil {
		return nil, err
	}
	first, last := col.span()
	run.Took, run.Span = last.Sub(t0), last.Sub(first)
	run.PerSec = float64(o.Records) / run.Took.Seconds()
	if run.Span > 0 {
		run.SpanPerSec = float64(o.Records) / run.Span.Seconds()
	}
	var balanced time.Time
	for _, in := range r.live {
		st := in.status()
		for _, ps := range st.Partitions {
			run.Active[in.name] = append(run.Active[in.name], ps.Partition)
		}
		slices.Sort(run.Active[in.name])
		if g := st.Group; g != nil && g.Generation > run.Generation {
			run.Generation = g.Generation
			run.StandbyParts, run.WarmupParts = 0, 0
			for _, m := range g.Members {
				run.StandbyParts += len(m.Standby)
				run.WarmupParts += len(m.Warmup)
			}
		}
		var got time.Time
		for _, ps := range st.Partitions {
			if at := in.assignedAt(ps.Partition); got.IsZero() || at.Before(got) {
				got = at
			}
		}
		if got.After(balanced) {
			balanced = got
		}
	}
	if !balanced.IsZero() {
		run.BalancedAfter = balanced.Sub(t0)
	}
	time.Sleep(time.Second) // late duplicates would arrive now
	if err := col.verify(s.perKey); err != nil {
		run.ExactlyOnce = err.Error()
		return run, err
	}
	if n := col.count(); n != o.Records {
		run.ExactlyOnce = fmt.Sprintf("%d outputs for %d input rows", n, o.Records)
		return run, errors.New("bench scale throughput: exactly-once check: " + run.ExactlyOnce)
	}
	run.ExactlyOnce = "ok"
	var cpu time.Duration
	for _, in := range slices.Clone(r.live) {
		if _, err := r.stop(ctx, in); err != nil {
			return run, err
		}
		if ps := in.cmd.ProcessState; ps != nil {
			cpu += ps.UserTime() + ps.SystemTime()
		}
	}
	run.CPUPerM = time.Duration(float64(cpu) * 1e6 / float64(o.Records))
	return run, nil
}

// span returns the arrival times of the first and the last output.
func (c *gapCollector) span() (first, last time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, a := range c.mu.arrivals {
		if len(a) == 0 {
			continue
		}
		if first.IsZero() || a[0].Before(first) {
			first = a[0]
		}
		if a[len(a)-1].After(last) {
			last = a[len(a)-1]
		}
	}
	return first, last
}

// produceBacklog produces n rows, row i with key i mod keys.
func produceBacklog(ctx context.Context, brokers []string, topic string, n, keys, valueBytes int) error {
	p, err := kafka.NewProducer(brokers)
	if err != nil {
		return err
	}
	defer p.Close()
	const chunk = 10_000
	for i := 0; i < n; i += chunk {
		now := time.Now().UnixNano()
		recs := make([]kafka.Record, 0, chunk)
		for j := i; j < min(i+chunk, n); j++ {
			recs = append(recs, kafka.Record{Topic: topic, Partition: kafka.AnyPartition, Key: keyBytes(j % keys),
				Value: encodeRow(make([]byte, valueBytes), benchRow{ProducedNs: now, V: 1})})
		}
		if err := p.Produce(ctx, recs...); err != nil {
			return fmt.Errorf("bench scale throughput: preload: %w", err)
		}
	}
	return nil
}

func medianF(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// printTputTable prints one row per run and the medians.
func printTputTable(w io.Writer, rep *tputReport) {
	o := rep.Options
	fmt.Fprintf(w, "\nkstate bench scale throughput: %d rows over %d keys x %d-byte state, %d partitions, %d instances, broker %s, %d CPUs (load %.1f at start)\n\n",
		o.Records, o.Keys, o.StateBytes, o.Partitions, o.Instances, o.BrokerLabel, rep.Machine.NumCPU, rep.Machine.Load1)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "repeat\tstandbys\trecords/s (start → last)\tstart → last\trecords/s (first → last)\tbalanced after\tstandby parts\twarm-ups\tgeneration\tCPU s per 1M\texactly-once\tload\t")
	for _, r := range rep.Runs {
		fmt.Fprintf(tw, "%d\t%d\t%.0f\t%.1f s\t%.0f\t%.1f s\t%d\t%d\t%d\t%.1f\t%s\t%.1f\t\n", r.Repeat, r.Standbys, r.PerSec, r.Took.Seconds(),
			r.SpanPerSec, r.BalancedAfter.Seconds(), r.StandbyParts, r.WarmupParts, r.Generation, r.CPUPerM.Seconds(), orDash(r.ExactlyOnce), r.Load1)
	}
	_ = tw.Flush()
	if len(rep.Median) == 0 {
		return
	}
	fmt.Fprintln(w)
	base, ok := rep.Median[o.Standbys[0]]
	for _, sb := range o.Standbys {
		ratio := ""
		if ok && base > 0 {
			ratio = fmt.Sprintf(" (%.3f× standbys %d)", rep.Median[sb]/base, o.Standbys[0])
		}
		fmt.Fprintf(w, "standbys %d: median %.0f records/s start → last output%s, %.0f first → last output\n", sb, rep.Median[sb], ratio, rep.SpanMedian[sb])
	}
}
