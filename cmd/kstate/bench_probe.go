package main

import (
	"encoding/binary"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// latencyProbe splits the latency phase's end-to-end latency inside the
// application, from franz-go hooks installed through Options.Kafka.ClientOptions
// (so on every client of the app; only the input topic's records and the
// transaction's requests are kept), while on:
//
//   - fetched: input produced → its fetch response reached the app's
//     consumer (franz-go buffers it);
//   - polled: input produced → the engine's Poll returned it. franz-go keeps
//     one fetch buffered per broker and sends the next fetch only once that
//     one is drained, so fetched → polled is the wait for the loop's next
//     Poll: up to one loop iteration, or two when the buffered fetch is the
//     one sent right after the previous Poll;
//   - the round trips of the transaction's requests: Produce,
//     TxnOffsetCommit and EndTxn (write to response read, on the app's
//     client; the broker's work and the wait for it).
//
// The hooks run on franz-go's goroutines; recording is a timestamp and an
// append under a mutex, and only during the latency phase.
type latencyProbe struct {
	topic string
	on    atomic.Bool

	mu struct {
		sync.Mutex
		fetched, polled []time.Duration
		requests        map[int16][]time.Duration // by request key
	}
}

func newLatencyProbe(inputTopic string) *latencyProbe {
	p := &latencyProbe{topic: inputTopic}
	p.mu.requests = make(map[int16][]time.Duration)
	return p
}

// The hook interfaces latencyProbe implements.
var (
	_ kgo.HookFetchRecordBuffered   = (*latencyProbe)(nil)
	_ kgo.HookFetchRecordUnbuffered = (*latencyProbe)(nil)
	_ kgo.HookBrokerE2E             = (*latencyProbe)(nil)
)

// stampAge is now − the produce stamp in r's value (encodeRow), or false
// for records that are not the bench's input rows.
func (p *latencyProbe) stampAge(r *kgo.Record) (time.Duration, bool) {
	if !p.on.Load() || r.Topic != p.topic || len(r.Value) < minValueBytes {
		return 0, false
	}
	return time.Since(time.Unix(0, int64(binary.BigEndian.Uint64(r.Value)))), true
}

func (p *latencyProbe) OnFetchRecordBuffered(r *kgo.Record) {
	if d, ok := p.stampAge(r); ok {
		p.mu.Lock()
		p.mu.fetched = append(p.mu.fetched, d)
		p.mu.Unlock()
	}
}

func (p *latencyProbe) OnFetchRecordUnbuffered(r *kgo.Record, polled bool) {
	if !polled {
		return // dropped (revoked, paused), not returned by a Poll
	}
	if d, ok := p.stampAge(r); ok {
		p.mu.Lock()
		p.mu.polled = append(p.mu.polled, d)
		p.mu.Unlock()
	}
}

func (p *latencyProbe) OnBrokerE2E(_ kgo.BrokerMetadata, key int16, e2e kgo.BrokerE2E) {
	if !p.on.Load() || e2e.Err() != nil {
		return
	}
	switch kmsg.Key(key) {
	case kmsg.Produce, kmsg.TxnOffsetCommit, kmsg.EndTxn:
		p.mu.Lock()
		p.mu.requests[key] = append(p.mu.requests[key], e2e.DurationE2E())
		p.mu.Unlock()
	}
}

// probeSamples are the probe's samples, copied.
type probeSamples struct {
	fetched, polled                []time.Duration
	produce, offsetCommit, endTxns []time.Duration
}

func (p *latencyProbe) samples() probeSamples {
	p.mu.Lock()
	defer p.mu.Unlock()
	return probeSamples{
		fetched:      slices.Clone(p.mu.fetched),
		polled:       slices.Clone(p.mu.polled),
		produce:      slices.Clone(p.mu.requests[int16(kmsg.Produce)]),
		offsetCommit: slices.Clone(p.mu.requests[int16(kmsg.TxnOffsetCommit)]),
		endTxns:      slices.Clone(p.mu.requests[int16(kmsg.EndTxn)]),
	}
}
