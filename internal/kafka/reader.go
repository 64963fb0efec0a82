package kafka

import (
	"context"
	"fmt"
	"io"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstate/kstate/changelog"
)

// PartitionReader reads one partition read_committed, from a start offset
// up to the end captured when it was opened: the last stable offset (LSO),
// i.e. everything committed by then. It is the changelog restore path.
//
// Position is exact even where the log holds no visible record: it moves
// past transaction markers and aborted records, so a restore whose tail is a
// commit marker or an aborted transaction terminates, and the position
// stored with the restored state is where the next restore must start.
type PartitionReader struct {
	cl     *kgo.Client
	shared bool // cl belongs to an Admin: Close leaves it open
	f      *partFetcher
}

// maxNoProgress bounds fetches that return batches but do not move the
// position (should never happen; guards against a spin).
const maxNoProgress = 5

// NewPartitionReader opens a reader of topic/partition starting at from.
//
// From 0 means "everything": the reader starts at the log start offset.
// If from lies beyond the LSO but within the log (our own committed records
// past another producer's still-open transaction), the reader is at its end
// at once. If a non-zero from lies below the log start or beyond the high
// watermark, the error wraps ErrOffsetOutOfRange: the stored offset does not
// belong to this topic's log any more (records deleted by retention or
// DeleteRecords, topic recreated); wipe the state and read from 0.
// (Real Kafka's compaction never moves the log start; kfake's does.)
func NewPartitionReader(ctx context.Context, brokers []string, topic string, partition int32, from int64) (*PartitionReader, error) {
	return ClientConfig{Brokers: brokers}.NewPartitionReader(ctx, topic, partition, from)
}

// NewPartitionReader is NewPartitionReader with c's TLS, SASL and extra
// options.
func (c ClientConfig) NewPartitionReader(ctx context.Context, topic string, partition int32, from int64) (*PartitionReader, error) {
	if from < 0 {
		return nil, fmt.Errorf("kafka: reader of topic %q partition %d: negative start offset %d", topic, partition, from)
	}
	cl, err := kgo.NewClient(c.toolOpts()...)
	if err != nil {
		return nil, fmt.Errorf("kafka: reader of topic %q partition %d: %w", topic, partition, err)
	}
	r, err := openReader(ctx, cl, topic, partition, from)
	if err != nil {
		cl.Close()
		return nil, err
	}
	return r, nil
}

// NewPartitionReader is NewPartitionReader on the Admin's client, shared by
// every reader it opens (and by the Admin's own requests) instead of a new
// client per reader: readers issue their own fetch requests and keep no
// state in the client, and the client is safe for concurrent use. Close the
// readers before the Admin.
func (a *Admin) NewPartitionReader(ctx context.Context, topic string, partition int32, from int64) (*PartitionReader, error) {
	if from < 0 {
		return nil, fmt.Errorf("kafka: reader of topic %q partition %d: negative start offset %d", topic, partition, from)
	}
	r, err := openReader(ctx, a.cl, topic, partition, from)
	if err != nil {
		return nil, err
	}
	r.shared = true
	return r, nil
}

func openReader(ctx context.Context, cl *kgo.Client, topic string, partition int32, from int64) (*PartitionReader, error) {
	adm := kadm.NewClient(cl)
	f, err := newPartFetcher(ctx, cl, adm, topic, partition)
	if err != nil {
		return nil, err
	}
	start, stable, high, err := offsetsOf(ctx, adm, topic, partition)
	if err != nil {
		return nil, err
	}
	if from == 0 {
		from = start // an empty shard restores whatever the log still holds
	}
	if from < start || from > high {
		return nil, fmt.Errorf("%w: topic %q partition %d: start offset %d is outside the log [%d, %d]",
			ErrOffsetOutOfRange, topic, partition, from, start, high)
	}
	f.pos, f.end = from, max(stable, from)
	f.maxBytes = readerFetchBytes
	return &PartitionReader{cl: cl, f: f}, nil
}

// readerFetchBytes is a PartitionReader's fetch size (ReadAll's is
// fetchPartMaxBytes). Smaller than one partition's changelog, so that a
// restore applies one fetch while it reads the next (restore.Restore reads
// one chunk ahead): with 8 MiB, one fetch held a whole ~220k-record
// partition and fetching, decoding and applying ran one after the other.
// 1 and 2 MiB measured alike (TestMeasureRestore, docs/benchmarks/history.md,
// "Restore: fewer conversions"); 2 MiB makes half the requests. A variable
// for that measurement.
var readerFetchBytes int32 = 2 << 20

// Next returns the next records (at least one), or io.EOF once the
// position reached End.
func (r *PartitionReader) Next(ctx context.Context) ([]Record, error) {
	return nextNonEmpty(ctx, r, r.f.next)
}

// NextChangelog is Next returning changelog records (key, value, offset:
// the restore path's type) converted once from the fetched records. Their
// Key and Value are never reused by the reader.
func (r *PartitionReader) NextChangelog(ctx context.Context) ([]changelog.Record, error) {
	return nextNonEmpty(ctx, r, r.f.nextChangelog)
}

// nextNonEmpty calls next until it returns records, io.EOF at the end, or
// fails after maxNoProgress fetches that did not move the position.
func nextNonEmpty[T any](ctx context.Context, r *PartitionReader, next func(context.Context) ([]T, bool, error)) ([]T, error) {
	for stuck := 0; ; {
		before := r.f.pos
		recs, done, err := next(ctx)
		if err != nil {
			return nil, err
		}
		if len(recs) > 0 {
			return recs, nil
		}
		if done {
			return nil, io.EOF
		}
		if r.f.pos == before {
			if stuck++; stuck >= maxNoProgress {
				return nil, fmt.Errorf("kafka: topic %q partition %d: no progress at offset %d (end %d)", r.f.topic, r.f.partition, r.f.pos, r.f.end)
			}
		} else {
			stuck = 0
		}
	}
}

// Position is the next offset to read: after the last returned record, or
// further when markers or aborted records followed it.
func (r *PartitionReader) Position() int64 { return r.f.pos }

// End is the LSO captured at open (or the start offset, if larger).
func (r *PartitionReader) End() int64 { return r.f.end }

// Close releases the client, unless it is an Admin's.
func (r *PartitionReader) Close() {
	if !r.shared {
		r.cl.Close()
	}
}

// ReadView reads r to its end into the compaction view of a changelog
// partition: the last value of each key, a tombstone deleting its key.
// Records without a key, or whose key starts with 0xff (outside the
// changelog's key spaces), are skipped. read, if not nil, is called with
// the number of records of every fetch (progress). An error is Next's.
func (r *PartitionReader) ReadView(ctx context.Context, read func(n int)) (map[string][]byte, error) {
	m := map[string][]byte{}
	for {
		recs, err := r.Next(ctx)
		if err == io.EOF {
			return m, nil
		}
		if err != nil {
			return nil, err
		}
		for _, rec := range recs {
			if len(rec.Key) == 0 || rec.Key[0] == 0xff {
				continue
			}
			if rec.Value == nil {
				delete(m, string(rec.Key))
			} else {
				m[string(rec.Key)] = rec.Value
			}
		}
		if read != nil {
			read(len(recs))
		}
	}
}
