package engine

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Observer receives the coordinator's events that counters cannot carry:
// latencies of each committed batch, aborts and group changes (the root
// package feeds Prometheus histograms from it; no metrics library type
// crosses this interface). Its methods are called on the loop goroutine,
// synchronously, once per batch or event (never per record), never under
// the coordinator's locks: they must be quick and must not call back into
// the Coordinator except Snapshot. The slices passed are only valid during
// the call.
type Observer interface {
	// BatchCommitted: a batch's transaction committed.
	BatchCommitted(b BatchObservation)
	// Aborted: a batch's transaction was aborted (by a rebalance) and will
	// be retried; cause says why.
	Aborted(cause error)
	// Rebalanced: the group assigned, revoked or lost parts (kind is
	// "assigned", "revoked" or "lost").
	Rebalanced(kind string, parts []int32)
}

// BatchObservation describes one committed batch.
type BatchObservation struct {
	// Duration is the batch's time from the start of its processor calls
	// to the end of its commit (Clock.Elapsed); CommitLatency is the part
	// spent in End(commit).
	Duration, CommitLatency time.Duration
	// At is Clock.Now after the commit: the end of the end-to-end latency
	// of the batch's input records.
	At time.Time
	// Partitions are the partitions that ran the batch, by partition.
	Partitions []PartitionBatch
}

// PartitionBatch is one partition's share of a committed batch.
type PartitionBatch struct {
	Partition int32
	// RecordsIn is the number of input records the batch consumed from
	// the partition; RecordsOut the number of output records it produced.
	RecordsIn, RecordsOut int
	// OldestMs and NewestMs are the smallest and largest timestamps (Unix
	// ms) of the consumed input records; meaningless when RecordsIn is 0.
	// At minus OldestMs is the batch's worst end-to-end latency.
	OldestMs, NewestMs int64
	// DeadLetterError is the error message of the last record the batch
	// dead-lettered from the partition; "" when none.
	DeadLetterError string
}

// errAbortedByRebalance is the cause Observer.Aborted receives for a
// transaction a rebalance aborted.
var errAbortedByRebalance = errors.New("kstate: batch transaction aborted by a rebalance; retried from the committed offsets")

// HighWatermarks is an optional capability of a Session: the high
// watermark (the offset after the last record) and the log start offset
// of an input partition as of the last fetch that returned the partition
// (logStart -1: unknown). The coordinator calls it on the loop goroutine
// only, to compute each partition's lag.
type HighWatermarks interface {
	HighWatermark(topic string, partition int32) (hwm, logStart int64, ok bool)
}

// EndOffsetter is an optional capability of the Admin: the high watermark
// of every partition of topic. A partition's restore calls it once, so
// that the lag of a partition with no new input is known before a fetch
// returns records of it (Kafka fetches of a caught-up partition may
// return nothing, hence no high watermark).
type EndOffsetter interface {
	EndOffsets(ctx context.Context, topic string) (map[int32]int64, error)
}

// noteEndOffset records s's input end offset as of its restore (restore
// goroutine): the last stable offset when the Admin is a StableOffsetter
// (the end of what the read_committed sessions can read), else the high
// watermark. Errors only leave the lag unknown until a fetch or the next
// NoteEndOffsets.
func (c *Coordinator) noteEndOffset(ctx context.Context, s *slot) {
	var list func(context.Context, string) (map[int32]int64, error)
	if so, ok := c.cfg.Admin.(StableOffsetter); ok {
		list = so.StableOffsets
	} else if eo, ok := c.cfg.Admin.(EndOffsetter); ok {
		list = eo.EndOffsets
	} else {
		return
	}
	for i, topic := range c.cfg.Topics {
		ends, err := list(ctx, topic)
		if err != nil {
			c.log.Debug("end offsets for the lag: unavailable", "partition", s.part, "topic", topic, "err", err)
			return
		}
		if end, ok := ends[s.part]; ok {
			c.mu.Lock()
			s.endOffset[i] = end
			c.mu.Unlock()
		}
	}
}

// observeCommit records, after a batch committed, the consumed position
// of every partition that ran it (for its lag) and reports the batch to
// the Observer.
func (c *Coordinator) observeCommit(parts []*slot, byPart map[int32][]Record, results []*BatchResult, start, latency time.Duration) {
	c.mu.Lock()
	for _, s := range parts {
		for i, o := range lastOffsets(byPart[s.part], len(c.cfg.Topics)) {
			if o >= 0 {
				s.position[i] = o
			}
		}
	}
	c.mu.Unlock()
	o := c.cfg.Observer
	if o == nil {
		return
	}
	b := BatchObservation{Duration: c.clock.Elapsed() - start, CommitLatency: latency, At: c.clock.Now(), Partitions: make([]PartitionBatch, len(parts))}
	for i, s := range parts {
		recs := byPart[s.part]
		pb := PartitionBatch{Partition: s.part, RecordsIn: len(recs), RecordsOut: len(results[i].Outputs)}
		if dl := results[i].DeadLetters; len(dl) > 0 {
			for _, h := range dl[len(dl)-1].Headers {
				if h.Key == HeaderError {
					pb.DeadLetterError = string(h.Value)
				}
			}
		}
		if len(recs) > 0 {
			pb.OldestMs, pb.NewestMs = recs[0].TimestampMs, recs[0].TimestampMs
		}
		for j := range recs { // by index: a Record is large to copy
			ts := recs[j].TimestampMs
			pb.OldestMs, pb.NewestMs = min(pb.OldestMs, ts), max(pb.NewestMs, ts)
		}
		b.Partitions[i] = pb
	}
	o.BatchCommitted(b)
}

// noteLag notes the session's high watermarks and recomputes the lag of
// every partition (loop only, after a batch: the positions moved). The
// session's watermarks are only read here, on the loop goroutine;
// NoteEndOffsets updates the lag from any goroutine in between.
func (c *Coordinator) noteLag() {
	hw, _ := c.session.(HighWatermarks)
	c.mu.Lock()
	defer c.mu.Unlock()
	for p, s := range c.mu.slots {
		if hw != nil && s.ready {
			for i, topic := range c.cfg.Topics {
				if h, start, ok := hw.HighWatermark(topic, p); ok && i < len(s.fetchEnd) {
					s.fetchEnd[i], s.logStart[i] = h, start
				}
			}
		}
		s.lag = s.computeLag()
	}
}

// totalLag is the consumer lag summed over the ready partitions as of the
// last noteLag or NoteEndOffsets; -1 when none is ready or one's lag is
// unknown.
func (c *Coordinator) totalLag() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	total := int64(-1)
	for _, s := range c.mu.slots {
		if !s.ready {
			continue
		}
		if s.lag < 0 {
			return -1
		}
		total = max(total, 0) + s.lag
	}
	return total
}

// restoreProgress is a slot's restore progress (under Coordinator.mu).
type restoreProgress struct {
	start   time.Duration // Clock.Elapsed when the restore began
	lastLog time.Duration // Clock.Elapsed of the last progress line
	base    int64         // records applied by earlier readers of this restore
	done    int64         // records applied so far
	total   int64         // upper bound of done at the end (offsets to read)
	offset  int64         // changelog offset reached
	end     int64         // end offset of the current reader
	ended   bool          // finished: total is exact (= done)
	elapsed time.Duration // the restore's duration once ended
}

// restoreLogEvery is the interval of the restore progress lines.
const restoreLogEvery = 5 * time.Second

// rate is the records per second so far and eta the time left at that
// rate (0 when unknown); now is Clock.Elapsed.
func (r *restoreProgress) rate(now time.Duration) (rate float64, eta time.Duration) {
	el := now - r.start
	if r.ended {
		el = r.elapsed
	}
	if el <= 0 || r.done == 0 {
		return 0, 0
	}
	rate = float64(r.done) / el.Seconds()
	if !r.ended && r.end > r.offset {
		eta = time.Duration(float64(r.end-r.offset) / rate * float64(time.Second))
	}
	return rate, eta
}

// restoreReader notes a new changelog reader of s's restore, reading
// [from, end); base records were applied by the earlier ones.
func (c *Coordinator) restoreReader(s *slot, base, from, end int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := &s.restore
	r.base, r.done, r.offset, r.end = base, base, from, end
	r.total = base + max(0, end-from)
}

// restoreApplied notes the progress of s's restore (the restore
// goroutine, after each applied batch) and logs a line every
// restoreLogEvery.
func (c *Coordinator) restoreApplied(s *slot, records, offset int64) {
	now := c.clock.Elapsed()
	c.mu.Lock()
	r := &s.restore
	r.done, r.offset = r.base+records, offset
	logIt := now-r.lastLog >= restoreLogEvery
	if logIt {
		r.lastLog = now
	}
	snap := *r
	c.mu.Unlock()
	if !logIt {
		return
	}
	rate, eta := snap.rate(now)
	pct := 0.0
	if snap.total > 0 {
		pct = 100 * float64(snap.done) / float64(snap.total)
	}
	c.log.Info(fmt.Sprintf("restoring partition %d: %d/%d changelog records (%.0f%%), %s/s, ETA %v",
		s.part, snap.done, snap.total, pct, humanCount(rate), eta.Round(time.Second)),
		"partition", s.part, "records", snap.done, "total", snap.total, "records_per_second", int64(rate), "eta", eta.Round(time.Second))
}

// restoreEnded marks s's restore finished with n records.
func (c *Coordinator) restoreEnded(s *slot, n int64) {
	now := c.clock.Elapsed()
	c.mu.Lock()
	r := &s.restore
	r.done, r.total, r.ended, r.elapsed = n, n, true, now-r.start
	logged := r.lastLog > r.start
	snap := *r
	c.mu.Unlock()
	if n == 0 && !logged {
		return
	}
	rate, _ := snap.rate(now)
	c.log.Info(fmt.Sprintf("restored partition %d: %d changelog records in %v (%s/s)", s.part, n, snap.elapsed.Round(time.Millisecond), humanCount(rate)),
		"partition", s.part, "records", n, "restore_time", snap.elapsed, "records_per_second", int64(rate))
}

// humanCount formats a rate like 250k or 1.2M.
func humanCount(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.1fM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.0fk", v/1e3)
	default:
		return fmt.Sprintf("%.0f", v)
	}
}
