package kstate

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sort"
	"sync"
	"time"

	"github.com/kstate/kstate/internal/engine"
)

// App is a configured application. Create it with New and start it with Run.
type App[K, I, O any] struct {
	cfg Config[K, I, O]

	mu struct {
		sync.Mutex
		ran bool
		run *runner[K, I, O] // the Run in progress, nil when none
		// retired sums the counters of tasks closed so far (revoked
		// partitions, finished runs) and the app-level counters.
		retired engine.Counters
		last    Metrics // the final snapshot of the last Run
	}
}

// New validates cfg (see Config for defaults) and returns an App.
func New[K, I, O any](cfg Config[K, I, O]) (*App[K, I, O], error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &App[K, I, O]{cfg: c}, nil
}

// InstanceID is the instance id in use (after defaults).
func (a *App[K, I, O]) InstanceID() string { return a.cfg.InstanceID }

// ChangelogTopic is the application's changelog topic.
func (a *App[K, I, O]) ChangelogTopic() string { return a.cfg.ApplicationID + "-changelog" }

// Counters are cumulative counters; see the field comments. Batch counters
// count committed batches only.
type Counters = engine.Counters

// Metrics is a snapshot of an App's counters.
type Metrics struct {
	// Total sums every task of the App (past and present) and the app-level
	// counters (Commits, CommitLatency, Aborts).
	Total Counters
	// Partitions holds the counters of the currently assigned tasks.
	Partitions map[int32]Counters
	// Assigned lists the assigned partitions; Restoring the subset still
	// restoring (paused).
	Assigned, Restoring []int32
	// FirstCommit is the time from the start of Run to its first committed
	// transaction (0 until then): the restart-to-first-batch time.
	FirstCommit time.Duration
}

// Metrics returns a snapshot of the counters. Safe to call at any time.
func (a *App[K, I, O]) Metrics() Metrics {
	a.mu.Lock()
	r := a.mu.run
	m := Metrics{Total: a.mu.retired, Partitions: map[int32]Counters{}}
	if r == nil {
		last := a.mu.last
		a.mu.Unlock()
		last.Total = m.Total
		return last
	}
	a.mu.Unlock()
	r.snapshot(&m)
	sort.Slice(m.Assigned, func(i, j int) bool { return m.Assigned[i] < m.Assigned[j] })
	sort.Slice(m.Restoring, func(i, j int) bool { return m.Restoring[i] < m.Restoring[j] })
	return m
}

// retire adds counters of closed tasks and app-level counters.
func (a *App[K, I, O]) retire(c Counters) {
	a.mu.Lock()
	a.mu.retired.Add(c)
	a.mu.Unlock()
}

// Run joins the consumer group and processes until ctx is cancelled or an
// error stops it. It blocks. On cancellation it shuts down gracefully: the
// batch in flight commits or aborts (within ShutdownTimeout), processors
// and shards are closed, and the group is left (a static member stays until
// its session times out). It returns nil after a graceful shutdown, and
// otherwise the error that stopped it: a processor error or panic
// (UserError), an undecodable record (DecodeError), a mode change
// (ModeError), fencing by a newer instance (wrapping kafka.ErrFenced), or a
// Kafka or storage error. Run may be called once per App.
func (a *App[K, I, O]) Run(ctx context.Context) error {
	a.mu.Lock()
	if a.mu.ran {
		a.mu.Unlock()
		return ErrRunning
	}
	a.mu.ran = true
	r := newRunner(a)
	a.mu.run = r
	a.mu.Unlock()

	err := r.run(ctx)

	var m Metrics
	r.snapshot(&m)
	a.mu.Lock()
	a.mu.run = nil
	a.mu.last = Metrics{FirstCommit: m.FirstCommit}
	a.mu.Unlock()
	return err
}

func newRunID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
