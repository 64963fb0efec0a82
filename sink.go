package kstate

import (
	"context"
	"fmt"
)

// Sink receives the micro-batches of an App for a destination that has no
// Kafka connector — a database upsert or MERGE, a search index, an HTTP
// API — like Spark's foreachBatch.
//
// WriteBatch is called once per partition batch that emitted at least one
// row, before the batch's Kafka transaction commits, on the processing
// loop (partitions of one round in order, the sinks of Topology.Output.Sinks in
// order); with Options.Batching.Pipelines above 1, the pipelines' loops call it
// concurrently. Batches are per input partition, not per round of the loop,
// because a partition's batch ids must stay stable when partitions move
// between instances: a round's partitions are whatever the instance owns
// at that moment, a partition's batches are the same wherever it runs.
//
// A batch retried after a crash, an abort or a rebalance carries the same
// (Partition, ID) and exactly the same rows, in the same order: its input
// range and processing time are committed to Kafka before it runs (see
// docs/ARCHITECTURE.md, "ForeachBatch sinks"), and the processor must be
// deterministic (no wall clock, no randomness, no outside reads; the
// batch's time is in TimerValues). IDs of one partition increase; they may
// skip values (batches that emitted nothing). So a sink that writes
// idempotently by batch — in one transaction of its own database, the rows
// and a per-partition high-water mark, skipping a batch whose ID is not
// above the mark — is exactly-once end to end.
//
// WriteBatch must honour ctx: it is cancelled ShutdownTimeout after Run's
// context (the batch in flight is then given up), and the watchdog of
// MaxBatchDuration does not cover sinks.
//
// An error (or a panic) fails the batch: nothing of it is committed, and
// Run returns a *SinkError. There is no retry loop: restart the instance
// (the orchestrator's job), which re-executes the same batch. Batches that
// emitted no row do not reach the sink. The kstatetest driver calls the
// sinks as App.Run does (kstatetest.Driver.FailNextSink fails one; see
// examples/foreachbatch).
type Sink[K, O any] interface {
	WriteBatch(ctx context.Context, b SinkBatch[K, O]) error
}

// SinkFunc adapts a function to a Sink.
type SinkFunc[K, O any] func(ctx context.Context, b SinkBatch[K, O]) error

// WriteBatch calls f.
func (f SinkFunc[K, O]) WriteBatch(ctx context.Context, b SinkBatch[K, O]) error { return f(ctx, b) }

// SinkBatch is one partition's micro-batch: the rows its processor calls
// emitted, in emit order.
type SinkBatch[K, O any] struct {
	// Partition is the input partition.
	Partition int32
	// ID is the partition's batch id (the one processor.Handle reports
	// during the batch): stable across retries of the batch.
	ID   int64
	Rows []SinkRow[K, O]
}

// SinkRow is one emitted row with the grouping key of the call that
// emitted it.
type SinkRow[K, O any] struct {
	Key   K
	Value O
}

// SinkError is the error of a Sink: the batch (Partition, BatchID) was not
// committed and Run stopped. Its rows may have reached the sink's
// destination; a restart re-executes the batch with the same id and rows,
// which an idempotent sink skips or overwrites.
type SinkError struct {
	Sink      int // index in Topology.Output.Sinks
	Partition int32
	BatchID   int64
	Err       error
}

func (e *SinkError) Error() string {
	return fmt.Sprintf("kstate: Topology.Output.Sinks[%d] failed on partition %d batch %d (the batch is not committed; a restart retries it with the same id and rows): %v",
		e.Sink, e.Partition, e.BatchID, e.Err)
}

func (e *SinkError) Unwrap() error { return e.Err }

// engineSink is the engine's sink callback over cfg.Sinks; nil without
// sinks.
func engineSink[K, O any](sinks []Sink[K, O]) func(ctx context.Context, partition int32, batchID int64, keys []K, values []O) error {
	if len(sinks) == 0 {
		return nil
	}
	return func(ctx context.Context, partition int32, batchID int64, keys []K, values []O) error {
		b := SinkBatch[K, O]{Partition: partition, ID: batchID, Rows: make([]SinkRow[K, O], len(keys))}
		for i := range keys {
			b.Rows[i] = SinkRow[K, O]{Key: keys[i], Value: values[i]}
		}
		for i, s := range sinks {
			if err := callSink(ctx, s, b); err != nil {
				return &SinkError{Sink: i, Partition: partition, BatchID: batchID, Err: err}
			}
		}
		return nil
	}
}

func callSink[K, O any](ctx context.Context, s Sink[K, O], b SinkBatch[K, O]) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return s.WriteBatch(ctx, b)
}

// noOutput is the OutputSerde of an App without OutputTopic: rows go to
// the sinks only.
type noOutput[O any] struct{}

func (noOutput[O]) Serialize(O) ([]byte, error) { return nil, nil }
