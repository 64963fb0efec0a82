package kafka

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kstate/kstate/changelog"
)

// partFetcher reads one partition with raw read_committed Fetch requests,
// from pos up to end.
//
// Why not a kgo consumer: a consumer drops aborted records and transaction
// markers without telling where it is, so a reader whose remaining records
// are all markers or aborted could not know it reached the end. Here every
// response goes through kgo.ProcessFetchPartition, which returns the offset
// after the last batch it looked at — control and aborted batches included —
// so the position is exact.
type partFetcher struct {
	cl        *kgo.Client
	adm       *kadm.Client
	topic     string
	topicID   kadm.TopicID
	partition int32
	leader    int32

	pos, end int64
	decomp   kgo.Decompressor
	maxBytes int32 // per fetch; 0: fetchPartMaxBytes
}

const (
	fetchMaxWait       = 500 * time.Millisecond
	fetchPartMaxBytes  = 8 << 20
	fetchRetryAttempts = 20
)

func newPartFetcher(ctx context.Context, cl *kgo.Client, adm *kadm.Client, topic string, partition int32) (*partFetcher, error) {
	f := &partFetcher{cl: cl, adm: adm, topic: topic, partition: partition, decomp: kgo.DefaultDecompressor()}
	if err := f.refreshMetadata(ctx); err != nil {
		return nil, err
	}
	return f, nil
}

func (f *partFetcher) refreshMetadata(ctx context.Context) error {
	td, err := describeTopic(ctx, f.adm, f.topic)
	if err != nil {
		return err
	}
	pd, ok := td.Partitions[f.partition]
	if !ok {
		return fmt.Errorf("kafka: topic %q has no partition %d (it has %d)", f.topic, f.partition, len(td.Partitions))
	}
	f.topicID, f.leader = td.ID, pd.Leader
	return nil
}

// next fetches once (retrying transient errors) and returns the records
// below end; it may return none while still advancing pos. done reports
// pos >= end.
func (f *partFetcher) next(ctx context.Context) (recs []Record, done bool, err error) {
	krecs, done, err := f.nextKgo(ctx)
	if err != nil || len(krecs) == 0 {
		return nil, done, err
	}
	recs = make([]Record, len(krecs)) // one allocation, not log2(n) growths of a ~200k-record fetch
	for i, r := range krecs {
		recs[i] = fromKgo(r)
	}
	return recs, done, nil
}

// nextChangelog is next for the restore path: the fetched records go
// straight into changelog records (key, value, offset), one conversion
// instead of Record → engine message → changelog record. Key and Value
// alias the fetch's decoded buffers, which are never reused.
func (f *partFetcher) nextChangelog(ctx context.Context) (recs []changelog.Record, done bool, err error) {
	krecs, done, err := f.nextKgo(ctx)
	if err != nil || len(krecs) == 0 {
		return nil, done, err
	}
	recs = make([]changelog.Record, len(krecs))
	for i, r := range krecs {
		recs[i] = changelog.Record{Key: r.Key, Value: r.Value, Offset: r.Offset, TimestampMs: r.Timestamp.UnixMilli()}
	}
	return recs, done, nil
}

// nextKgo fetches once and returns franz-go's records in [pos, end),
// advancing pos past everything the fetch covered (markers and aborted
// records included).
func (f *partFetcher) nextKgo(ctx context.Context) (recs []*kgo.Record, done bool, err error) {
	if f.pos >= f.end {
		return nil, true, nil
	}
	rp, err := f.fetch(ctx)
	if err != nil {
		return nil, false, err
	}
	fp, nextOffset := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{
		Offset:         f.pos,
		IsolationLevel: kgo.ReadCommitted(),
		Topic:          f.topic,
		Partition:      f.partition,
	}, rp, f.decomp, nil)
	if fp.Err != nil {
		return nil, false, fmt.Errorf("kafka: decode topic %q partition %d at offset %d: %w", f.topic, f.partition, f.pos, fp.Err)
	}
	recs = fp.Records
	for i, r := range recs {
		if r.Offset < f.pos || r.Offset >= f.end { // rare: keep only [pos, end), in a copy
			kept := slices.Clone(recs[:i])
			for _, r := range recs[i+1:] {
				if r.Offset >= f.pos && r.Offset < f.end {
					kept = append(kept, r)
				}
			}
			recs = kept
			break
		}
	}
	switch {
	case nextOffset > f.pos:
		f.pos = min(nextOffset, f.end)
	case len(rp.RecordBatches) == 0 && rp.LastStableOffset >= f.end:
		// A read_committed fetch below the LSO that returns no batch at
		// all means nothing (not even a marker) is left before the LSO:
		// the rest of the range was compacted away.
		f.pos = f.end
	}
	return recs, f.pos >= f.end, nil
}

// fetch sends one Fetch for pos to the partition leader, refreshing the
// leader and retrying on retryable errors.
func (f *partFetcher) fetch(ctx context.Context) (*kmsg.FetchResponseTopicPartition, error) {
	var lastErr error
	for attempt := 0; attempt < fetchRetryAttempts; attempt++ {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("kafka: fetch topic %q partition %d at offset %d: %w (last error: %v)", f.topic, f.partition, f.pos, ctx.Err(), lastErr)
			case <-time.After(backoff(attempt)):
			}
			if err := f.refreshMetadata(ctx); err != nil && !errors.Is(err, ErrTopicNotFound) {
				lastErr = err
				continue
			}
		}
		rp, err := f.fetchOnce(ctx)
		if err == nil {
			return rp, nil
		}
		if errors.Is(err, kerr.OffsetOutOfRange) {
			return nil, fmt.Errorf("%w: topic %q partition %d offset %d: %w", ErrOffsetOutOfRange, f.topic, f.partition, f.pos, err)
		}
		if ctx.Err() != nil || !isRetryableFetchErr(err) {
			err = access{topicOp: "Read", topic: f.topic}.classify(err)
			return nil, fmt.Errorf("kafka: fetch topic %q partition %d at offset %d: %w", f.topic, f.partition, f.pos, err)
		}
		lastErr = err
	}
	return nil, fmt.Errorf("kafka: fetch topic %q partition %d at offset %d: giving up after %d attempts: %w", f.topic, f.partition, f.pos, fetchRetryAttempts, lastErr)
}

func (f *partFetcher) fetchOnce(ctx context.Context) (*kmsg.FetchResponseTopicPartition, error) {
	if f.leader < 0 {
		return nil, kerr.LeaderNotAvailable
	}
	req := kmsg.NewPtrFetchRequest()
	req.MaxWaitMillis = int32(fetchMaxWait / time.Millisecond)
	req.MinBytes = 1
	maxBytes := f.maxBytes
	if maxBytes <= 0 {
		maxBytes = fetchPartMaxBytes
	}
	req.MaxBytes = maxBytes
	req.IsolationLevel = 1 // read_committed
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = f.topic     // Fetch v0-12
	rt.TopicID = f.topicID // Fetch v13+
	rpart := kmsg.NewFetchRequestTopicPartition()
	rpart.Partition = f.partition
	rpart.FetchOffset = f.pos
	rpart.PartitionMaxBytes = maxBytes
	rt.Partitions = append(rt.Partitions, rpart)
	req.Topics = append(req.Topics, rt)

	kresp, err := f.cl.Broker(int(f.leader)).Request(ctx, req)
	if err != nil {
		return nil, err
	}
	resp := kresp.(*kmsg.FetchResponse)
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return nil, err
	}
	for i := range resp.Topics {
		for j := range resp.Topics[i].Partitions {
			rp := &resp.Topics[i].Partitions[j]
			if rp.Partition != f.partition {
				continue
			}
			if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
				return nil, err
			}
			return rp, nil
		}
	}
	return nil, fmt.Errorf("fetch response has no partition %d", f.partition)
}

// isRetryableFetchErr: leader moves, a topic id not yet known to the
// broker, connection drops.
func isRetryableFetchErr(err error) bool {
	if errors.Is(err, kgo.ErrClientClosed) || isAuthErr(err) {
		return false
	}
	return kerr.IsRetriable(err) ||
		errors.Is(err, kerr.UnknownTopicID) ||
		errors.Is(err, kerr.FencedLeaderEpoch) ||
		errors.Is(err, kerr.UnknownLeaderEpoch) ||
		errors.Is(err, kerr.InconsistentTopicID) ||
		!isKafkaErr(err) // network and client errors
}

func isKafkaErr(err error) bool {
	var ke *kerr.Error
	return errors.As(err, &ke)
}

func backoff(attempt int) time.Duration {
	return min(time.Duration(attempt)*50*time.Millisecond, time.Second)
}

// offsetsOf lists one partition's offsets: log start, LSO and high
// watermark. Only that partition's answer counts, and a retriable one
// (NOT_LEADER_FOR_PARTITION from a broker that has the metadata of a topic
// created a moment ago but does not lead the partition yet) is retried like
// a fetch.
func offsetsOf(ctx context.Context, adm *kadm.Client, topic string, partition int32) (start, stable, high int64, err error) {
	get := func(list func(context.Context, ...string) (kadm.ListedOffsets, error)) (int64, error) {
		for attempt := 1; ; attempt++ {
			lo, err := list(ctx, topic)
			if err == nil {
				o, ok := lo[topic][partition]
				if !ok {
					return 0, fmt.Errorf("kafka: topic %q has no partition %d", topic, partition)
				}
				if err = o.Err; err == nil {
					return o.Offset, nil
				}
			}
			if ctx.Err() != nil || !kerr.IsRetriable(err) || attempt >= fetchRetryAttempts {
				if errors.Is(err, kerr.UnknownTopicOrPartition) {
					return 0, fmt.Errorf("%w: %q: %w", ErrTopicNotFound, topic, err)
				}
				return 0, fmt.Errorf("kafka: list offsets of topic %q partition %d: %w", topic, partition, access{topic: topic}.classify(err))
			}
			select {
			case <-ctx.Done():
			case <-time.After(backoff(attempt)):
			}
		}
	}
	if start, err = get(adm.ListStartOffsets); err != nil {
		return
	}
	if stable, err = get(adm.ListCommittedOffsets); err != nil {
		return
	}
	high, err = get(adm.ListEndOffsets)
	return
}
