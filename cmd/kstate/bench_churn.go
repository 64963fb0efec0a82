package main

import (
	"context"
	"fmt"
	"iter"
	"time"

	"github.com/kstate/kstate/internal/kafka"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/state"
)

// churnProc is the session processor of issue #25: every call reads the
// key's session (a MapState iterated, a ListState read, the key's timers
// listed) and moves the key's processing-time timer to now + gap (the
// README's heartbeat pattern); when the timer fires the session closes and
// its map and list are cleared. Keys come back after their session closed
// (the input is uniform over --keys), so every call opens a new session
// among the deleted entries of the closed ones: the scans of an empty range
// that stepped over every tombstone up to the next live key, 100x slower.
// It emits the key's running count (a ValueState never cleared) like the
// other processors, so the exactly-once check holds.
type churnProc struct {
	gap     time.Duration
	history int
	h       processor.Handle
	total   state.ValueState[int64]
	session state.MapState[string, int64]
	recent  state.ListState[int64]
}

func (p *churnProc) Init(h processor.Handle) (err error) {
	p.h = h
	if p.total, err = processor.NewValueState(h, "total", state.Int64()); err != nil {
		return err
	}
	if p.session, err = processor.NewMapState(h, "session", state.String(), state.Int64()); err != nil {
		return err
	}
	p.recent, err = processor.NewListState(h, "recent", state.Int64())
	return err
}

func (p *churnProc) HandleInputRows(_ string, rows iter.Seq[benchRow], tv processor.TimerValues, out processor.Emitter[benchOut]) error {
	n, _, err := p.total.Get()
	if err != nil {
		return err
	}
	entries, err := p.session.Iterator()
	if err != nil {
		return err
	}
	var events, sum int64
	for k, v := range entries {
		switch k {
		case "events":
			events = v
		case "sum":
			sum = v
		}
	}
	old, err := p.recent.Get()
	if err != nil {
		return err
	}
	kept := 0
	for range old {
		kept++
	}
	var add []int64
	for r := range rows {
		n++
		events++
		sum += r.V
		add = append(add, r.V)
		if err := out.Emit(benchOut{Count: n, ProducedNs: r.ProducedNs}); err != nil {
			return err
		}
	}
	if kept+len(add) <= p.history {
		if err := p.recent.AppendList(add); err != nil {
			return err
		}
	}
	if err := p.session.UpdateValue("events", events); err != nil {
		return err
	}
	if err := p.session.UpdateValue("sum", sum); err != nil {
		return err
	}
	if err := p.total.Update(n); err != nil {
		return err
	}
	timers, err := p.h.ListTimers()
	if err != nil {
		return err
	}
	for _, t := range timers {
		if err := p.h.DeleteTimer(t); err != nil {
			return err
		}
	}
	return p.h.RegisterTimer(tv.ProcessingTimeMs() + p.gap.Milliseconds())
}

// HandleExpiredTimer closes the session: its map and list are cleared (the
// running count stays).
func (p *churnProc) HandleExpiredTimer(string, processor.TimerValues, processor.ExpiredTimerInfo, processor.Emitter[benchOut]) error {
	if err := p.recent.Clear(); err != nil {
		return err
	}
	return p.session.Clear()
}

func (p *churnProc) Close() error { return nil }

// newKeyBytes names phase 2's new keys of the churn workload: as long as
// the churned keys (keyBytes) and sorting before them, so that a new key's
// scans (its map, its list, its timers) start before the churned keys'
// deleted entries, as a new user's session does among closed ones.
func newKeyBytes(i int) []byte { return fmt.Appendf(nil, "f%06d", i) }

// churnRestart is the second half of the churn workload (issue #25): after
// the churn of phase 1 it waits until every session has closed (its timer
// fired, its map and list cleared), stops the application, produces
// o.NewKeys rows of keys never seen (one row each: every row is a new
// session) and restarts the application on the same state directory (the
// deleted entries stay in the store), then times the new keys from the
// restart to their last output. It returns the number of outputs expected
// so far.
func (b *benchRun) churnRestart(ctx context.Context, a *app, cfg benchConfig, col *collector, r *runResult, total int) (int, error) {
	o := b.o
	// 1. Every session closed: no timer left (fired timers count as
	// deleted) and the state clears committed (Counters are updated after
	// the local commit).
	t0 := time.Now()
	deadline := t0.Add(o.SessionGap + 2*time.Minute)
	for {
		m := a.Metrics().Total
		if m.TimersFired > 0 && m.TimersRegistered == m.TimersDeleted {
			r.SessionsFired = m.TimersFired
			break
		}
		if err := a.failed(); err != nil {
			return total, fmt.Errorf("churn: waiting for the sessions to close: %w", err)
		}
		if time.Now().After(deadline) {
			return total, fmt.Errorf("churn: sessions not closed after %v: %d timers registered, %d deleted, %d fired",
				time.Since(t0).Round(time.Millisecond), m.TimersRegistered, m.TimersDeleted, m.TimersFired)
		}
		select {
		case <-ctx.Done():
			return total, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	r.SessionsClosed = time.Since(t0)
	if err := a.stop(); err != nil {
		return total, fmt.Errorf("churn: stop: %w", err)
	}

	// 2. The new keys, produced while the application is stopped.
	recs := make([]kafka.Record, 0, o.NewKeys)
	now := time.Now().UnixNano()
	for i := range o.NewKeys {
		recs = append(recs, kafka.Record{Topic: cfg.top.Inputs[0].Topic, Partition: kafka.AnyPartition, Key: newKeyBytes(i),
			Value: encodeRow(make([]byte, o.ValueBytes), benchRow{ProducedNs: now, V: int64(i % 1000)})})
	}
	if err := produce(ctx, o.Brokers, recs); err != nil {
		return total, err
	}
	total += o.NewKeys

	// 3. Restart on the same state directory; time the new keys.
	col.restartSpan()
	a2, err := startApp(ctx, cfg)
	if err != nil {
		return total, err
	}
	defer func() { _ = a2.stop() }()
	if err := waitOutputs(ctx, col, a2, total); err != nil {
		return total, fmt.Errorf("churn: new keys after the restart: %w", err)
	}
	r.NewKeys = o.NewKeys
	n, first, span := col.throughputSpan()
	r.NewKeysFirst = first.Sub(a2.start)
	r.NewKeysRate = float64(o.NewKeys) / (r.NewKeysFirst + span).Seconds()
	if n > 0 && span > 0 {
		r.NewKeysSpanRate = float64(n) / span.Seconds()
	}
	if err := a2.stop(); err != nil {
		return total, fmt.Errorf("churn: stop after the new keys: %w", err)
	}
	m := a2.Metrics()
	r.NewKeysFirstCommit = m.FirstCommit
	if m.Total.Commits > 0 {
		r.NewKeysCommitMean = mean(m.Total.CommitLatency, m.Total.Commits)
	}
	if err := col.checkNew(o.NewKeys); err != nil {
		return total, err
	}
	return total, nil
}
