package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/internal/kafka"
)

// scaleOptions are the flags of `kstate bench scale`.
type scaleOptions struct {
	Brokers      []string      `json:"brokers,omitempty"`
	Keys         int           `json:"keys"`
	StateBytes   int           `json:"state_bytes"`
	ValueBytes   int           `json:"value_bytes"`
	Partitions   int           `json:"partitions"`
	Rate         int           `json:"rate"`
	Standbys     []int         `json:"standbys"`
	Sets         []string      `json:"sets,omitempty"`
	Leave        bool          `json:"leave_group_on_shutdown"`
	MinWindow    time.Duration `json:"min_window_ns"`
	Settle       time.Duration `json:"settle_ns"`
	MaxWindow    time.Duration `json:"max_window_ns"`
	Seed         uint64        `json:"seed"`
	JSON         string        `json:"-"`
	Verbose      bool          `json:"-"`
	Keep         bool          `json:"-"`
	Timeout      time.Duration `json:"-"`
	WorkerExe    string        `json:"-"`
	BrokerLabel  string        `json:"broker"`
	preloadLimit time.Duration

	// Peer runs the events with another framework's instances
	// (bench_scale_peer.go): "" is kstate's workers, "kstreams" Kafka
	// Streams. FlowGap ends a peer's windows; PeerCommit is its commit
	// interval; PeerJar, PeerJava and PeerJavaOpts how it runs.
	Peer         string        `json:"peer,omitempty"`
	FlowGap      time.Duration `json:"flow_gap_ns,omitempty"`
	PeerCommit   time.Duration `json:"peer_commit_ns,omitempty"`
	PeerJar      string        `json:"-"`
	PeerJava     string        `json:"-"`
	PeerJavaOpts []string      `json:"peer_java_opts,omitempty"`
}

func defaultScaleOptions() scaleOptions {
	return scaleOptions{
		Keys: 2_000_000, StateBytes: 512, ValueBytes: 64, Partitions: 6, Rate: 5000, Standbys: []int{0, 1},
		Leave: true, MinWindow: 20 * time.Second, Settle: 10 * time.Second, MaxWindow: 5 * time.Minute, Seed: 1,
		Timeout: 2 * time.Hour, preloadLimit: time.Hour,
		FlowGap: 2 * time.Second, PeerCommit: 200 * time.Millisecond, PeerJava: "java", PeerJavaOpts: []string{"-Xmx1g"},
	}
}

func newBenchScaleCmd() *cobra.Command {
	o := defaultScaleOptions()
	cmd := &cobra.Command{
		Use:   "scale",
		Short: "Pause benchmark: the longest gap in committed output when an instance joins, is killed or stops",
		Long: `scale measures how long the partitions of an application with a large state
stop producing output when the group changes (issue #27), on a real Kafka
broker (started from the test harness's Apache Kafka jars unless --brokers
is given).

The application counts every key's rows in a state value of --state-bytes
bytes (its count and incompressible padding): --keys keys, one input row
each, are produced first and processed by one instance, so the changelog
and the local store hold about keys x state-bytes. Then a producer writes
--rate rows/s over the keys while application instances run as separate
processes (this binary in a hidden worker mode, each with its own state
directory and InstanceID), and, for every value of --standbys
(Options.Group.Standbys), four events:

  join   a second instance (empty state) joins the one holding everything;
  stop   the first instance is stopped gracefully (SIGTERM; with --leave,
         Kafka.LeaveGroupOnShutdown, so its partitions move at once);
  join   a third instance (empty state) joins the second;
  kill   the second instance is SIGKILLed (its partitions move after
         Kafka.SessionTimeout).

Each event's window lasts at least --min-window, until every partition is
owned, none restores, each has output again since the event, no warm-up
copy waits to take a partition over (Status.Group.Moves, once reported) and
the owners have not changed for --settle (at most --max-window). A read_committed consumer of the output records when
each partition's outputs arrive: per partition the longest gap between
consecutive arrivals (from the last output before the event), the time
from the event to its first output, and which partitions moved; the
instances' status lines give the restore records and times. At the end the
producer stops and every key's outputs must be its counts 1..n, each
exactly once.

Options of the instances are set by path, as kstate-count's -set:
--set Group.Standbys=1 (set by --standbys), --set Kafka.SessionTimeout=6s,
--set Group.ProbingInterval=10s.

With --peer kstreams the instances are Kafka Streams 4.1.1 processes of the
same workload (internal/tools/benchpeers/kstreams-scale, built with mvn into
~/.cache/kstate/kstreams-scale once; java and mvn on PATH, run from the
repository): a RocksDB store whose value is the count and the same padding,
changelogged, exactly_once_v2, one stream thread, commit.interval.ms
--peer-commit, num.standby.replicas from --standbys, and session.timeout.ms,
transaction.timeout.ms, acceptable.recovery.lag and
probing.rebalance.interval.ms from the --set of Kafka.SessionTimeout,
Kafka.TransactionTimeout, Group.AcceptableLag and Group.ProbingInterval (Kafka
Streams' minimum probing interval is 1m; other --set paths are refused);
with --leave it leaves the group on close. Its windows end by the output's
flow: at least --min-window, every partition has output since the event and
none paused longer than --flow-gap during the last --settle, the joined
instance has an active task and no warm-up replica waits (at most
--max-window).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// Interrupted, it stops its instances and the broker.
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, os.Interrupt)
			defer stop()
			ctx, cancel := context.WithTimeout(ctx, o.Timeout)
			defer cancel()
			return runScaleCmd(ctx, cmd.OutOrStdout(), cmd.ErrOrStderr(), o)
		},
	}
	fl := cmd.Flags()
	fl.StringSliceVar(&o.Brokers, "brokers", nil, "bootstrap addresses of a running cluster (default: start a real broker from the harness's Kafka jars and stop it after)")
	fl.IntVar(&o.Keys, "keys", o.Keys, "distinct keys, each preloaded with one row (the state: keys x --state-bytes)")
	fl.IntVar(&o.StateBytes, "state-bytes", o.StateBytes, "bytes of every key's state value (at least 8)")
	fl.IntVar(&o.ValueBytes, "value-bytes", o.ValueBytes, "input value size (at least 16)")
	fl.IntVar(&o.Partitions, "partitions", o.Partitions, "partitions of the input, output and changelog topics")
	fl.IntVar(&o.Rate, "rate", o.Rate, "rows/s of the steady input during the events")
	fl.IntSliceVar(&o.Standbys, "standbys", o.Standbys, "Options.Group.Standbys values, one round of the four events each")
	fl.StringArrayVar(&o.Sets, "set", nil, "Path=value: a kstate.Options field of every instance, e.g. Kafka.SessionTimeout=6s (repeatable)")
	fl.BoolVar(&o.Leave, "leave", o.Leave, "Kafka.LeaveGroupOnShutdown of every instance (a graceful stop moves its partitions at once)")
	fl.DurationVar(&o.MinWindow, "min-window", o.MinWindow, "shortest window of an event")
	fl.DurationVar(&o.Settle, "settle", o.Settle, "an event's window ends once the owners have not changed, nothing restoring, for this long")
	fl.DurationVar(&o.MaxWindow, "max-window", o.MaxWindow, "longest window of an event")
	fl.Uint64Var(&o.Seed, "seed", o.Seed, "seed of the steady input's keys")
	fl.StringVar(&o.JSON, "json", "", "also write the report as JSON to this file")
	fl.BoolVarP(&o.Verbose, "verbose", "v", false, "show the instances' logs (info) and the broker's start")
	fl.BoolVar(&o.Keep, "keep", false, "keep the work directory (state directories, instance logs)")
	fl.DurationVar(&o.Timeout, "timeout", o.Timeout, "give up after this long")
	fl.StringVar(&o.Peer, "peer", "", `run the instances as another framework's: "kstreams" (Kafka Streams 4.1.1, `+peerSource+`, built with mvn into the cache); windows then end by the output's flow (--flow-gap)`)
	fl.DurationVar(&o.FlowGap, "flow-gap", o.FlowGap, "--peer: a partition whose outputs pause longer than this has not resumed (its window goes on)")
	fl.DurationVar(&o.PeerCommit, "peer-commit", o.PeerCommit, "--peer kstreams: commit.interval.ms (default: kstate's Batching.MaxWait)")
	fl.StringVar(&o.PeerJar, "peer-jar", "", "--peer kstreams: a built kstreams-scale.jar (default: build "+peerSource+")")
	fl.StringVar(&o.PeerJava, "peer-java", o.PeerJava, "--peer kstreams: the java command")
	fl.StringSliceVar(&o.PeerJavaOpts, "peer-java-opts", o.PeerJavaOpts, "--peer kstreams: JVM options of every instance")
	fl.StringVar(&o.WorkerExe, "worker-exe", "", "the kstate binary the instances run (default: this one)")
	_ = fl.MarkHidden("worker-exe")
	cmd.AddCommand(newScaleWorkerCmd(), newScaleThroughputCmd()) // bench_scale_worker.go, bench_scale_throughput.go
	return cmd
}

func (o *scaleOptions) validate() error {
	switch {
	case o.Keys <= 0 || o.Partitions <= 0:
		return errors.New("bench scale: --keys and --partitions must be positive")
	case o.Keys < o.Partitions*10:
		return fmt.Errorf("bench scale: --keys %d: at least 10 per partition", o.Keys)
	case o.StateBytes < 8:
		return fmt.Errorf("bench scale: --state-bytes %d: at least 8", o.StateBytes)
	case o.ValueBytes < minValueBytes:
		return fmt.Errorf("bench scale: --value-bytes %d: at least %d", o.ValueBytes, minValueBytes)
	case o.Rate <= 0:
		return errors.New("bench scale: --rate must be positive (the gaps are measured on a steady input)")
	case len(o.Standbys) == 0:
		return errors.New("bench scale: no --standbys value")
	case o.MinWindow <= 0 || o.Settle <= 0 || o.MaxWindow < o.MinWindow:
		return errors.New("bench scale: --min-window and --settle must be positive, --max-window at least --min-window")
	}
	for _, s := range o.Standbys {
		if s < 0 {
			return fmt.Errorf("bench scale: --standbys %d: must not be negative", s)
		}
	}
	var probe kstate.Options
	for _, s := range o.Sets {
		if err := setOption(&probe, s); err != nil {
			return fmt.Errorf("bench scale: %w", err)
		}
	}
	return o.validatePeer() // bench_scale_peer.go
}

// scaleEvent is one event's measurements.
type scaleEvent struct {
	Round    int    `json:"round"`
	Standbys int    `json:"standbys"`
	Kind     string `json:"kind"` // join, stop, kill
	Subject  string `json:"subject"`
	// Load1 is the machine's 1-minute load average at the event.
	Load1 float64 `json:"load1"`
	// Window is the time from the event to the end of its window, Settled
	// whether it ended settled (not at --max-window).
	Window  time.Duration `json:"window_ns"`
	Settled bool          `json:"settled"`
	// StopTook is how long the stopped instance's graceful stop took
	// (stop only).
	StopTook time.Duration `json:"stop_took_ns,omitempty"`
	// Gaps per partition; MaxGapMoved and MaxGapAll are the longest over
	// the moved and over all partitions, Open when it had not ended.
	Gaps        []partGap     `json:"gaps"`
	Moved       int           `json:"moved_partitions"`
	MaxGapMoved time.Duration `json:"max_gap_moved_ns"`
	MaxGapAll   time.Duration `json:"max_gap_all_ns"`
	Open        bool          `json:"open"`
	// FirstMoved is the longest time from the event to a moved
	// partition's first output.
	FirstMoved time.Duration `json:"first_output_moved_ns"`
	// Goal is issue #27's bound on MaxGapMoved: 2 s for a join and a
	// graceful stop, the instances' Kafka.SessionTimeout + 1 s for a kill;
	// Met whether the event kept within it.
	Goal time.Duration `json:"goal_ns"`
	Met  bool          `json:"met"`
	// BeforeGap is the longest steady-state gap before the event.
	BeforeGap time.Duration `json:"before_gap_ns"`
	// RestoreRecords sums the changelog records the live instances
	// report restored during the window (Counters.RestoreRecords);
	// RestoreTime is the longest restore of a moved partition.
	RestoreRecords int64         `json:"restore_records"`
	RestoreTime    time.Duration `json:"restore_time_ns"`
	// Warmed are the partitions a live instance's status listed as moving
	// once caught up (Status.Group.Moves) during the window: the warm-ups
	// of the event. Standby sums the standby partitions of the members in
	// the group view at the end of the window, Rebalances counts the
	// generations that started in the window (as the instances saw them).
	Warmed     []int32 `json:"warmed"`
	Standby    int     `json:"standby_partitions"`
	Rebalances int     `json:"rebalances"`
	// Status is every live instance's last Status of the window (its
	// group view, standbys, once reported).
	Status map[string]json.RawMessage `json:"status,omitempty"`
}

type scaleReport struct {
	Options scaleOptions `json:"options"`
	Machine struct {
		NumCPU    int     `json:"num_cpu"`
		GoVersion string  `json:"go_version"`
		Started   string  `json:"started"`
		Load1     float64 `json:"load1_at_start"`
	} `json:"machine"`
	Preload struct {
		Records        int           `json:"records"`
		Took           time.Duration `json:"took_ns"` // first instance start → all outputs
		ChangelogBytes int64         `json:"changelog_bytes"`
	} `json:"preload"`
	// Peer is the framework the instances ran when not kstate (--peer).
	Peer struct {
		Name     string       `json:"name,omitempty"`
		Jar      string       `json:"jar,omitempty"`
		Settings peerSettings `json:"settings"`
	} `json:"peer"`
	Events      []*scaleEvent `json:"events"`
	SteadyRows  int           `json:"steady_rows"`
	TotalRows   int           `json:"total_rows"`
	ExactlyOnce string        `json:"exactly_once"` // "ok" or the failure
}

func runScaleCmd(ctx context.Context, stdout, stderr io.Writer, o scaleOptions) error {
	rep, err := runScale(ctx, stderr, o)
	if rep != nil {
		printScaleTable(stdout, rep)
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

// scaleRun is one run of the benchmark.
type scaleRun struct {
	o      scaleOptions
	logf   func(string, ...any)
	dir    string
	appID  string
	in     string
	out    string
	col    *gapCollector
	rep    *scaleReport
	live   []*instance // running instances, oldest first
	nextID int
	steady *steadyProducer // nil before the events
	// warmed collects the partitions seen in Status.Group.Moves during an
	// event's window (nil: not collecting).
	warmed map[int32]bool
	// peerStandby collects, during an event's window, the standby tasks
	// each peer instance reported (--peer).
	peerStandby map[string]map[int32]bool
}

func runScale(ctx context.Context, progress io.Writer, o scaleOptions) (*scaleReport, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	if o.WorkerExe == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("bench scale: the workers run this binary: %w", err)
		}
		o.WorkerExe = exe
	}
	logf := func(format string, args ...any) {
		fmt.Fprintf(progress, "bench scale %s: "+format+"\n", append([]any{time.Now().UTC().Format("15:04:05")}, args...)...)
	}
	rep := &scaleReport{}
	rep.Machine.NumCPU, rep.Machine.GoVersion = runtime.NumCPU(), runtime.Version()
	rep.Machine.Started, rep.Machine.Load1 = time.Now().UTC().Format(time.RFC3339), load1()

	brokers, label, stopBroker, err := benchBroker(ctx, "bench scale", o.Brokers, o.BrokerLabel, o.Verbose, logf)
	if err != nil {
		return nil, err
	}
	defer stopBroker()
	o.Brokers, o.BrokerLabel = brokers, label
	rep.Options = o
	rep.Options.Brokers = nil

	dir, err := os.MkdirTemp("", "kstate-bench-scale-")
	if err != nil {
		return nil, err
	}
	if o.Keep {
		logf("work directory (kept): %s", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	id := fmt.Sprintf("kscale-%x", time.Now().UnixNano()&0xffffffff)
	r := &scaleRun{o: o, logf: logf, dir: dir, appID: id, in: id + "-in", out: id + "-out", rep: rep}
	defer r.killAll()
	return rep, r.run(ctx)
}

func (r *scaleRun) run(ctx context.Context) error {
	o := r.o
	if o.Peer != "" {
		if err := r.preparePeer(ctx); err != nil {
			return err
		}
	}
	adm, err := kafka.NewAdmin(o.Brokers)
	if err != nil {
		return err
	}
	defer adm.Close()
	for _, t := range []string{r.in, r.out} {
		if err := adm.EnsureTopic(ctx, kafka.TopicSpec{Name: t, Partitions: o.Partitions, ReplicationFactor: -1}); err != nil {
			return err
		}
	}
	col, err := newGapCollector(o.Brokers, r.appID+"-reader", r.out, o.Keys)
	if err != nil {
		return err
	}
	r.col = col
	cctx, stopCol := context.WithCancel(ctx)
	go col.run(cctx)
	defer func() {
		stopCol()
		<-col.done
		col.close()
	}()

	// 1. Preload: every key once, processed by the first instance.
	perKey := make([]int32, o.Keys)
	t0 := time.Now()
	if err := preloadKeys(ctx, o.Brokers, r.in, o.Keys, o.ValueBytes); err != nil {
		return err
	}
	for k := range perKey {
		perKey[k] = 1
	}
	r.logf("preload: %d keys produced in %v", o.Keys, time.Since(t0).Round(time.Millisecond))
	first, err := r.start(ctx, o.Standbys[0])
	if err != nil {
		return err
	}
	t1 := time.Now()
	if err := r.waitOutputs(ctx, o.Keys, o.preloadLimit); err != nil {
		return fmt.Errorf("preload: %w", err)
	}
	r.rep.Preload.Records, r.rep.Preload.Took = o.Keys, time.Since(t1)
	r.rep.Preload.ChangelogBytes = changelogBytes(ctx, o.Brokers, r.changelogTopic(), o.Partitions)
	r.logf("preload: %d keys processed by %s in %v; changelog %.2f GB",
		o.Keys, first.name, r.rep.Preload.Took.Round(time.Millisecond), float64(r.rep.Preload.ChangelogBytes)/1e9)

	// 2. Steady input, and the events.
	steady := newSteadyProducer(o.Brokers, r.in, o.Rate, o.Keys, o.ValueBytes, o.Seed)
	r.steady = steady
	go steady.run(ctx)
	stopSteady := sync.OnceValues(steady.stop)
	defer stopSteady()
	if err := r.waitSettled(ctx, time.Now(), nil); err != nil {
		return err
	}
	for round, sb := range o.Standbys {
		if round > 0 || first.standbys != sb {
			// The holder of every partition restarts with the round's
			// options (on its state directory: a tail restore).
			h := r.live[0]
			r.logf("round %d: restarting %s with Group.Standbys=%d", round+1, h.name, sb)
			if _, err := r.stop(ctx, h); err != nil {
				return err
			}
			if _, err := r.restart(ctx, h, sb); err != nil {
				return err
			}
			if err := r.waitSettled(ctx, time.Now(), nil); err != nil {
				return err
			}
		}
		for _, kind := range []string{"join", "stop", "join", "kill"} {
			ev, err := r.event(ctx, round+1, sb, kind)
			if ev != nil {
				r.rep.Events = append(r.rep.Events, ev)
				r.logf("%s", ev.summary())
			}
			if err != nil {
				return err
			}
		}
	}

	// 3. Exactly-once: stop the input, wait for every output, check.
	sent, err := stopSteady()
	if err != nil {
		return err
	}
	steady.addCounts(perKey)
	r.rep.SteadyRows, r.rep.TotalRows = sent, o.Keys+sent
	r.logf("steady input stopped after %d rows; waiting for %d outputs", sent, o.Keys+sent)
	if err := r.waitOutputs(ctx, o.Keys+sent, 10*time.Minute); err != nil {
		r.rep.ExactlyOnce = err.Error()
		return err
	}
	time.Sleep(2 * time.Second) // late duplicates would arrive now
	if err := r.col.verify(perKey); err != nil {
		r.rep.ExactlyOnce = err.Error()
		return err
	}
	if n := r.col.count(); n != o.Keys+sent {
		r.rep.ExactlyOnce = fmt.Sprintf("%d outputs for %d input rows", n, o.Keys+sent)
		return errors.New("bench scale: exactly-once check: " + r.rep.ExactlyOnce)
	}
	r.rep.ExactlyOnce = "ok"
	r.logf("exactly-once: %d keys, %d outputs, every count 1..n exactly once", o.Keys, o.Keys+sent)
	for _, in := range slices.Clone(r.live) {
		if _, err := r.stop(ctx, in); err != nil {
			return err
		}
	}
	return nil
}

// waitOutputs waits for n outputs, failing early if no instance runs.
func (r *scaleRun) waitOutputs(ctx context.Context, n int, limit time.Duration) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- r.col.waitFor(wctx, n, limit) }()
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case err := <-errc:
			return err
		case <-t.C:
			if err := r.failed(); err != nil {
				return err
			}
		}
	}
}

// failed returns an error when an instance the benchmark did not stop
// exited, or the steady input stopped on an error.
func (r *scaleRun) failed() error {
	if r.steady != nil {
		select {
		case <-r.steady.done:
			if r.steady.err != nil {
				return r.steady.err
			}
		default:
		}
	}
	for _, in := range r.live {
		select {
		case <-in.exited:
			return fmt.Errorf("bench scale: instance %s exited: %v (log: %s)\n%s", in.name, in.waitErr, in.logPath, in.logTail(20))
		default:
		}
	}
	return nil
}

// event runs one event and measures it.
func (r *scaleRun) event(ctx context.Context, round, sb int, kind string) (*scaleEvent, error) {
	ev := &scaleEvent{Round: round, Standbys: sb, Kind: kind, Load1: load1()}
	before := r.owners()
	peerRebal0 := r.peerRebalances()
	restored0 := map[string]int64{}
	for _, in := range r.live {
		restored0[in.name] = in.status().Total.RestoreRecords
	}
	var at time.Time
	var joined *instance
	r.warmed, r.peerStandby = map[int32]bool{}, map[string]map[int32]bool{}
	defer func() { r.warmed, r.peerStandby = nil, nil }()
	switch kind {
	case "join":
		at = time.Now()
		in, err := r.start(ctx, sb)
		if err != nil {
			return nil, err
		}
		ev.Subject, joined = in.name, in
	case "stop":
		in := r.live[0]
		ev.Subject = in.name
		at = time.Now()
		took, err := r.stop(ctx, in)
		if err != nil {
			return nil, err
		}
		ev.StopTook = took
	case "kill":
		in := r.live[0]
		ev.Subject = in.name
		at = time.Now()
		r.kill(in)
	}
	err := r.waitSettled(ctx, at, joined)
	end := time.Now()
	ev.Window, ev.Settled = end.Sub(at), err == nil
	if err != nil && !errors.Is(err, errNotSettled) {
		return ev, err
	}
	after := r.owners()
	ev.Gaps = r.col.gaps(r.o.Partitions, at, end)
	ev.Status = map[string]json.RawMessage{}
	byName := map[string]*instance{}
	gens := map[int32]bool{}
	var viewGen int32
	for _, in := range r.live {
		byName[in.name] = in
		st := in.status()
		if g := st.Group; g != nil {
			for _, rb := range g.Rebalances {
				if rb.Start.After(at) {
					gens[rb.Generation] = true
				}
			}
			if g.Generation > viewGen {
				viewGen, ev.Standby = g.Generation, 0
				for _, m := range g.Members {
					ev.Standby += len(m.Standby)
				}
			}
		}
		ev.RestoreRecords += st.Total.RestoreRecords - restored0[in.name]
		ev.Status[in.name] = in.rawStatus()
		for _, ps := range st.Partitions {
			g := &ev.Gaps[ps.Partition]
			g.RestoreRecords, g.RestoreTime = ps.Counters.RestoreRecords, ps.Counters.RestoreTime
		}
	}
	for p := range ev.Gaps {
		g := &ev.Gaps[p]
		g.From, g.To = before[int32(p)], after[int32(p)]
		g.Moved = g.From != g.To
		if !g.Moved {
			g.RestoreRecords, g.RestoreTime = 0, 0 // restored before the event
		} else {
			// The first output of its new owner: after it got the
			// partition (outputs before are its old owner's).
			if to := byName[g.To]; to != nil {
				if got := to.assignedAt(int32(p)); got.After(at) {
					g.First = r.col.firstAfter(int32(p), got, end, at)
				}
			}
			ev.Moved++
			ev.FirstMoved = max(ev.FirstMoved, g.First)
			ev.RestoreTime = max(ev.RestoreTime, g.RestoreTime)
		}
		ev.BeforeGap = max(ev.BeforeGap, g.Before)
	}
	for p := range r.warmed {
		ev.Warmed = append(ev.Warmed, p)
		if int(p) < len(ev.Gaps) {
			ev.Gaps[p].Warmed = true
		}
	}
	slices.Sort(ev.Warmed)
	ev.Rebalances = len(gens)
	if r.o.Peer != "" {
		r.peerEventStats(ev, peerRebal0) // bench_scale_peer.go
	}
	ev.MaxGapMoved, _ = maxGap(ev.Gaps, true)
	ev.MaxGapAll, ev.Open = maxGap(ev.Gaps, false)
	ev.Goal = r.o.goal(kind)
	ev.Met = ev.Settled && !ev.Open && ev.MaxGapAll <= ev.Goal
	return ev, nil
}

// goal is issue #27's bound on an event's longest gap: 2 s for a join or a
// graceful stop, Kafka.SessionTimeout + 1 s for a kill.
func (o scaleOptions) goal(kind string) time.Duration {
	if kind != "kill" {
		return 2 * time.Second
	}
	var opts kstate.Options
	for _, s := range o.Sets {
		_ = setOption(&opts, s) // validated
	}
	st := opts.Kafka.SessionTimeout
	if st <= 0 {
		st = kafka.DefaultSessionTimeout
	}
	return st + time.Second
}

func (ev *scaleEvent) summary() string {
	s := fmt.Sprintf("round %d (standbys %d) %s %s: %d partitions moved, longest gap %v (moved) %v (all%s), first output of a moved partition after %v, restored %d records (longest %v), warmed up %v, %d standby partitions, %d rebalances, window %v%s",
		ev.Round, ev.Standbys, ev.Kind, ev.Subject, ev.Moved, ev.MaxGapMoved.Round(time.Millisecond), ev.MaxGapAll.Round(time.Millisecond),
		map[bool]string{true: ", still open"}[ev.Open], ev.FirstMoved.Round(time.Millisecond), ev.RestoreRecords, ev.RestoreTime.Round(time.Millisecond),
		ev.Warmed, ev.Standby, ev.Rebalances, ev.Window.Round(time.Second), map[bool]string{false: " (not settled)"}[ev.Settled])
	for _, g := range ev.Gaps {
		if g.Moved {
			s += fmt.Sprintf("\n  p%d %s→%s gap %v first %v restored %d in %v%s", g.Partition, g.From, g.To, g.MaxGap.Round(time.Millisecond),
				g.First.Round(time.Millisecond), g.RestoreRecords, g.RestoreTime.Round(time.Millisecond), map[bool]string{true: " (warmed up)"}[g.Warmed])
		}
	}
	return s
}

// errNotSettled: the window reached --max-window before the group settled.
var errNotSettled = errors.New("bench scale: the group did not settle")

// waitSettled waits until the window of an event at at can end: at least
// --min-window after it, every partition owned by one live instance, none
// restoring, each with an output since the event and since its owner got
// it, no warm-up waiting to move (and the joined instance, if any, owning
// a partition), the owners unchanged for --settle. It returns
// errNotSettled at --max-window.
func (r *scaleRun) waitSettled(ctx context.Context, at time.Time, joined *instance) error {
	if r.o.Peer != "" {
		return r.waitFlow(ctx, at, joined) // bench_scale_peer.go
	}
	var stable map[int32]string
	var since time.Time
	for {
		if err := r.failed(); err != nil {
			return err
		}
		now := time.Now()
		owners, ok := r.settledOwners()
		if ok && joined != nil && !slices.Contains(mapValues(owners), joined.name) {
			ok = false
		}
		// moving first: it also collects the event's warm-ups, listed
		// while the joined instance owns nothing yet.
		moving := r.moving()
		ok = ok && r.resumed(owners, at, now) && !moving
		switch {
		case !ok:
			stable = nil
		case stable == nil || !mapsEqual(stable, owners):
			stable, since = owners, now
		case now.Sub(since) >= r.o.Settle && now.Sub(at) >= r.o.MinWindow:
			return nil
		}
		if now.Sub(at) >= r.o.MaxWindow {
			return errNotSettled
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// resumed reports whether every partition output since the event at at
// and since its owner got it: a killed instance's open transaction, for
// one, holds back its partitions' outputs (read_committed) until the
// broker aborts it, after the owner has restored.
func (r *scaleRun) resumed(owners map[int32]string, at, now time.Time) bool {
	for p, name := range owners {
		i := slices.IndexFunc(r.live, func(in *instance) bool { return in.name == name })
		if i < 0 {
			return false
		}
		since := at
		if got := r.live[i].assignedAt(p); got.After(since) {
			since = got
		}
		if r.col.firstAfter(p, since, now, at) < 0 {
			return false
		}
	}
	return true
}

// moving reports whether a live instance's status lists partitions that
// move once their warm-up copies catch up (Status.Group.Moves, where a
// release reports it): the event's window goes on until they moved.
func (r *scaleRun) moving() bool {
	moving := false
	for _, in := range r.live {
		var st struct {
			Group *struct {
				Moves []json.RawMessage `json:"moves"`
			} `json:"group"`
		}
		if raw := in.rawStatus(); raw != nil && json.Unmarshal(raw, &st) == nil && st.Group != nil && len(st.Group.Moves) > 0 {
			moving = true
			if r.warmed != nil {
				for _, m := range st.Group.Moves {
					var mv struct {
						Partition int32 `json:"partition"`
					}
					if json.Unmarshal(m, &mv) == nil {
						r.warmed[mv.Partition] = true
					}
				}
			}
		}
	}
	return moving
}

// settledOwners returns the owner of every partition, and whether each is
// owned by exactly one live instance that is not restoring it.
func (r *scaleRun) settledOwners() (map[int32]string, bool) {
	owners := map[int32]string{}
	ok := true
	for _, in := range r.live {
		st := in.status()
		ok = ok && st.State == "Running"
		for _, ps := range st.Partitions {
			if _, dup := owners[ps.Partition]; dup || ps.Restoring {
				ok = false
			}
			owners[ps.Partition] = in.name
		}
	}
	return owners, ok && len(owners) == r.o.Partitions
}

// owners returns every partition's owner as the live instances last
// reported it.
func (r *scaleRun) owners() map[int32]string {
	o, _ := r.settledOwners()
	return o
}

func mapValues(m map[int32]string) []string {
	var vs []string
	for _, v := range m {
		vs = append(vs, v)
	}
	return vs
}

func mapsEqual(a, b map[int32]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// instance is one worker process.
type instance struct {
	name     string
	dir      string
	logPath  string
	standbys int
	cmd      *exec.Cmd
	exited   chan struct{}
	waitErr  error

	mu struct {
		sync.Mutex
		status kstate.Status
		raw    json.RawMessage
		// assignedAt is when a status line first listed each partition
		// it holds (since it last got it).
		assignedAt map[int32]time.Time
	}
}

// start starts a new instance with an empty state directory.
func (r *scaleRun) start(ctx context.Context, standbys int) (*instance, error) {
	r.nextID++
	name := fmt.Sprintf("i%d", r.nextID)
	in := &instance{name: name, dir: filepath.Join(r.dir, name), logPath: filepath.Join(r.dir, name+".log")}
	return r.restart(ctx, in, standbys)
}

// restart starts in's process (again, on its state directory).
func (r *scaleRun) restart(ctx context.Context, in *instance, standbys int) (*instance, error) {
	sets := append([]string{"Group.Standbys=" + strconv.Itoa(standbys)}, r.o.Sets...)
	if r.o.Leave {
		sets = append([]string{"Kafka.LeaveGroupOnShutdown=true"}, sets...)
	}
	args := []string{"bench", "scale", "worker", "--brokers", strings.Join(r.o.Brokers, ","), "--app-id", r.appID,
		"--in", r.in, "--out", r.out, "--state-dir", in.dir, "--instance", in.name, "--state-bytes", strconv.Itoa(r.o.StateBytes)}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	if r.o.Verbose {
		args = append(args, "--log", "info")
	}
	logf, err := os.OpenFile(in.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	exe := r.o.WorkerExe
	if r.o.Peer != "" {
		exe, args = r.peerCommand(in, standbys) // bench_scale_peer.go
	}
	cmd := exec.CommandContext(ctx, exe, args...)
	dieWithParent(cmd) // bench_scale_linux.go
	cmd.Stderr = logf
	if r.o.Verbose {
		cmd.Stderr = io.MultiWriter(logf, prefixWriter(os.Stderr, in.name+": "))
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		logf.Close()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("bench scale: start %s: %w", in.name, err)
	}
	in.cmd, in.exited, in.standbys = cmd, make(chan struct{}), standbys
	in.mu.Lock()
	in.mu.status, in.mu.assignedAt = kstate.Status{}, nil
	in.mu.Unlock()
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			var l struct {
				At     int64           `json:"at_ns"`
				Status json.RawMessage `json:"status"`
			}
			if json.Unmarshal(sc.Bytes(), &l) != nil || l.Status == nil {
				continue
			}
			var st kstate.Status
			if json.Unmarshal(l.Status, &st) != nil {
				continue
			}
			in.mu.Lock()
			in.mu.status, in.mu.raw = st, slices.Clone(l.Status)
			held := map[int32]time.Time{}
			for _, ps := range st.Partitions {
				at, ok := in.mu.assignedAt[ps.Partition]
				if !ok {
					at = time.Unix(0, l.At)
				}
				held[ps.Partition] = at
			}
			in.mu.assignedAt = held
			in.mu.Unlock()
		}
		in.waitErr = cmd.Wait()
		logf.Close()
		close(in.exited)
	}()
	r.live = append(r.live, in)
	r.logf("started %s%s (pid %d, Group.Standbys=%d)", in.name, map[bool]string{true: " (" + r.o.Peer + ")"}[r.o.Peer != ""], cmd.Process.Pid, standbys)
	return in, nil
}

// stop stops in gracefully (SIGTERM) and returns how long it took.
func (r *scaleRun) stop(ctx context.Context, in *instance) (time.Duration, error) {
	t0 := time.Now()
	r.forget(in)
	if err := in.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return 0, fmt.Errorf("bench scale: stop %s: %w", in.name, err)
	}
	select {
	case <-in.exited:
	case <-time.After(2 * time.Minute):
		_ = in.cmd.Process.Kill()
		<-in.exited
		return 0, fmt.Errorf("bench scale: %s did not stop within 2m of SIGTERM (log: %s)", in.name, in.logPath)
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	took := time.Since(t0)
	if in.waitErr != nil {
		return took, fmt.Errorf("bench scale: %s stopped with %v (log: %s)\n%s", in.name, in.waitErr, in.logPath, in.logTail(20))
	}
	r.logf("stopped %s in %v", in.name, took.Round(time.Millisecond))
	return took, nil
}

// kill SIGKILLs in.
func (r *scaleRun) kill(in *instance) {
	r.forget(in)
	_ = in.cmd.Process.Kill()
	<-in.exited
	r.logf("killed %s", in.name)
}

func (r *scaleRun) forget(in *instance) {
	r.live = slices.DeleteFunc(r.live, func(x *instance) bool { return x == in })
}

// killAll kills the instances left (on an error).
func (r *scaleRun) killAll() {
	for _, in := range slices.Clone(r.live) {
		r.kill(in)
	}
}

func (in *instance) status() kstate.Status {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.mu.status
}

// assignedAt returns when in's status first listed partition p since it
// last got it (zero if it does not hold p).
func (in *instance) assignedAt(p int32) time.Time {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.mu.assignedAt[p]
}

func (in *instance) rawStatus() json.RawMessage {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.mu.raw
}

// logTail returns the last n lines of in's log.
func (in *instance) logTail(n int) string {
	b, err := os.ReadFile(in.logPath)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// prefixWriter prefixes every write (a log line) with p.
func prefixWriter(w io.Writer, p string) io.Writer {
	return writerFunc(func(b []byte) (int, error) {
		_, err := fmt.Fprintf(w, "%s%s", p, b)
		return len(b), err
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

// preloadKeys produces one row for every key 0..keys-1.
func preloadKeys(ctx context.Context, brokers []string, topic string, keys, valueBytes int) error {
	p, err := kafka.NewProducer(brokers)
	if err != nil {
		return err
	}
	defer p.Close()
	const chunk = 10_000
	for i := 0; i < keys; i += chunk {
		now := time.Now().UnixNano()
		recs := make([]kafka.Record, 0, chunk)
		for k := i; k < min(i+chunk, keys); k++ {
			recs = append(recs, kafka.Record{Topic: topic, Partition: kafka.AnyPartition, Key: keyBytes(k),
				Value: encodeRow(make([]byte, valueBytes), benchRow{ProducedNs: now, V: 1})})
		}
		if err := p.Produce(ctx, recs...); err != nil {
			return fmt.Errorf("bench scale: preload: %w", err)
		}
	}
	return nil
}

// steadyProducer produces rate rows/s over the keys until stopped; stop
// lets the Produce in flight finish, so the rows written are known.
type steadyProducer struct {
	brokers          []string
	topic            string
	rate, keys, size int
	seed             uint64
	stopc            chan struct{}
	done             chan struct{}
	sent             int
	perKey           []int32
	err              error
}

func newSteadyProducer(brokers []string, topic string, rate, keys, size int, seed uint64) *steadyProducer {
	return &steadyProducer{brokers: brokers, topic: topic, rate: rate, keys: keys, size: size, seed: seed,
		stopc: make(chan struct{}), done: make(chan struct{}), perKey: make([]int32, keys)}
}

func (s *steadyProducer) run(ctx context.Context) {
	defer close(s.done)
	p, err := kafka.NewProducer(s.brokers)
	if err != nil {
		s.err = err
		return
	}
	defer p.Close()
	rng := rand.New(rand.NewPCG(s.seed, 0x7363616c65))
	start := time.Now()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-s.stopc:
			return
		case <-ctx.Done():
			s.err = ctx.Err()
			return
		case <-tick.C:
		}
		due := int(float64(s.rate) * time.Since(start).Seconds())
		if due <= s.sent {
			continue
		}
		now := time.Now().UnixNano()
		recs := make([]kafka.Record, 0, due-s.sent)
		keys := make([]int, 0, due-s.sent)
		for range due - s.sent {
			k := rng.IntN(s.keys)
			keys = append(keys, k)
			recs = append(recs, kafka.Record{Topic: s.topic, Partition: kafka.AnyPartition, Key: keyBytes(k),
				Value: encodeRow(make([]byte, s.size), benchRow{ProducedNs: now, V: 1})})
		}
		// Not ctx: a Produce cut short would leave unknown which rows
		// were written. The producer's own timeouts bound it.
		if err := p.Produce(context.WithoutCancel(ctx), recs...); err != nil {
			s.err = fmt.Errorf("bench scale: steady input: %w", err)
			return
		}
		for _, k := range keys {
			s.perKey[k]++
		}
		s.sent = due
	}
}

// stop stops the producer and returns the rows it wrote.
func (s *steadyProducer) stop() (int, error) {
	close(s.stopc)
	<-s.done
	return s.sent, s.err
}

// addCounts adds the rows written per key to perKey (after stop).
func (s *steadyProducer) addCounts(perKey []int32) {
	for k, n := range s.perKey {
		perKey[k] += n
	}
}

// changelogBytes sums the sizes of the changelog topic's partitions on the
// brokers' disks (0 if they cannot be read).
func changelogBytes(ctx context.Context, brokers []string, topic string, partitions int) int64 {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return 0
	}
	defer cl.Close()
	var ts kadm.TopicsSet
	for p := range partitions {
		ts.Add(topic, int32(p))
	}
	dirs, err := kadm.NewClient(cl).DescribeAllLogDirs(ctx, ts)
	if err != nil {
		return 0
	}
	var n int64
	dirs.Each(func(d kadm.DescribedLogDir) { n += d.Size() })
	return n
}

// load1 is the 1-minute load average (0 where /proc is missing).
func load1() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f, _ := strconv.ParseFloat(strings.Fields(string(b))[0], 64)
	return f
}

// printScaleTable prints one row per event.
func printScaleTable(w io.Writer, rep *scaleReport) {
	o := rep.Options
	app := ""
	if rep.Peer.Name != "" {
		ps := rep.Peer.Settings
		app = fmt.Sprintf(", peer %s (session %v, transaction %v, commit %v, probing %v, acceptable lag %d, leave %v; windows end by output flow, --flow-gap %v)",
			rep.Peer.Name, ps.SessionTimeout, ps.TxnTimeout, ps.Commit, ps.Probing, ps.AcceptableLag, ps.Leave, o.FlowGap)
	}
	fmt.Fprintf(w, "\nkstate bench scale%s: %d keys x %d-byte state (changelog %.2f GB), %d partitions, %d rows/s steady, broker %s, %d CPUs (load %.1f at start)\n",
		app, o.Keys, o.StateBytes, float64(rep.Preload.ChangelogBytes)/1e9, o.Partitions, o.Rate, o.BrokerLabel, rep.Machine.NumCPU, rep.Machine.Load1)
	fmt.Fprintf(w, "preload: %d rows processed in %v; exactly-once: %s\n\n", rep.Preload.Records, rep.Preload.Took.Round(time.Millisecond), orDash(rep.ExactlyOnce))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "standbys\tevent\tmoved\twarmed up\tlongest gap, moved\tlongest gap, all\tgoal (#27)\tfirst output, moved\tsteady gap before\trestored records\tlongest restore\tstandby parts\trebalances\twindow\tload\t")
	sec := func(d time.Duration) string { return fmt.Sprintf("%.1f s", d.Seconds()) }
	for _, ev := range rep.Events {
		open := ""
		if ev.Open {
			open = " (open)"
		}
		settled := ""
		if !ev.Settled {
			settled = " (not settled)"
		}
		met := map[bool]string{true: "met", false: "missed"}[ev.Met]
		fmt.Fprintf(tw, "%d\t%s %s\t%d/%d\t%d\t%s\t%s%s\t≤ %s: %s\t%s\t%s\t%d\t%s\t%d\t%d\t%s%s\t%.0f\t\n", ev.Standbys, ev.Kind, ev.Subject, ev.Moved, len(ev.Gaps), len(ev.Warmed),
			sec(ev.MaxGapMoved), sec(ev.MaxGapAll), open, sec(ev.Goal), met, sec(ev.FirstMoved), sec(ev.BeforeGap), ev.RestoreRecords, sec(ev.RestoreTime), ev.Standby, ev.Rebalances, sec(ev.Window), settled, ev.Load1)
	}
	_ = tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "–"
	}
	return s
}
