package kstate

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"sort"
	"time"
)

// Status is a point-in-time view of an App for operators (App.Status, the
// /status endpoint of App.Handler). Durations are in nanoseconds in JSON.
type Status struct {
	ApplicationID string `json:"application_id"`
	InstanceID    string `json:"instance_id"` // the owner of Partitions
	State         string `json:"state"`
	// Ready and ReadyReason are what Ready returns (GET /readyz): not
	// ready also while Running when no Kafka broker has answered for 10s
	// ("Kafka unreachable: ...").
	Ready       bool   `json:"ready"`
	ReadyReason string `json:"ready_reason"`
	// Partitions are the partitions assigned to this instance, sorted.
	Partitions []PartitionStatus `json:"partitions"`
	// BatchInFlight is the age of the micro-batch in flight; 0 between
	// batches. Live reports stuck once it passes MaxBatchDuration/2.
	BatchInFlight time.Duration `json:"batch_in_flight_ns"`
	// BatchInFlightRecords is the number of input records of the batch in
	// flight (summed over the pipelines' batches); 0 between batches.
	// Its partitions have InBatch set.
	BatchInFlightRecords int `json:"batch_in_flight_records"`
	// MaxBatchDuration is Options.Batching.MaxDuration after defaults.
	MaxBatchDuration time.Duration `json:"max_batch_duration_ns"`
	// SinceCommit is the time since the last committed transaction of this
	// Run; 0 before the first.
	SinceCommit time.Duration `json:"since_last_commit_ns"`
	// FirstCommit is Metrics.FirstCommit.
	FirstCommit time.Duration `json:"first_commit_ns"`
	// Total is Metrics.Total (errors: DecodeErrors, ProcessingErrors,
	// DeadLettered, Aborts, ...).
	Total Counters `json:"total"`
	// Error is the error Run returned (State Failed); empty otherwise.
	Error string `json:"error,omitempty"`
	// LastError is the most recent error the App met and survived or
	// failed on (an aborted transaction's cause, a dead-lettered record's
	// error, Run's error), with its time; empty when none.
	LastError   string    `json:"last_error,omitempty"`
	LastErrorAt time.Time `json:"last_error_at,omitzero"`
	// LastCommitAt is the wall-clock time of the last committed
	// transaction; zero before the first.
	LastCommitAt time.Time `json:"last_commit_at,omitzero"`
	// Lag sums the partitions' Lag (-1 when no partition's lag is known).
	Lag int64 `json:"lag"`
	// Group is the whole consumer group as this instance's last
	// assignment described it (the group's leader sends every member the
	// view): nil before the first assignment.
	Group *GroupStatus `json:"group,omitempty"`
}

// GroupStatus is the consumer group seen from one instance (Status.Group):
// who owns and who stands by for each partition, as the group's leader
// assigned them at the last rebalance, and this instance's last
// rebalances. A group whose leader runs an older kstate release sends no
// view: Members is then empty (Generation 0) and only Rebalances is known.
type GroupStatus struct {
	Generation int32 `json:"generation"`
	// Leader is the instance id of the member that balanced the group, and
	// BalancedAt when.
	Leader     string    `json:"leader"`
	BalancedAt time.Time `json:"balanced_at,omitzero"`
	// Partitions is the number of partitions the group assigns (of each
	// input topic: partition p of every input goes to one member).
	Partitions int32               `json:"partitions"`
	Members    []GroupMemberStatus `json:"members"`
	// Unowned are the partitions no member holds active: nothing processes
	// them. A partition changing owner is here for a moment: the rebalance
	// is cooperative, so it is only revoked from its old owner in one
	// generation and given to its new owner at the next, once every member
	// has rejoined (up to a heartbeat interval). A member stopped without
	// leaving the group keeps its partitions until its session times out.
	Unowned []int32 `json:"unowned"`
	// Moves are the partitions that move when caught up: a member warms up
	// a copy of the partition's state, and a later (probing) rebalance
	// makes it the owner once its copy is within
	// Options.Group.AcceptableLag of the changelog.
	Moves []GroupMove `json:"moves"`
	// Rebalances are this instance's last rebalances, newest first (one
	// per generation, over its pipelines).
	Rebalances []RebalanceStatus `json:"rebalances"`
}

// GroupMemberStatus is one member of the group (a pipeline of an
// instance), as the leader assigned it.
type GroupMemberStatus struct {
	// InstanceID is the member's: its instance's Options.InstanceID, with
	// "-p<i>" for its pipeline i > 0; Process is the instance's.
	InstanceID string `json:"instance_id"`
	Process    string `json:"process"`
	// URL is the instance's Options.Group.AdvertisedURL ("": none).
	URL string `json:"url"`
	// Local: a pipeline of this instance.
	Local bool `json:"local"`
	// Active are the partitions it processes; Standby those whose state it
	// keeps current to take over on failover; Warmup those it takes over
	// when its copy has caught up (see GroupStatus.Moves).
	Active  []int32 `json:"active"`
	Standby []int32 `json:"standby"`
	Warmup  []int32 `json:"warmup"`
	// Lag is, for each standby and warm-up partition, how many changelog
	// records its copy was behind when the leader assigned it.
	Lag map[int32]int64 `json:"lag,omitempty"`
}

// GroupMove is a partition that moves when caught up (GroupStatus.Moves).
type GroupMove struct {
	Partition int32 `json:"partition"`
	// From is the owner's instance id ("" while unowned), To the member
	// warming up; Lag is how many changelog records To's copy was behind
	// at the last rebalance (-1: unknown).
	From string `json:"from"`
	To   string `json:"to"`
	Lag  int64  `json:"lag"`
}

// RebalanceStatus is one rebalance as this instance saw it: from the start
// of its join to its new assignment.
type RebalanceStatus struct {
	Generation int32         `json:"generation"`
	Start      time.Time     `json:"start,omitzero"`
	Duration   time.Duration `json:"duration_ns"`
	// Leader: this instance balanced the group.
	Leader bool `json:"leader"`
	// Assigned and Revoked are the partitions it gained and lost.
	Assigned []int32 `json:"assigned"`
	Revoked  []int32 `json:"revoked"`
}

// PartitionStatus is one assigned partition of a Status.
type PartitionStatus struct {
	Partition int32 `json:"partition"`
	// Pipeline is the index of the pipeline that owns it (Options.Batching.Pipelines;
	// its group member is "<InstanceID>-p<Pipeline>", pipeline 0 is
	// InstanceID itself).
	Pipeline int `json:"pipeline"`
	// HandoverTo is the pipeline the partition is moving to; nil when
	// none. With several pipelines a rebalance can move a partition from
	// one to another; the new one restores it (waiting for the old one to
	// close its shard) while the old one, shown here, ends its batch.
	HandoverTo *int `json:"handover_to,omitempty"`
	// Restoring: its state is being restored from the changelog; it does
	// not process yet.
	Restoring bool `json:"restoring"`
	// RestoredRecords is the number of changelog records its restore
	// applied so far (live during the restore).
	RestoredRecords int64 `json:"restored_records"`
	// RestoreTotal is the number of changelog records the restore reads
	// in all (end offset - start offset; markers and aborted records make
	// it an upper bound); 0 when unknown or nothing to restore.
	RestoreTotal int64 `json:"restore_total"`
	// RestoreRate is the restore's records per second so far, and
	// RestoreETA the estimated time left at that rate (0 when unknown).
	RestoreRate float64       `json:"restore_rate"`
	RestoreETA  time.Duration `json:"restore_eta_ns"`
	// Lag is the number of input records after the partition's committed
	// position: the partition's end offset (for the read_committed
	// consumer, its last stable offset) minus the group's committed
	// offset. The end offsets are read every few seconds independently of
	// the batches, so the lag is current (a few seconds stale at most)
	// also while a batch runs; the records of the batch in flight count
	// until it commits. -1 when unknown.
	Lag int64 `json:"lag"`
	// InBatch: the partition is part of the batch in flight (see
	// Status.BatchInFlight).
	InBatch bool `json:"in_batch"`
	// Watermark (EventTime mode, ms; -1: none) and BatchID (the id of the
	// partition's last committed batch, the id its sinks received for it;
	// -1: none yet), as of its last commit or its restore. Batch ids are
	// per partition and count the batches that processed rows or fired
	// timers, as statereader.PartitionMeta.BatchID.
	Watermark int64 `json:"watermark"`
	BatchID   int64 `json:"batch_id"`
	// Counters are the partition task's counters.
	Counters Counters `json:"counters"`
}

// Status returns the App's status. Safe to call at any time.
func (a *App[K, I, O]) Status() Status {
	st := Status{
		ApplicationID: a.cfg.ApplicationID, InstanceID: a.cfg.InstanceID, State: a.State().String(),
		MaxBatchDuration: a.cfg.MaxBatchDuration, Partitions: []PartitionStatus{},
	}
	st.Ready, st.ReadyReason = a.Ready()
	a.mu.Lock()
	c, runErr := a.mu.coord, a.mu.err
	a.mu.Unlock()
	if runErr != nil {
		st.Error = runErr.Error()
	}
	if c == nil {
		return st
	}
	s, owner, handover := c.SnapshotOwners()
	st.BatchInFlight, st.SinceCommit, st.FirstCommit = s.BatchInFlight, s.SinceCommit, s.FirstCommit
	st.BatchInFlightRecords = s.BatchInFlightRecords
	st.Total = newCounters(s.Total)
	st.LastError, st.LastErrorAt, st.LastCommitAt = a.metrics.last()
	st.Lag = -1
	for _, p := range s.Assigned {
		ps, ct := s.Status[p], newCounters(s.Partitions[p])
		var to *int
		if i, ok := handover[p]; ok {
			to = &i
		}
		st.Partitions = append(st.Partitions, PartitionStatus{
			Partition: p, Pipeline: owner[p], HandoverTo: to, Restoring: !ps.Ready, RestoredRecords: ps.RestoredRecords, RestoreTotal: ps.RestoreTotal,
			RestoreRate: ps.RestoreRate, RestoreETA: ps.RestoreETA, Lag: ps.Lag, InBatch: ps.InBatch,
			Watermark: ps.Watermark, BatchID: ps.BatchID - 1, Counters: ct,
		})
		if ps.Lag >= 0 {
			st.Lag = max(st.Lag, 0) + ps.Lag
		}
	}
	sort.Slice(st.Partitions, func(i, j int) bool { return st.Partitions[i].Partition < st.Partitions[j].Partition })
	st.Group = a.groupStatus(c)
	return st
}

// groupStatus is Status.Group: nil without a view nor a rebalance.
func (a *App[K, I, O]) groupStatus(c *pipelineSet) *GroupStatus {
	v, rbs, ok := c.GroupView()
	if !ok && len(rbs) == 0 {
		return nil
	}
	g := &GroupStatus{Members: []GroupMemberStatus{}, Unowned: []int32{}, Moves: []GroupMove{}, Rebalances: []RebalanceStatus{}}
	for _, r := range rbs {
		g.Rebalances = append(g.Rebalances, RebalanceStatus{Generation: r.Generation, Start: r.Start, Duration: r.Duration,
			Leader: r.Leader, Assigned: nonNil(r.Assigned), Revoked: nonNil(r.Revoked)})
	}
	if !ok {
		return g
	}
	g.Generation, g.BalancedAt, g.Partitions = v.Generation, v.At, v.Partitions
	for _, m := range v.Members {
		if m.MemberID == v.LeaderID {
			g.Leader = m.InstanceID
		}
		g.Members = append(g.Members, GroupMemberStatus{InstanceID: m.InstanceID, Process: m.Process, URL: m.Addr,
			Local: m.Process == a.cfg.InstanceID, Active: nonNil(m.Active), Standby: nonNil(m.Standby), Warmup: nonNil(m.Warmup), Lag: maps.Clone(m.Lag)})
		for _, p := range m.Warmup {
			mv := GroupMove{Partition: p, To: m.InstanceID, Lag: -1}
			if lag, ok := m.Lag[p]; ok {
				mv.Lag = lag
			}
			if o, ok := v.Owner(p); ok {
				mv.From = o.InstanceID
			}
			g.Moves = append(g.Moves, mv)
		}
	}
	g.Unowned = nonNil(v.Unowned())
	sort.Slice(g.Moves, func(i, j int) bool { return g.Moves[i].Partition < g.Moves[j].Partition })
	return g
}

// nonNil is ps, or an empty list for JSON's [] instead of null.
func nonNil(ps []int32) []int32 {
	if ps == nil {
		return []int32{}
	}
	return slices.Clone(ps)
}

// Live reports whether the App is alive, for a liveness probe: it is not
// when Run returned (Stopped or Failed), or when a micro-batch has been in
// flight for MaxBatchDuration/2 or longer (a processor call that does not
// return: the watchdog gives the batch up, and Run fails, at
// MaxBatchDuration). The reason says why not.
func (a *App[K, I, O]) Live() (ok bool, reason string) {
	switch st := a.State(); st {
	case Stopped, Failed:
		return false, st.String()
	}
	limit := a.cfg.MaxBatchDuration / 2
	if age := a.Metrics().BatchInFlight; age >= limit {
		return false, fmt.Sprintf("stuck: a batch has been in flight for %v (MaxBatchDuration %v)", age.Round(time.Millisecond), a.cfg.MaxBatchDuration)
	}
	return true, "ok"
}

// Ready reports whether the App is Running and reaches Kafka, for a
// readiness probe: every assigned partition is restored and processing,
// and a broker has answered one of the App's Kafka clients within the
// last 10 seconds (an idle application too: its fetches and heartbeats
// are answered every few seconds while the cluster is up). The reason
// says why not. A lost cluster does not make the App not Live: a restart
// would not bring it back.
func (a *App[K, I, O]) Ready() (ok bool, reason string) {
	st := a.State()
	var why string
	switch st {
	case Running:
		why = "ok"
	case Restoring:
		why = fmt.Sprintf("Restoring: partitions %v", a.Metrics().Restoring)
	default:
		why = st.String()
	}
	if st == Stopped || st == Failed {
		return false, why
	}
	if lost := a.metrics.kafka.reach.unreachable(); lost != "" {
		if st == Running {
			return false, lost
		}
		return false, why + "; " + lost
	}
	return st == Running, why
}

// Handler returns an http.Handler serving the App's health, status and
// metrics, for a kubelet, a load balancer, Prometheus and people:
//
//	GET /         an HTML status page for people (polls /status)
//	GET /healthz  200 "ok", or 503 with the reason (see Live)
//	GET /readyz   200 "ok" when Running, or 503 with the state (see Ready)
//	GET /status   200, Status as JSON
//	GET /metrics  the App's Prometheus metrics (see Collector)
//
// It serves no state: live state queries are QueryHandler's, which you
// mount apart, behind your own authentication (docs/OPERATIONS.md,
// "Security"). Mount it where you like (it routes on the full path: mount
// it at the root, or strip a prefix with http.StripPrefix);
// Options.Observability.HTTPAddr serves it on its own. Each call returns a
// new handler.
func (a *App[K, I, O]) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /{$}", statusPage()) // statuspage.go
	mux.Handle("GET /metrics", a.metricsHandler())
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { probe(w)(a.Live()) })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) { probe(w)(a.Ready()) })
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, a.Status())
	})
	return mux
}

// writeJSON writes v as indented JSON with status code.
func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// probe writes a probe's answer: 200 or 503 with the reason as the body.
func probe(w http.ResponseWriter) func(ok bool, reason string) {
	return func(ok bool, reason string) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		fmt.Fprintln(w, reason)
	}
}
