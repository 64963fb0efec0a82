package kstate

// Several pipelines per instance (Options.Batching.Pipelines), like Kafka Streams'
// stream threads: each pipeline is an engine.Coordinator of its own — its
// own group member (static instance id), transactional producer, batch
// loop and share of the input partitions. They run side by side in one
// Run and share what is per process: the state directory (each partition's
// shard is flock'ed, so two pipelines never open one at once; see the
// engine's handover wait), the shared RocksDB memory, the initial-state
// cache, the HTTP handler and the metrics. The App reads them through
// runtime.PipelineSet, which merges their views as one coordinator's, and
// they close their sessions together at runtime.CloseBarrier.

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kstate/kstate/internal/engine"
	kruntime "github.com/kstate/kstate/internal/runtime"
	"github.com/kstate/kstate/internal/startup"
)

// pipelineInstanceID is the static instance id of pipeline i: InstanceID
// for pipeline 0 (an App with one pipeline is exactly what it was before
// pipelines existed: same group member, same transactional id), and
// "<InstanceID>-p<i>" for the others. The "p" keeps the ids apart from
// ordinal instance names such as StatefulSet pods' "app-1".
func pipelineInstanceID(instance string, i int) string {
	if i == 0 {
		return instance
	}
	return fmt.Sprintf("%s-p%d", instance, i)
}

// maxAutoPipelines caps the automatic pipeline count (Options.Batching.Pipelines 0).
// Past the core count pipelines only compete for the CPU, and each one is
// a Kafka client of its own (a producer, a consumer and its fetch buffers,
// a transaction per batch on the broker, a group member), so many cores do
// not mean many pipelines (docs/benchmarks/history.md, "Pipelines by default"). A
// variable so that the tests of the automatic count can change it.
var maxAutoPipelines = 4

// autoPipelines is the automatic pipeline count before the partition
// bound: one per core the Go scheduler runs on (GOMAXPROCS, which follows
// a container's CPU limit), at most maxAutoPipelines.
func autoPipelines() int { return max(1, min(runtime.GOMAXPROCS(0), maxAutoPipelines)) }

// pipelineCount is the number of pipelines to run: Options.Batching.Pipelines, or
// autoPipelines when it is 0, capped at the input topic's partition count:
// a pipeline beyond it would never be assigned a partition (and a bounded
// run with timers or initial state waits for each pipeline's first
// assignment).
//
// If the count cannot be read: with an explicit Options.Batching.Pipelines, that is
// used (the coordinators' start-up retries then report the problem). The
// automatic count instead retries while Kafka is unreachable, as the
// coordinators' start-up does, until the start-up deadline (ctx's, or
// StartupTimeout from now), and then fails as the start-up would, with a
// *StartupTimeoutError; any other error (a missing topic) runs one
// pipeline, which reports it.
func (a *App[K, I, O]) pipelineCount(ctx context.Context, adm engine.Admin) (int, error) {
	auto := a.cfg.Pipelines == 0
	n := a.cfg.Pipelines
	if auto {
		n = autoPipelines()
		if len(a.cfg.Sinks) > 0 {
			// One pipeline calls WriteBatch one batch at a time; several
			// call it concurrently, which a sink written before pipelines
			// existed may not expect (SQLite: SQLITE_BUSY). Several
			// pipelines with sinks are asked for explicitly.
			n = 1
		}
	}
	if n <= 1 {
		return 1, nil
	}
	topic := a.cfg.engineTopics()[0]
	start := time.Now()
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = start.Add(a.cfg.StartupTimeout)
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	stopWarn := a.warnStarting(start, "the input's partition count")
	defer stopWarn()
	var parts int
	var err error // the last call's
	out, _ := startup.Retry{
		Unreachable: func(err error) bool { return auto && errors.Is(err, engine.ErrUnavailable) },
		Expired: func(delay time.Duration) bool {
			return errors.Is(ctx.Err(), context.DeadlineExceeded) || time.Now().Add(delay).After(deadline)
		},
		Sleep: startup.Sleep,
		Warn: func(delay time.Duration, err error) {
			a.cfg.Logger.Warn(startup.WarnMessage, "app", a.cfg.ApplicationID, "retry_in", delay,
				"waited", time.Since(start).Round(time.Millisecond), "startup_timeout", a.cfg.StartupTimeout, "err", err)
		},
	}.Do(ctx, func(ctx context.Context) error {
		parts, err = adm.Partitions(ctx, topic)
		return err
	})
	switch {
	case out == startup.Expired, out == startup.Interrupted && errors.Is(ctx.Err(), context.DeadlineExceeded):
		return 0, a.startupTimeout(fmt.Errorf("kstate: input topic %q: %w", topic, err))
	case out == startup.Interrupted:
		return 1, nil // the coordinator ends the run as it does when cancelled at start
	}
	switch {
	case err != nil && auto:
		return 1, nil
	case err == nil && parts > 0 && parts < n:
		if !auto {
			a.cfg.Logger.Info("fewer input partitions than Pipelines: running one pipeline per partition",
				"app", a.cfg.ApplicationID, "pipelines", n, "partitions", parts)
		}
		n = parts
	}
	return n, nil
}

// warnStarting logs a Warn every few seconds (at most a quarter of
// StartupTimeout) until stop is called, while a start-up call waits for
// Kafka: a call to a broker that accepts connections and never answers
// returns only at the start-up deadline.
func (a *App[K, I, O]) warnStarting(start time.Time, what string) (stop func()) {
	return engine.WarnWhileStarting(a.cfg.Logger, a.cfg.StartupTimeout, what, func() time.Duration { return time.Since(start) },
		"app", a.cfg.ApplicationID, "brokers", a.cfg.Brokers)
}

// startupTimeout is err, of a start-up that found Kafka unreachable until
// its deadline, as a *StartupTimeoutError (Waited is filled in by
// publicStartupError).
func (a *App[K, I, O]) startupTimeout(err error) error {
	return &StartupTimeoutError{Brokers: a.cfg.Brokers, Timeout: a.cfg.StartupTimeout, Err: err}
}

// publicStartupError turns the engine's *StartupTimeoutError in err into
// this package's, naming the brokers, and sets Waited (since start).
func (a *App[K, I, O]) publicStartupError(err error, start time.Time) error {
	var ours *StartupTimeoutError
	if errors.As(err, &ours) {
		ours.Waited = time.Since(start)
		return err
	}
	var st *engine.StartupTimeoutError
	if !errors.As(err, &st) {
		return err
	}
	return &StartupTimeoutError{Brokers: a.cfg.Brokers, Timeout: a.cfg.StartupTimeout, Waited: time.Since(start), Err: st.Err}
}

// siblingsCloseJoinGrace is how long a pipeline's session waits at close
// for a group join in flight when the App runs several pipelines
// (kafka.SessionConfig.CloseJoinGrace). They close together, and a sibling
// closes its session without joining (a static member does not leave): a
// join that waits for it would wait for its session timeout. Abandoning
// the join costs nothing a static member's stop does not cost anyway.
const siblingsCloseJoinGrace = 500 * time.Millisecond

// runPipelines builds one coordinator per pipeline from base, publishes
// them (a.mu.coord) and runs them until all returned. The first error
// stops the others (their ctx is cancelled: they shut down gracefully,
// without leaving the group) and is returned.
func (a *App[K, I, O]) runPipelines(ctx context.Context, base engine.CoordinatorConfig, ports kruntime.Ports) (err error) {
	// One start-up deadline for the pipeline count and every pipeline's
	// start-up (topic checks, group join, producer init): their retries
	// must not add up past StartupTimeout.
	start := time.Now()
	base.StartupDeadline = start.Add(a.cfg.StartupTimeout)
	defer func() { err = a.publicStartupError(err, start) }()
	cctx, cancelCount := context.WithDeadline(ctx, base.StartupDeadline)
	n := 1
	if !ports.Test {
		n, err = a.pipelineCount(cctx, base.Admin)
	}
	cancelCount()
	if err != nil {
		return err
	}
	if a.cfg.Pipelines != 1 {
		a.cfg.Logger.Info("running pipelines", "app", a.cfg.ApplicationID, "pipelines", n, "config", a.cfg.Pipelines,
			"gomaxprocs", runtime.GOMAXPROCS(0))
	}
	set := &pipelineSet{Coords: make([]*engine.Coordinator, n)}
	var failed atomic.Bool // a pipeline failed: the others stay in the group
	// The pipelines create their sessions one at a time: franz-go's
	// NewClient rewrites the codec list of a ProducerBatchCompression
	// option in place (kgo.DefaultCompressor), and Options.Kafka.ClientOptions
	// hands the same option to every pipeline's client (a data race under
	// -race with two pipelines). Creating a session only builds the client.
	var sessionMu sync.Mutex
	closing := kruntime.NewCloseBarrier(n, a.cfg.ShutdownTimeout)
	for i := range n {
		cc := base
		cc.InstanceID = pipelineInstanceID(a.cfg.InstanceID, i)
		if n > 1 {
			cc.BeforeSessionClose = func(graceful bool) { closing.Arrive(i, graceful) }
		}
		var grace time.Duration
		if n > 1 {
			// The pipelines close their sessions together (CloseBarrier):
			// a join in flight then waits for a sibling that has closed.
			grace = siblingsCloseJoinGrace
		}
		instance := cc.InstanceID
		cc.NewSession = func() (engine.Session, error) {
			sessionMu.Lock()
			defer sessionMu.Unlock()
			return ports.NewSession(instance, failed.Load, grace)
		}
		if n > 1 {
			cc.Logger = base.Logger.With("pipeline", i)
		}
		c, err := engine.NewCoordinator(cc)
		if err != nil {
			return err
		}
		set.Coords[i] = c
	}
	a.mu.Lock()
	a.mu.coord = set
	a.mu.Unlock()
	if ports.Started != nil {
		ports.Started(set.Coords)
	}
	if !ports.Test {
		defer a.refreshLag(ctx, base.Admin, set)() // lag.go
	}
	if n == 1 {
		err := set.Coords[0].Run(ctx)
		set.DropCreated(ctx, err)
		return err
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
	)
	for i, c := range set.Coords {
		wg.Go(func() {
			err := c.Run(rctx)
			closing.Arrive(i, false) // a Run that ended before its shutdown (a failed start)
			if err == nil {
				return
			}
			failed.Store(true)
			mu.Lock()
			if first == nil {
				first = err
				a.cfg.Logger.Error("pipeline failed: stopping the other pipelines", "app", a.cfg.ApplicationID, "pipeline", i, "err", err)
			}
			mu.Unlock()
			cancel()
		})
	}
	wg.Wait()
	set.DropCreated(ctx, first)
	return first
}

// pipelineSet is the coordinators of one Run, seen as one
// (runtime.PipelineSet).
type pipelineSet = kruntime.PipelineSet
