package statereader

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/kstate/kstate/internal/changelogfmt"
	"github.com/kstate/kstate/internal/kafka"
)

// Time travel: the state of a partition as of one of its batches.
//
// A partition's batches that process rows or fire timers have ids 0, 1, 2,
// … (PartitionMeta.BatchID). Batch N's changelog records are one Kafka
// transaction, in key order, and the first of them is the engine metadata
// "engine/batch_id" = N+1 (the stored id of the next batch: meta keys sort
// first and no meta name sorts before it). So the state as of batch N is
// the changelog partition replayed from its start up to, not including,
// the record "engine/batch_id" = N+2 that starts batch N+1 (batches without
// an id that came in between, which only advance offsets or expire TTL
// entries, are included).
//
// Compaction keeps only a key's latest record, so old "engine/batch_id"
// records disappear with the history they delimited. The record of batch
// N (= N+1) is still there exactly when compaction never looked past the
// start of batch N+1, and then the replay gives batch N's state exactly:
// every record compaction removed was replaced by a later one that the
// replay also applies. Batch N is readable when its record is; otherwise
// Open fails with a *BatchNotReadableError, never with later state.

// ErrBatchNotReadable is wrapped by *BatchNotReadableError.
var ErrBatchNotReadable = errors.New("statereader: batch not readable")

// BatchNotReadableError is returned by OpenChangelog with AtBatch when the
// changelog no longer holds the batch's history (compacted away, or the
// changelog starts after it: a rescaled application's changelog starts at
// the batch it was seeded with) or when the partition has not committed
// the batch yet.
type BatchNotReadableError struct {
	Partition int32
	BatchID   int64
	// Oldest is the oldest batch the changelog still holds (-1: none);
	// Latest the partition's last committed batch (-1: none).
	Oldest, Latest int64
}

func (e *BatchNotReadableError) Error() string {
	switch {
	case e.Latest < e.BatchID:
		last := "it has committed no batch yet"
		if e.Latest >= 0 {
			last = fmt.Sprintf("its last committed batch is %d", e.Latest)
		}
		return fmt.Sprintf("statereader: partition %d batch %d is not readable: the partition has not committed it (%s)",
			e.Partition, e.BatchID, last)
	case e.Oldest < 0:
		return fmt.Sprintf("statereader: partition %d batch %d is not readable: the changelog holds no batch history any more (compacted); read the latest state without a batch",
			e.Partition, e.BatchID)
	}
	return fmt.Sprintf("statereader: partition %d batch %d is not readable: the changelog no longer holds it (compacted away, or the changelog starts after it); the oldest readable batch is %d, the latest %d",
		e.Partition, e.BatchID, e.Oldest, e.Latest)
}

func (e *BatchNotReadableError) Unwrap() error { return ErrBatchNotReadable }

// AtBatch makes OpenChangelog read one partition's state as of its batch
// batchID (PartitionMeta.BatchID, the id its sinks received): the state
// that batch committed, like Spark's state reader with batchId (batch ids
// are per partition in kstate, hence the partition). Only the changelog
// has history: OpenStateDir and FromEntries refuse it. A batch whose
// history compaction removed, or not committed yet, fails the open with a
// *BatchNotReadableError.
func AtBatch(partition int32, batchID int64) Option {
	return func(o *options) { o.at = &atBatch{partition, batchID} }
}

type atBatch struct {
	partition int32
	batch     int64
}

func (a *atBatch) check() error {
	switch {
	case a == nil:
		return nil
	case a.partition < 0:
		return fmt.Errorf("statereader: AtBatch: negative partition %d", a.partition)
	case a.batch < 0:
		return fmt.Errorf("statereader: AtBatch: negative batch id %d", a.batch)
	}
	return nil
}

// errNoHistory refuses AtBatch on a source without history.
func errNoHistory(source string) error {
	return fmt.Errorf("statereader: AtBatch reads the changelog (OpenChangelog): %s holds the latest state only", source)
}

// readAtBatch replays r (a changelog partition from its start) into the
// state as of batch a.batch (see above). read is called with the records
// of every fetch.
func readAtBatch(ctx context.Context, r *kafka.PartitionReader, a atBatch, read func(n int)) (map[string][]byte, error) {
	marker := string(changelogfmt.MetaKey(metaNextBatch))
	target := a.batch + 1 // the marker value batch a.batch's records start with
	m := map[string][]byte{}
	first, latest := int64(-1), int64(-1) // marker values seen: the first, and the last - 1
	reached, past := false, false         // the marker of the batch; a marker after it
	for {
		recs, err := r.Next(ctx)
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		if read != nil {
			read(len(recs))
		}
		for _, rec := range recs {
			if len(rec.Key) == 0 || rec.Key[0] == 0xff {
				continue
			}
			if string(rec.Key) == marker && len(rec.Value) == 8 {
				v := int64(binary.BigEndian.Uint64(rec.Value))
				if first < 0 {
					first = v
				}
				latest = max(latest, v-1)
				if v > target {
					if reached {
						return m, nil // batch a.batch+1 starts here
					}
					past = true // not readable: read on for the latest batch only
				}
				reached = reached || (v == target && !past)
			}
			if past {
				continue
			}
			if rec.Value == nil {
				delete(m, string(rec.Key))
			} else {
				m[string(rec.Key)] = rec.Value
			}
		}
	}
	if !reached {
		return nil, &BatchNotReadableError{Partition: a.partition, BatchID: a.batch, Oldest: max(first-1, -1), Latest: latest}
	}
	return m, nil
}
