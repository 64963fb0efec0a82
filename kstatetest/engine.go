package kstatetest

// This file is the only glue between the driver and the engine: it opens,
// restores, starts, runs, commits and closes the engine's partition tasks,
// standing in for the coordinator's poll loop and Kafka transactions. When
// the coordinator can run on a fake session, this file is what changes.

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"time"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/changelog"
	"github.com/kstate/kstate/internal/engine"
	"github.com/kstate/kstate/internal/initial"
	"github.com/kstate/kstate/internal/kv"
	"github.com/kstate/kstate/internal/restore"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/serde"
)

// runID is the QueryInfo.RunID processors see under the driver.
const runID = "kstatetest"

// partition is one input partition: its engine task, the store behind the
// task's shard, the captured changelog partition and the queued input.
type partition[K, I, O any] struct {
	id      int32
	task    *engine.Task[K, I, O]
	store   kv.Store           // the shard's backend (owned by the shard)
	outputs *capture[O]        // typed outputs of the batch in progress
	log     []changelog.Record // committed changelog records, offsets 0..len-1
	queued  []engine.Record    // input of the next batch
	offsets map[int]int64      // next input offset, per input topic
}

// capture wraps Topology.Output.Serde so that the driver keeps the typed value
// of every output the engine serialized, in emission order.
type capture[O any] struct {
	s    serde.Serializer[O]
	vals []O
}

func (c *capture[O]) Serialize(o O) ([]byte, error) {
	b, err := c.s.Serialize(o)
	if err == nil {
		c.vals = append(c.vals, o)
	}
	return b, err
}

// engineConfig maps the user's Topology to one partition task's engine
// config, as the root package's taskConfig does (minus the shard
// directory: the shard lives in memory).
func engineConfig[K, I, O any](c config[K, I, O], p int32, backend kv.Store, out serde.Serializer[O]) engine.Config[K, I, O] {
	decode, keyPart, processing := policies(c)
	maxOut := c.MaxRecordBytes
	if maxOut == 0 {
		maxOut = engine.DefaultMaxOutputBytes
	}
	return engine.Config[K, I, O]{
		OnDecodeError:     decode,
		OnKeyPartition:    keyPart,
		OnProcessingError: processing,
		MaxOutputBytes:    maxOut,
		ApplicationID:     c.ApplicationID,
		RunID:             runID,
		Topic:             inputTopics(c)[0],
		Topics:            engineTopics(c),
		Inputs:            engineDecoders(c),
		GroupKeys:         groupKeys(c),
		RepartitionInput:  repartitionInput(c),
		Partition:         p,
		Backend:           backend,
		TimeMode:          c.TimeMode,
		OutputMode:        c.OutputMode,
		KeySerde:          c.KeySerde,
		ValueSerde:        c.ValueSerde,
		OutputSerde:       out,
		NewProcessor:      c.NewProcessor,
		EventTime:         c.EventTime,
		AllowedLatenessMs: c.AllowedLateness.Milliseconds(),
		OutputEventTime:   c.OutputEventTime,
		OutputKey:         c.OutputKey,
		OutputTopics:      outputTopicSet(c.OutputTopics),
		ValueFromRecord:   c.ValueFromRecord,
	}
}

// policies maps the error policies as the root package does.
func policies[K, I, O any](c config[K, I, O]) (decode, keyPart, processing engine.Policy) {
	decode, keyPart, processing = engine.PolicyFail, engine.PolicyAllow, engine.PolicyFail
	switch c.OnDecodeError {
	case kstate.DecodeErrorSkip:
		decode = engine.PolicySkip
	case kstate.DecodeErrorDeadLetter:
		decode = engine.PolicyDeadLetter
	}
	switch c.OnKeyPartitionMismatch {
	case kstate.KeyPartitionFail:
		keyPart = engine.PolicyFail
	case kstate.KeyPartitionDeadLetter:
		keyPart = engine.PolicyDeadLetter
	}
	if c.OnProcessingError == kstate.ProcessingErrorDeadLetter {
		processing = engine.PolicyDeadLetter
	}
	return decode, keyPart, processing
}

// loadInitial reads cfg.InitialState once and routes its rows to
// partitions with Kafka's default partitioner, as the root package does.
func (d *Driver[K, I, O]) loadInitial() error {
	if d.cfg.InitialState == nil {
		return nil
	}
	read := func(_ context.Context, topic string) ([]initial.Record, error) {
		recs, ok := d.opts.topics[topic]
		if !ok {
			return nil, fmt.Errorf("%w: %q (give its records with kstatetest.InitialTopic)", ErrNoTopic, topic)
		}
		out := make([]initial.Record, len(recs))
		for i, r := range recs {
			out[i] = initial.Record{Topic: topic, Offset: int64(i), Key: r.Key, Value: r.Value}
		}
		return out, nil
	}
	rows, err := d.cfg.InitialState.Rows(context.Background(), read, d.cfg.KeySerde)
	if err != nil {
		return fmt.Errorf("kstate: %w", err)
	}
	d.initial = make(map[int32][]engine.InitialRow[K])
	for _, row := range rows {
		p := engine.PartitionFor(row.KeyBytes, len(d.parts))
		d.initial[p] = append(d.initial[p], row)
	}
	return nil
}

// open opens partition p's task over store, restores the captured
// changelog from the shard's offset through the real restore path, starts
// the task (mode checks, Init) and hands it its initial state on a first run.
func (d *Driver[K, I, O]) open(p *partition[K, I, O], store kv.Store) error {
	start := time.Now()
	p.store = store
	p.outputs = &capture[O]{s: d.cfg.OutputSerde}
	t, err := engine.Open(engineConfig(d.cfg, p.id, store, p.outputs))
	if err != nil {
		return fmt.Errorf("kstate: %w", err)
	}
	st, err := restore.Restore(context.Background(), &sliceSource{recs: p.log, from: t.Shard().ChangelogOffset()}, t.Shard(), restore.Options{Logger: d.log.With("partition", p.id)})
	if err != nil {
		t.Close()
		return fmt.Errorf("kstate: partition %d: %w", p.id, err)
	}
	t.AddCounters(engine.Counters{RestoreRecords: st.Records, RestoreTime: time.Since(start)})
	if err := t.Start(); err != nil {
		t.Close()
		return fmt.Errorf("kstate: %w", err)
	}
	// The driver commits input offsets only with a batch, and every
	// committed batch makes the task non-fresh, so "fresh" alone says
	// "first run" here.
	if t.Fresh() && !t.InitialStateApplied() && len(d.initial[p.id]) > 0 {
		t.SetInitialState(d.initial[p.id])
	}
	p.task = t
	return nil
}

// sliceSource serves a captured changelog partition to restore.Restore.
type sliceSource struct {
	recs []changelog.Record
	from int64
	done bool
}

func (s *sliceSource) Next(context.Context) ([]changelog.Record, error) {
	if s.done || s.from >= int64(len(s.recs)) {
		return nil, io.EOF
	}
	s.done = true
	return s.recs[s.from:], nil
}

// batch runs one micro-batch round like the coordinator: every partition
// with input, or due a batch (ProcessingTime trigger, first batch, an
// advanced watermark), runs RunBatch; then the "transaction" commits:
// changelog records get offsets, outputs become visible, tasks Commit. On
// an error every task that ran aborts and the queued input is dropped.
func (d *Driver[K, I, O]) batch() error {
	nowMs := d.now.UnixMilli()
	type ran struct {
		p   *partition[K, I, O]
		res *engine.BatchResult
	}
	var runs []ran
	var err error
	d.rounds++
	for _, p := range d.parts {
		if len(p.queued) == 0 && d.cfg.TimeMode != processor.ProcessingTime && !p.task.NeedsBatch() {
			continue
		}
		p.outputs.vals = p.outputs.vals[:0]
		// The coordinator's order: by input topic, then offset.
		sort.SliceStable(p.queued, func(i, j int) bool { return p.queued[i].Input < p.queued[j].Input })
		res, rerr := p.task.RunBatch(nowMs, p.queued)
		runs = append(runs, ran{p, res})
		if rerr != nil {
			err = fmt.Errorf("kstate: %w", rerr)
			break
		}
	}
	for _, p := range d.parts {
		p.queued = nil
	}
	if err != nil {
		for _, r := range runs {
			r.p.task.Abort()
		}
		return err
	}
	commit := false
	for _, r := range runs {
		for _, o := range r.res.Outputs {
			var ts time.Time
			if o.TimestampMs >= 0 {
				ts = time.UnixMilli(o.TimestampMs).UTC()
			}
			if o.Topic != "" {
				if d.topics == nil {
					d.topics = map[string][]TopicOutput{}
				}
				d.topics[o.Topic] = append(d.topics[o.Topic], TopicOutput{Key: o.Key, Value: o.Value, Timestamp: ts, Headers: procHeaders(o.Headers), Partition: r.p.id})
				continue
			}
			// Seq indexes the serialized values, rolled-back keys' included.
			if o.Seq >= len(r.p.outputs.vals) {
				return fmt.Errorf("kstatetest: internal error: partition %d: output %d of %d serialized values", r.p.id, o.Seq, len(r.p.outputs.vals))
			}
			d.outputs = append(d.outputs, Output[O]{Key: o.Key, Value: r.p.outputs.vals[o.Seq], Bytes: o.Value, Timestamp: ts, Headers: procHeaders(o.Headers), Partition: r.p.id})
		}
		for _, dl := range r.res.DeadLetters {
			var ts time.Time
			if dl.TimestampMs >= 0 {
				ts = time.UnixMilli(dl.TimestampMs).UTC()
			}
			h := make(map[string]string, len(dl.Headers))
			for _, x := range dl.Headers {
				h[x.Key] = string(x.Value)
			}
			d.dead = append(d.dead, DeadLetter{Key: dl.Key, Value: dl.Value, Timestamp: ts, Headers: h, Partition: r.p.id})
		}
		// GroupBy: forwarded records are "produced" to the repartition
		// topic's partition murmur2(key) and processed by a later batch.
		for _, o := range r.res.Repartition {
			to := d.parts[engine.PartitionFor(o.Key, len(d.parts))]
			in := repartitionInput(d.cfg)
			to.queued = append(to.queued, engine.Record{Input: in, Offset: to.offsets[in], Key: o.Key, Value: o.Value, TimestampMs: o.TimestampMs, Headers: o.Headers})
			to.offsets[in]++
		}
		commit = commit || len(r.res.Repartition) > 0
		next := int64(-1)
		for _, c := range r.res.Changelog {
			r.p.log = append(r.p.log, changelog.Record{Key: c.Key, Value: c.Value, Offset: int64(len(r.p.log))})
			next = int64(len(r.p.log))
		}
		commit = commit || len(r.res.Outputs) > 0 || len(r.res.Changelog) > 0 || len(r.res.DeadLetters) > 0
		if err := r.p.task.Commit(next); err != nil {
			return fmt.Errorf("kstate: %w", err)
		}
	}
	if commit {
		d.commits++
	}
	return nil
}

// closeTask closes p's task (processor Close, shard Close) and keeps its
// counters.
func (d *Driver[K, I, O]) closeTask(p *partition[K, I, O]) error {
	if p.task == nil {
		return nil
	}
	t := p.task
	p.task = nil
	err := t.Close()
	d.retired.Add(t.Counters())
	if err != nil {
		return fmt.Errorf("kstate: %w", err)
	}
	return nil
}

// copyStore copies every entry of src into a new in-memory store: the
// "local disk" that survives a restart with KeepLocalState.
func copyStore(src kv.Store) (kv.Store, error) {
	dst := kv.NewMemory()
	it := src.NewIter(nil, nil)
	var b kv.Batch
	for ok := it.First(); ok; ok = it.Next() {
		b.Put(append([]byte(nil), it.Key()...), append([]byte(nil), it.Value()...))
	}
	err := it.Error()
	if cerr := it.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = dst.Write(&b, kv.WriteOptions{})
	}
	return dst, err
}

// outputTopicSet is the engine's set of the declared output topics.
func outputTopicSet(ts []processor.NamedTopic) map[string]bool {
	if len(ts) == 0 {
		return nil
	}
	m := make(map[string]bool, len(ts))
	for _, t := range ts {
		m[t.Name()] = true
	}
	return m
}

// procHeaders converts the engine's headers; nil stays nil.
func procHeaders(hs []engine.Header) []processor.Header {
	if len(hs) == 0 {
		return nil
	}
	out := make([]processor.Header, len(hs))
	for i, h := range hs {
		out[i] = processor.Header{Key: h.Key, Value: h.Value}
	}
	return out
}

// inputTopics returns the input topics: Topology.Inputs' or InputTopics.
func inputTopics[K, I, O any](c config[K, I, O]) []string {
	if len(c.Inputs) == 0 {
		return c.InputTopics
	}
	out := make([]string, len(c.Inputs))
	for i, in := range c.Inputs {
		out[i] = in.Topic
	}
	return out
}

// inputDecoders returns the value decoders of the input topics, as the
// root package does.
func inputDecoders[K, I, O any](c config[K, I, O]) []engine.InputDecoder[I] {
	if len(c.Inputs) == 0 {
		out := make([]engine.InputDecoder[I], len(c.InputTopics))
		for i := range out {
			out[i] = engine.InputDecoder[I]{ValueSerde: c.ValueSerde, ValueFromRecord: c.ValueFromRecord}
		}
		return out
	}
	out := make([]engine.InputDecoder[I], len(c.Inputs))
	for i, in := range c.Inputs {
		out[i] = engine.InputDecoder[I]{ValueSerde: in.ValueSerde, ValueFromRecord: in.ValueFromRecord}
	}
	return out
}

// The GroupBy wiring, as the root package does: the repartition topic is
// the last input, its records decoded by the input their header names.

func engineTopics[K, I, O any](c config[K, I, O]) []string {
	ts := inputTopics(c)
	if len(c.GroupBy) > 0 {
		ts = append(slices.Clone(ts), c.ApplicationID+"-repartition")
	}
	return ts
}

func engineDecoders[K, I, O any](c config[K, I, O]) []engine.InputDecoder[I] {
	ds := inputDecoders(c)
	if len(c.GroupBy) > 0 {
		ds = append(ds, engine.InputDecoder[I]{})
	}
	return ds
}

func repartitionInput[K, I, O any](c config[K, I, O]) int {
	if len(c.GroupBy) == 0 {
		return 0
	}
	return len(inputTopics(c))
}

func groupKeys[K, I, O any](c config[K, I, O]) []func([]byte, I) ([]byte, error) {
	if len(c.GroupBy) == 0 {
		return nil
	}
	topics := inputTopics(c)
	out := make([]func([]byte, I) ([]byte, error), len(topics)+1)
	for _, g := range c.GroupBy {
		i := slices.Index(topics, g.Topic)
		if i < 0 {
			continue // refused by kstate.New
		}
		key, ks := g.Key, c.KeySerde
		out[i] = func(recordKey []byte, v I) ([]byte, error) {
			k, err := key(recordKey, v)
			if err != nil {
				return nil, err
			}
			return ks.Serialize(k)
		}
	}
	return out
}
