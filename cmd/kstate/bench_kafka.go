package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/kstate/kstate/internal/kafka"
)

// produceInput writes n records keyed uniformly at random over keys (seeded:
// every run of one seed writes the same keys) as fast as two synchronous
// producers go, and returns the number of records written per key.
func produceInput(ctx context.Context, brokers []string, topic string, n, keys, valueBytes int, seed uint64) ([]int32, error) {
	rng := rand.New(rand.NewPCG(seed, 0x6b7374617465))
	perKey := make([]int32, keys)
	const chunk = 10_000
	work := make(chan []kafka.Record, 2)
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for range 2 {
		p, err := kafka.NewProducer(brokers)
		if err != nil {
			return nil, err
		}
		wg.Go(func() {
			defer p.Close()
			for recs := range work {
				if err := p.Produce(ctx, recs...); err != nil {
					errs <- err
					for range work { // drain so the generator finishes
					}
					return
				}
			}
		})
	}
	for i := 0; i < n; i += chunk {
		recs := make([]kafka.Record, 0, min(chunk, n-i))
		now := time.Now().UnixNano()
		for j := i; j < min(i+chunk, n); j++ {
			k := rng.IntN(keys)
			perKey[k]++
			recs = append(recs, kafka.Record{
				Topic: topic, Partition: kafka.AnyPartition, Key: keyBytes(k),
				Value: encodeRow(make([]byte, valueBytes), benchRow{ProducedNs: now, V: rng.Int64N(1000)}),
			})
		}
		work <- recs
	}
	close(work)
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return nil, fmt.Errorf("bench: produce input: %w", err)
	}
	return perKey, nil
}

func keyBytes(k int) []byte { return fmt.Appendf(nil, "k%06d", k) }

// paced produces to topic at rate records/s for d, stamping each record
// with the time it is handed to the producer, counts the records per key in
// perKey, and returns how many it wrote and how long each synchronous
// Produce call took (the input's share of the end-to-end latency). It
// produces in small chunks on a 5ms tick; when a produce is slow the next
// chunk catches up, so the average rate holds and every record's stamp is
// taken right before it is sent.
func paced(ctx context.Context, brokers []string, topic string, rate int, d time.Duration, keys, valueBytes int, seed uint64, perKey []int32) (sent int, acks []time.Duration, err error) {
	p, err := kafka.NewProducer(brokers)
	if err != nil {
		return 0, nil, err
	}
	defer p.Close()
	rng := rand.New(rand.NewPCG(seed, 0x6c6174))
	start := time.Now()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		el := time.Since(start)
		if el >= d {
			return sent, acks, nil
		}
		due := int(float64(rate) * el.Seconds())
		if due > sent {
			now := time.Now().UnixNano()
			recs := make([]kafka.Record, 0, due-sent)
			for range due - sent {
				k := rng.IntN(keys)
				perKey[k]++
				recs = append(recs, kafka.Record{
					Topic: topic, Partition: kafka.AnyPartition, Key: keyBytes(k),
					Value: encodeRow(make([]byte, valueBytes), benchRow{ProducedNs: now, V: rng.Int64N(1000)}),
				})
			}
			t0 := time.Now()
			if err := p.Produce(ctx, recs...); err != nil {
				return sent, acks, fmt.Errorf("bench: paced produce: %w", err)
			}
			acks = append(acks, time.Since(t0))
			sent = due
		}
		select {
		case <-ctx.Done():
			return sent, acks, ctx.Err()
		case <-tick.C:
		}
	}
}

// collector consumes the output topic read_committed, as a downstream
// application would, from the start: it counts the outputs, keeps the
// highest count seen per key (to check exactly-once at the end), and, for
// rows produced inside the latency window, records now − produce time.
type collector struct {
	s        *kafka.Session
	assigned chan struct{}
	done     chan struct{}
	err      error

	mu struct {
		sync.Mutex
		n         int
		first     time.Time // arrival of the first output
		firstN    int       // outputs in that first poll
		spanBase  int       // outputs before the span's first (restartSpan)
		last      time.Time // arrival of the latest output
		maxCount  map[string]int64
		winFrom   int64 // latency window, produce time in unix ns
		winTo     int64
		latencies []time.Duration
		// The same rows split at the output record's timestamp (set by the
		// application's producer, ms precision): input produced → output
		// produced (waiting for a poll, processing) and output produced →
		// visible read_committed (acks, commit, downstream fetch).
		toOutput, toVisible []time.Duration
		decodeErrs          int
		waiters             []waiter
	}
}

type waiter struct {
	n  int
	ch chan struct{}
}

func newCollector(brokers []string, group, topic string) (*collector, error) {
	c := &collector{assigned: make(chan struct{}), done: make(chan struct{})}
	c.mu.maxCount = make(map[string]int64)
	var once sync.Once
	s, err := kafka.NewSession(kafka.SessionConfig{
		Brokers: brokers, GroupID: group, Topics: []string{topic},
		FetchMaxWait: 100 * time.Millisecond,
		OnAssigned: func(context.Context, []kafka.Partition) {
			once.Do(func() { close(c.assigned) })
		},
	})
	if err != nil {
		return nil, err
	}
	c.s = s
	return c, nil
}

// run polls until ctx is cancelled.
func (c *collector) run(ctx context.Context) {
	defer close(c.done)
	var codec outCodec
	for {
		recs, err := c.s.Poll(ctx, 0)
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, kafka.ErrClosed) {
				c.err = err
			}
			return
		}
		if len(recs) == 0 {
			continue
		}
		now := time.Now()
		c.mu.Lock()
		if c.mu.first.IsZero() {
			c.mu.first, c.mu.firstN = now, len(recs)
		}
		c.mu.last = now
		c.mu.n += len(recs)
		for i := range recs {
			o, err := codec.Deserialize(recs[i].Value)
			if err != nil {
				c.mu.decodeErrs++
				continue
			}
			if k := string(recs[i].Key); o.Count > c.mu.maxCount[k] {
				c.mu.maxCount[k] = o.Count
			}
			if o.ProducedNs >= c.mu.winFrom && o.ProducedNs < c.mu.winTo {
				produced := time.Unix(0, o.ProducedNs)
				c.mu.latencies = append(c.mu.latencies, now.Sub(produced))
				if ts := recs[i].Timestamp; !ts.IsZero() {
					c.mu.toOutput = append(c.mu.toOutput, ts.Sub(produced))
					c.mu.toVisible = append(c.mu.toVisible, now.Sub(ts))
				}
			}
		}
		kept := c.mu.waiters[:0]
		for _, w := range c.mu.waiters {
			if c.mu.n >= w.n {
				close(w.ch)
			} else {
				kept = append(kept, w)
			}
		}
		c.mu.waiters = kept
		c.mu.Unlock()
	}
}

// waitFor returns once n outputs arrived.
func (c *collector) waitFor(ctx context.Context, n int) error {
	c.mu.Lock()
	if c.mu.n >= n {
		c.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	c.mu.waiters = append(c.mu.waiters, waiter{n, ch})
	c.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-c.done:
		return fmt.Errorf("bench: output consumer stopped: %v", c.err)
	case <-ctx.Done():
		c.mu.Lock()
		have := c.mu.n
		c.mu.Unlock()
		return fmt.Errorf("bench: waiting for %d outputs, have %d: %w", n, have, ctx.Err())
	}
}

// window sets the produce-time window whose rows are latency samples.
func (c *collector) window(from, to time.Time) {
	c.mu.Lock()
	c.mu.winFrom, c.mu.winTo = from.UnixNano(), to.UnixNano()
	c.mu.Unlock()
}

// throughputSpan returns outputs after the first poll and the time from
// the first to the last output.
func (c *collector) throughputSpan() (n int, first time.Time, span time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.n - c.mu.spanBase - c.mu.firstN, c.mu.first, c.mu.last.Sub(c.mu.first)
}

// restartSpan makes throughputSpan count from the next output on.
func (c *collector) restartSpan() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mu.first, c.mu.firstN, c.mu.spanBase = time.Time{}, 0, c.mu.n
}

// checkNew checks the churn workload's new keys: one row each, so a
// final count of 1 (a lost output leaves a key unseen, a duplicate shows in
// check's total).
func (c *collector) checkNew(n int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	bad := 0
	for i := range n {
		if c.mu.maxCount[string(newKeyBytes(i))] != 1 {
			bad++
		}
	}
	if bad > 0 {
		return fmt.Errorf("bench: exactly-once check: %d of %d new keys do not have a count of 1", bad, n)
	}
	return nil
}

// latencySamples returns the end-to-end latencies and their two parts.
func (c *collector) latencySamples() (total, toOutput, toVisible []time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.mu.latencies), slices.Clone(c.mu.toOutput), slices.Clone(c.mu.toVisible)
}

// check compares the last count seen per key with the rows produced per key:
// a lost or duplicated output shows as a mismatch (the count is emitted per
// row, so a duplicate would arrive twice and a lost row would leave the
// count short).
func (c *collector) check(perKey []int32, total int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.decodeErrs > 0 {
		return fmt.Errorf("bench: %d undecodable outputs", c.mu.decodeErrs)
	}
	if c.mu.n != total {
		return fmt.Errorf("bench: exactly-once check: %d outputs for %d input rows", c.mu.n, total)
	}
	bad := 0
	for k, n := range perKey {
		if c.mu.maxCount[string(keyBytes(k))] != int64(n) {
			bad++
		}
	}
	if bad > 0 {
		return fmt.Errorf("bench: exactly-once check: %d keys have a final count different from their input rows", bad)
	}
	return nil
}

func (c *collector) close() {
	_ = c.s.Close()
}
