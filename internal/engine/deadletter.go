package engine

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/kstate/kstate/internal/shard"
	"github.com/kstate/kstate/serde"
)

// Headers of a dead-letter record, appended to the original record's own
// headers.
const (
	HeaderStage           = "kstate.stage" // StageDecode, StagePartition or StageProcess
	HeaderError           = "kstate.error" // the error's message
	HeaderApplication     = "kstate.application"
	HeaderTime            = "kstate.time" // batch processing time, ms since the epoch (decimal)
	HeaderSourceTopic     = "kstate.source.topic"
	HeaderSourcePartition = "kstate.source.partition" // decimal
	HeaderSourceOffset    = "kstate.source.offset"    // decimal; absent for a timer
	HeaderTimerExpiry     = "kstate.timer.expiry"     // decimal ms; a failed HandleExpiredTimer only
)

// Values of HeaderStage.
const (
	StageDecode    = "decode"    // key or value undecodable, or a nil key
	StagePartition = "partition" // key hashes to another partition
	StageProcess   = "process"   // HandleInputRows or HandleExpiredTimer failed
)

// dlHeaderCount is the number of kstate.* headers of a dead-letter record.
const dlHeaderCount = 7

// deadLetter builds the dead-letter record of input record r: its headers
// are r's followed by the kstate.* headers, in one new slice (r's headers
// themselves are not copied, only the slice that holds them).
func (t *Task[K, I, O]) deadLetter(r *Record, stage string, cause error, nowMs int64) DeadLetter {
	h := make([]Header, 0, len(r.Headers)+dlHeaderCount)
	h = append(h, r.Headers...)
	h = t.appendDLHeaders(h, stage, cause, nowMs, r.Input)
	h = append(h, Header{Key: HeaderSourceOffset, Value: []byte(strconv.FormatInt(r.Offset, 10))})
	return DeadLetter{Key: r.Key, Value: r.Value, TimestampMs: r.TimestampMs, Headers: h}
}

// timerDeadLetter describes a failed timer: the key is the timer's grouping
// key, the value is empty (nil), the timestamp is the timer's expiry.
func (t *Task[K, I, O]) timerDeadLetter(key []byte, expiry int64, cause error, nowMs int64) DeadLetter {
	h := t.appendDLHeaders(make([]Header, 0, dlHeaderCount), StageProcess, cause, nowMs, 0)
	h = append(h, Header{Key: HeaderTimerExpiry, Value: []byte(strconv.FormatInt(expiry, 10))})
	return DeadLetter{Key: key, TimestampMs: expiry, Headers: h}
}

// appendDLHeaders appends the kstate.* headers every dead-letter record
// carries to h.
func (t *Task[K, I, O]) appendDLHeaders(h []Header, stage string, cause error, nowMs int64, input int) []Header {
	return append(h,
		Header{Key: HeaderStage, Value: []byte(stage)},
		Header{Key: HeaderError, Value: []byte(cause.Error())},
		Header{Key: HeaderApplication, Value: []byte(t.cfg.ApplicationID)},
		Header{Key: HeaderTime, Value: []byte(strconv.FormatInt(nowMs, 10))},
		Header{Key: HeaderSourceTopic, Value: []byte(t.topic(input))},
		Header{Key: HeaderSourcePartition, Value: []byte(strconv.FormatInt(int64(t.cfg.Partition), 10))},
	)
}

// badRecord applies OnDecodeError to an undecodable record: the
// DecodeError under Fail, nil after skipping or dead-lettering it. A cause
// wrapping serde.ErrUnavailable is the DecodeError under every policy.
func (t *Task[K, I, O]) badRecord(r *Record, part string, cause error, nowMs int64, res *BatchResult) error {
	de := &DecodeError{Topic: t.topic(r.Input), Partition: t.cfg.Partition, Offset: r.Offset, Part: part, Err: cause}
	if errors.Is(cause, serde.ErrUnavailable) {
		// Not the record's fault (a schema registry down): never skip or
		// dead-letter it; the batch fails and a restart reads it again.
		return de
	}
	c := &t.pend.counters
	switch t.cfg.OnDecodeError {
	case PolicySkip:
		c.DecodeErrors++
		c.Skipped++
		t.log.Warn("skipping an undecodable record", "topic", t.topic(r.Input), "offset", r.Offset, "part", part, "err", cause)
	case PolicyDeadLetter:
		c.DecodeErrors++
		c.DeadLettered++
		res.DeadLetters = append(res.DeadLetters, t.deadLetter(r, StageDecode, de, nowMs))
		t.log.Warn("undecodable record sent to the dead-letter topic", "topic", t.topic(r.Input), "offset", r.Offset, "part", part, "err", cause)
	default:
		return de
	}
	return nil
}

// misrouted applies OnKeyPartition to a record whose key hashes to
// another partition: the error under Fail; under DeadLetter it reports
// handled=true after dead-lettering the record; under Allow the record is
// processed (warned about once per task).
func (t *Task[K, I, O]) misrouted(r *Record, nowMs int64, res *BatchResult) (handled bool, err error) {
	t.pend.counters.KeyPartitionMismatches++
	cause := fmt.Errorf("%w: it hashes to partition %d", ErrKeyPartition, r.KeyPartition)
	switch t.cfg.OnKeyPartition {
	case PolicyAllow:
		if !t.warnedMismatch {
			t.warnedMismatch = true
			t.log.Warn(fmt.Sprintf("input record key %s hashes (murmur2, Kafka's default partitioner) to partition %d but was read from partition %d: "+
				"its state and timers live on partition %d, where initial state of the key does not look, and records of the key on partition %d get separate state. "+
				"The producer does not partition with murmur2: librdkafka clients (kcat, confluent-kafka-go/python) default to crc32 - set partitioner=murmur2_random "+
				"(kcat: -X topic.partitioner=murmur2_random), or set OnKeyPartitionMismatch to KeyPartitionFail or KeyPartitionDeadLetter. "+
				"Logged once per partition; the kstate_key_partition_mismatches_total counter counts them all",
				quoteKey(r.Key), r.KeyPartition, t.cfg.Partition, t.cfg.Partition, r.KeyPartition),
				"topic", t.topic(r.Input), "offset", r.Offset, "key_partition", r.KeyPartition)
		}
		return false, nil
	case PolicyDeadLetter:
		t.pend.counters.DeadLettered++
		res.DeadLetters = append(res.DeadLetters, t.deadLetter(r, StagePartition, cause, nowMs))
		t.log.Warn("record whose key hashes to another partition sent to the dead-letter topic", "topic", t.topic(r.Input), "offset", r.Offset, "key_partition", r.KeyPartition)
		return true, nil
	default:
		return false, &DecodeError{Topic: t.topic(r.Input), Partition: t.cfg.Partition, Offset: r.Offset, Part: "key", Err: cause}
	}
}

// savepoint starts a handler call that may be discarded: under
// OnProcessingError DeadLetter it marks the shard and the output buffer.
type savepoint struct {
	on      bool
	shard   shard.Savepoint
	outputs int
	sink    int // len of the sink's rows (main output only)
}

func (t *Task[K, I, O]) savepoint(res *BatchResult) (savepoint, error) {
	if t.cfg.OnProcessingError != PolicyDeadLetter {
		return savepoint{}, nil
	}
	sp, err := t.shard.Savepoint()
	if err != nil {
		return savepoint{}, fmt.Errorf("partition %d: %w", t.cfg.Partition, err)
	}
	return savepoint{on: true, shard: sp, outputs: len(res.Outputs), sink: len(t.sinkKeys)}, nil
}

// discard drops everything the failed call did: its state and timer
// changes and its outputs.
func (t *Task[K, I, O]) discard(sp savepoint, res *BatchResult) error {
	if err := t.shard.RollbackTo(sp.shard); err != nil {
		return fmt.Errorf("partition %d: discard a failed key's changes: %w", t.cfg.Partition, err)
	}
	clear(res.Outputs[sp.outputs:])
	res.Outputs = res.Outputs[:sp.outputs]
	if t.hasSink() {
		t.sinkKeys, t.sinkValues = t.sinkKeys[:sp.sink], t.sinkValues[:sp.sink]
	}
	return nil
}

// deserialize runs a codec, turning its panic into an error so that a
// poison record meets the decode policy instead of failing the batch.
func deserialize[T any](fn func([]byte) (T, error), b []byte) (v T, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("deserializer panicked: %v", r)
		}
	}()
	return fn(b)
}

// quoteKey quotes a record key for a log line, cut at 64 bytes.
func quoteKey(k []byte) string {
	if len(k) > 64 {
		return fmt.Sprintf("%q... (%d bytes)", k[:64], len(k))
	}
	return fmt.Sprintf("%q", k)
}
