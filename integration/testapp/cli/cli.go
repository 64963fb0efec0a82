// Package cli is integration/testapp's program, as a function: the command
// runs it, and the integration test binary runs it when it re-executes
// itself as a child process (see integration/eos_child_test.go), so the
// child is built with the test binary's flags (-race included).
package cli

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/examples/foreachbatch/sqlsink"
	"github.com/kstate/kstate/integration/testapp/eos"
	"github.com/kstate/kstate/internal/engine"
	"github.com/kstate/kstate/internal/testprocs"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/serde"

	_ "modernc.org/sqlite" // the "sqlite" driver of -sink-db
)

// KillPointEnv makes the program SIGKILL itself: "<point>@<n>" kills it
// the n-th time (from 1) the engine reaches the kill point, one of
// internal/engine's KillPoints ("after-produce", "before-local-commit",
// "during-restore", "during-standby", "after-task-produce",
// "after-local-commit").
// "<point>@<n>/stop" SIGSTOPs it instead, so that a test can let the group
// move on and then SIGCONT a zombie. A "/dlq"
// suffix (with -proc eos -dead-letter) counts only the occurrences in
// batches that dead-letter records. The log line of a kill point names
// the number of records its batch dead-letters (after-produce,
// before-local-commit; "-" when not known).
const KillPointEnv = "KSTATE_TEST_KILLPOINT"

// Main runs the program with args (without the program name) and returns
// its exit code: 0 after a graceful stop (SIGTERM, SIGINT), 1 when Run
// failed, 2 for bad usage.
func Main(args []string) int {
	// The signal handler first: a SIGTERM that arrives while the child
	// still starts must mean a graceful stop, not death by the signal.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	fmt.Fprintln(os.Stderr, SignalsReady)
	fs := flag.NewFlagSet("testapp", flag.ContinueOnError)
	var (
		brokers  = fs.String("brokers", "", "bootstrap brokers, comma separated (required)")
		app      = fs.String("app", "", "application id (required)")
		instance = fs.String("instance", "", "instance id (default: kstate's default)")
		dir      = fs.String("state", "", "state directory (required)")
		in       = fs.String("in", "", "input topic (required)")
		in2      = fs.String("in2", "", "second input topic, rows as JSON (-proc eos only; optional)")
		out      = fs.String("out", "", "output topic (required)")
		proc     = fs.String("proc", "counter", "processor: counter, sessions, quiet, deadline, expiring, eos")
		batch    = fs.Int("max-batch", 0, "MaxBatchRecords (0: default)")
		session  = fs.Duration("session-timeout", 0, "SessionTimeout (0: default)")
		txnTO    = fs.Duration("txn-timeout", 0, "Kafka.TransactionTimeout (0: default)")
		metrics  = fs.Duration("metrics", 0, "print a metrics line this often (0: never)")
		dlq      = fs.Bool("dead-letter", false, "eos: DeadLetter policies for poison values and failing keys")
		pad      = fs.Int("pad", 0, "eos: bytes of a pad state variable per key (0: none)")
		toEnd    = fs.Bool("to-end", false, "App.RunToEnd instead of Run: exit 0 once the input's end offsets at start are committed")
		sinkDB   = fs.String("sink-db", "", "SQLite file: the rows go to a foreachBatch sink (examples/foreachbatch/sqlsink, calls recorded) instead of -out")
		pipes    = fs.Int("pipelines", 0, "Options.Batching.Pipelines (0: default)")
		slow     = fs.Duration("slow", 0, "eos: sleep this long for about one row in seven (tasks of a batch finish at different times)")
		packed   = fs.Bool("packed", false, "eos: declare the list and the map with state.Packed")
		noCache  = fs.Bool("no-cache", false, "eos: no committed-state cache (every read goes past it: batches are read ahead)")
		wbBytes  = fs.Int64("write-behind", 0, "Options.State.WriteBehindBytes (0: default)")
		standbys = fs.Int("standbys", 0, "Options.Group.Standbys (0: none)")
		probing  = fs.Duration("probing-interval", 0, "Options.Group.ProbingInterval (0: default)")
		accLag   = fs.Int64("acceptable-lag", 0, "Options.Group.AcceptableLag (0: default)")
		leave    = fs.Bool("leave-group", false, "Options.Kafka.LeaveGroupOnShutdown")
	)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *brokers == "" || *app == "" || *dir == "" || *in == "" || (*out == "" && *sinkDB == "") {
		fs.Usage()
		return 2
	}
	logger := log.New(os.Stderr, "", log.LstdFlags|log.Lmicroseconds)
	// The eos processor counts the records it dead-letters, so that the
	// kill hook can tell the batches that hold dead letters.
	var bad *atomic.Int64
	if *proc == "eos" && *dlq {
		bad = new(atomic.Int64)
	}
	kill, err := killHook(os.Getenv(KillPointEnv), bad, logger)
	if err != nil {
		logger.Printf("testapp: %v", err)
		return 2
	}
	cfg := kstate.Topology[string, string, string]{
		Inputs:   kstate.Topics(serde.String(), *in),
		KeySerde: serde.String(),
		Output: kstate.Output[string, string]{
			Topic: *out,
			Serde: serde.String(),
		},
	}
	opts := kstate.Options{
		ApplicationID: *app,
		InstanceID:    *instance,
		Kafka: kstate.KafkaOptions{
			Brokers:            strings.Split(*brokers, ","),
			SessionTimeout:     *session,
			TransactionTimeout: *txnTO,
		},
		State: kstate.StateOptions{
			Dir: *dir,
		},
		Batching: kstate.BatchingOptions{
			MaxRecords: *batch,
			MaxWait:    100 * time.Millisecond,
		},
		Observability: kstate.ObservabilityOptions{
			Logger: slog.New(slog.NewTextHandler(os.Stderr, nil)),
		},
	}
	switch *proc {
	case "counter":
		cfg.NewProcessor = testprocs.NewCounter
	case "groupby":
		// Records keyed by user, values "<country>:<id>": counted per
		// country through the repartition topic.
		cfg.NewProcessor = testprocs.NewCounter
		cfg.GroupBy = []kstate.GroupBy[string, string]{{Topic: *in, Key: testprocs.CountryOf}}
	case "sessions":
		cfg.NewProcessor = testprocs.NewSessions
	case "quiet":
		cfg.NewProcessor, cfg.TimeMode = testprocs.NewQuiet(time.Second), processor.ProcessingTime
	case "deadline":
		cfg.NewProcessor, cfg.TimeMode = testprocs.NewDeadline(10*time.Millisecond), processor.EventTime
		cfg.EventTime = testprocs.EventTimeOf
	case "expiring":
		cfg.NewProcessor, cfg.TimeMode = testprocs.NewExpiring(10*time.Second), processor.ProcessingTime
	case "eos":
		cfg, opts = eos.Config(eos.Options{
			Brokers: opts.Kafka.Brokers, ApplicationID: *app, InstanceID: *instance, StateDir: *dir,
			Input: *in, Input2: *in2, Output: *out, MaxBatchRecords: *batch, SessionTimeout: *session, TransactionTimeout: *txnTO, Pad: *pad, Logger: slog.New(slog.NewTextHandler(os.Stderr, nil)),
			DeadLetter: *dlq, BadRows: bad, Slow: *slow, Packed: *packed, NoCache: *noCache, WriteBehindBytes: *wbBytes,
		})
	default:
		logger.Printf("testapp: unknown -proc %q", *proc)
		return 2
	}
	if *sinkDB != "" {
		sink, closeDB, err := openSink(*sinkDB)
		if err != nil {
			logger.Printf("testapp: %v", err)
			return 1
		}
		defer closeDB()
		cfg.Output.Topic, cfg.Output.Serde = "", nil
		cfg.Output.Sinks = []kstate.Sink[string, string]{sink}
	}
	opts.Batching.Pipelines = *pipes
	opts.Group.Standbys, opts.Group.ProbingInterval, opts.Group.AcceptableLag = *standbys, *probing, *accLag
	opts.Kafka.LeaveGroupOnShutdown = *leave
	a, err := kstate.New(cfg, opts)
	if err != nil {
		logger.Printf("testapp: %v", err)
		return 1
	}
	return run(ctx, a, kill, *metrics, *toEnd, os.Stdout, logger)
}

// SignalsReady is the line Main writes on stderr once SIGTERM and SIGINT
// stop it gracefully: before it, they kill the process.
const SignalsReady = "signal handler installed: SIGTERM stops gracefully"

func run(ctx context.Context, a *kstate.App[string, string, string], kill engine.KillHook, every time.Duration, toEnd bool, stdout io.Writer, logger *log.Logger) int {
	ctx, stop := context.WithCancel(ctx) // also ends the metrics lines when Run returns by itself
	defer stop()
	if kill != nil {
		// The internal-only option that installs the hook in Run's
		// coordinator (nothing global is set).
		ctx = engine.WithKillHook(ctx, kill)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	if every > 0 {
		wg.Go(func() {
			t := time.NewTicker(every)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					m := a.Metrics()
					standby, warmup, gen := groupOf(a.Status().Group)
					fmt.Fprintf(stdout, "metrics assigned=%v restoring=%v rows_in=%d rows_out=%d commits=%d aborts=%d restored=%d late=%d first_commit=%v standby=%v warmup=%v generation=%d\n",
						m.Assigned, m.Restoring, m.Total.RowsIn, m.Total.RowsOut, m.Total.Commits, m.Total.Aborts,
						m.Total.RestoreRecords, m.Total.LateRowsDropped, m.FirstCommit, standby, warmup, gen)
				}
			}
		})
	}
	runApp := a.Run
	if toEnd {
		runApp = a.RunToEnd
	}
	if err := runApp(ctx); err != nil {
		stop()
		wg.Wait()
		logger.Printf("testapp: %v", err)
		return 1
	}
	stop()
	wg.Wait()
	m := a.Metrics()
	fmt.Fprintf(stdout, "stopped rows_in=%d rows_out=%d commits=%d aborts=%d restored=%d late=%d first_commit=%v\n",
		m.Total.RowsIn, m.Total.RowsOut, m.Total.Commits, m.Total.Aborts, m.Total.RestoreRecords, m.Total.LateRowsDropped, m.FirstCommit)
	return 0
}

// groupOf returns this instance's standby and warm-up partitions (over its
// pipelines, sorted) and the generation of the group view g (-1: no view
// yet), for the metrics line.
func groupOf(g *kstate.GroupStatus) (standby, warmup []int32, generation int32) {
	if g == nil {
		return nil, nil, -1
	}
	for _, m := range g.Members {
		if m.Local {
			standby = append(standby, m.Standby...)
			warmup = append(warmup, m.Warmup...)
		}
	}
	slices.Sort(standby)
	slices.Sort(warmup)
	return standby, warmup, g.Generation
}

// killHook returns the engine.KillHook for spec "<point>@<n>[/stop][/dlq]"
// ("" gives nil): the n-th time the point is reached the process logs it
// and SIGKILLs itself — no deferred function, no flush, no graceful
// anything — or SIGSTOPs itself and continues when it gets SIGCONT.
//
// bad (nil unless the eos processor dead-letters) counts the records
// dead-lettered so far. Batches run one after the other and decode and
// process their records before their produce, so the records counted since
// the previous after-produce are those of the batch at this after-produce
// and at its before-local-commits.
func killHook(spec string, bad *atomic.Int64, logger *log.Logger) (engine.KillHook, error) {
	if spec == "" {
		return nil, nil
	}
	spec, onlyDLQ := strings.CutSuffix(spec, "/dlq")
	spec, stop := strings.CutSuffix(spec, "/stop")
	name, nth, ok := strings.Cut(spec, "@")
	n, err := strconv.ParseInt(nth, 10, 64)
	point := engine.KillPoint(name)
	switch {
	case !ok || err != nil || n < 1:
		return nil, fmt.Errorf("%s=%q: want <point>@<n>[/stop][/dlq], n >= 1", KillPointEnv, spec)
	case point != engine.AfterProduce && point != engine.BeforeLocalCommit && point != engine.DuringRestore &&
		point != engine.DuringStandby && point != engine.AfterPlan && point != engine.AfterSink &&
		point != engine.AfterTaskProduce && point != engine.AfterLocalCommit:
		return nil, fmt.Errorf("%s=%q: unknown kill point %q", KillPointEnv, spec, name)
	case onlyDLQ && (bad == nil || point == engine.DuringRestore || point == engine.DuringStandby):
		return nil, fmt.Errorf("%s=%q: /dlq needs -proc eos -dead-letter and a batch kill point", KillPointEnv, spec)
	}
	var seen atomic.Int64
	var batchBad atomic.Int64 // dead letters of the batch of the last after-produce
	batchBad.Store(-1)
	return func(p engine.KillPoint) {
		if bad != nil && p == engine.AfterProduce {
			batchBad.Store(bad.Swap(0))
		}
		if p != point {
			return
		}
		dl := int64(-1)
		if p != engine.DuringRestore && p != engine.DuringStandby {
			dl = batchBad.Load()
		}
		if onlyDLQ && dl <= 0 || seen.Add(1) != n {
			return
		}
		dls := "-"
		if dl >= 0 {
			dls = strconv.FormatInt(dl, 10)
		}
		if stop {
			logger.Printf("testapp: stop point %s #%d reached (batch dead-letters %s): SIGSTOP", p, n, dls)
			syscall.Kill(os.Getpid(), syscall.SIGSTOP)
			logger.Printf("testapp: stop point %s #%d: continued", p, n)
			return
		}
		logger.Printf("testapp: kill point %s #%d reached (batch dead-letters %s): SIGKILL", p, n, dls)
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // never continue past the kill point
	}, nil
}

// openSink opens the SQLite sink of -sink-db (table "counts", calls
// recorded for the crash test's check).
func openSink(path string) (*sqlsink.Sink, func(), error) {
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)")
	if err != nil {
		return nil, nil, err
	}
	s, err := sqlsink.Open(context.Background(), db, sqlsink.SQLite, "counts", true)
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	return s, func() { db.Close() }, nil
}
