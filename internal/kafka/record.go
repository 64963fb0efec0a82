package kafka

import (
	"context"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstate/kstate/internal/engine"
	"github.com/kstate/kstate/internal/murmur2"
)

// AnyPartition in Record.Partition asks the producer to choose the partition
// from the key, with Kafka's default murmur2 hash (the same choice as the Java
// client, so keys land where other Kafka tools expect them). Records with a
// nil key are spread over partitions. Any value >= 0 is used as is.
//
// Note the zero value of Partition is partition 0, not AnyPartition.
const AnyPartition int32 = -1

// Header is one record header: processor.Header, the one header type of
// the module (engine.Header is the same type).
type Header = engine.Header

// Record is a Kafka record: the engine's engine.Message, which the session
// and the readers fill straight from franz-go's records (fromKgo, the one
// conversion on the input path) and the producers convert back (setKgo).
// Partition AnyPartition chooses the partition by key when producing;
// Offset is set by the broker and ignored when producing; a zero Timestamp
// when producing is the producer's clock.
type Record = engine.Message

// Partition names one topic partition.
type Partition struct {
	Topic     string
	Partition int32
}

// fromKgo converts a fetched record: its headers are copied once, from
// franz-go's kgo.RecordHeader into the module's Header, and then pass as
// they are to the engine, the processor's Record and dead-letter records.
func fromKgo(r *kgo.Record) Record {
	out := Record{
		Topic:     r.Topic,
		Partition: r.Partition,
		Offset:    r.Offset,
		Key:       r.Key,
		Value:     r.Value,
		Timestamp: r.Timestamp,
	}
	if len(r.Headers) > 0 {
		out.Headers = make([]Header, len(r.Headers))
		for i, h := range r.Headers {
			out.Headers[i] = Header{Key: h.Key, Value: h.Value}
		}
	}
	return out
}

func toKgo(r *Record) *kgo.Record {
	out := &kgo.Record{}
	setKgo(out, r)
	return out
}

// toKgos converts recs into one array of kgo.Records (one allocation per
// produce call, not one per record: issue #13). franz-go owns each element
// until its promise ran; the array is never reused.
func toKgos(recs []Record) []kgo.Record {
	out := make([]kgo.Record, len(recs))
	for i := range recs {
		setKgo(&out[i], &recs[i])
	}
	return out
}

// setKgo sets a zero kgo.Record to r.
func setKgo(out *kgo.Record, r *Record) {
	out.Topic, out.Partition, out.Key, out.Value, out.Timestamp = r.Topic, r.Partition, r.Key, r.Value, r.Timestamp
	if len(r.Headers) > 0 {
		out.Headers = make([]kgo.RecordHeader, len(r.Headers))
		for i, h := range r.Headers {
			out.Headers[i] = kgo.RecordHeader{Key: h.Key, Value: h.Value}
		}
	}
}

// partitioner honours an explicit Record.Partition, hashes a non-nil key
// like Kafka's default partitioner (package murmur2, the project's one
// implementation) and spreads nil keys with kgo's sticky partitioner (one
// partition per batch).
type partitioner struct{ sticky kgo.Partitioner }

func newPartitioner() kgo.Partitioner {
	return partitioner{sticky: kgo.StickyKeyPartitioner(nil)}
}

func (p partitioner) ForTopic(topic string) kgo.TopicPartitioner {
	return &topicPartitioner{sticky: p.sticky.ForTopic(topic)}
}

type topicPartitioner struct{ sticky kgo.TopicPartitioner }

func (p *topicPartitioner) RequiresConsistency(r *kgo.Record) bool {
	return r.Partition >= 0 || r.Key != nil || p.sticky.RequiresConsistency(r)
}

// Partition returns an index among n partitions; an explicit partition >= n
// is returned as is and kgo fails that record with a clear error.
func (p *topicPartitioner) Partition(r *kgo.Record, n int) int {
	if r.Partition >= 0 {
		return int(r.Partition)
	}
	if r.Key != nil {
		return int(murmur2.Partition(r.Key, n))
	}
	return p.sticky.Partition(r, n)
}

// OnNewBatch lets the sticky part of the key partitioner move nil-key
// records to another partition once a batch is full.
func (p *topicPartitioner) OnNewBatch() {
	if nb, ok := p.sticky.(kgo.TopicPartitionerOnNewBatch); ok {
		nb.OnNewBatch()
	}
}

// kgoLogger bridges franz-go's log to slog at Warn and above only: the
// client's Info and Debug lines (dozens per broker restart) are its own
// business, its warnings and errors are the operator's.
type kgoLogger struct{ l *slog.Logger }

func (l kgoLogger) Level() kgo.LogLevel { return kgo.LogLevelWarn }

func (l kgoLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	lvl := slog.LevelWarn
	if level == kgo.LogLevelError {
		lvl = slog.LevelError
	}
	l.l.Log(context.Background(), lvl, "franz-go: "+msg, keyvals...)
}
