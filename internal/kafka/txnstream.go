package kafka

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// WriteTransactionSeq is WriteTransaction for records too many to hold at
// once (kstate state rescale): it produces recs as the sequence yields
// them, with at most maxBuffered records in flight (the producer blocks
// until earlier ones are acknowledged), and returns how many it wrote.
// Commit or abort as WriteTransaction: all of recs or none.
func (c ClientConfig) WriteTransactionSeq(ctx context.Context, txnID string, timeout time.Duration, recs iter.Seq[Record]) (int, error) {
	const maxBuffered = 8192
	if len(c.Brokers) == 0 {
		return 0, errors.New("kafka: WriteTransactionSeq: no brokers")
	}
	if timeout <= 0 {
		timeout = DefaultTransactionTimeout
	}
	watch := &emptyAbortWatch{txnID: txnID}
	cl, err := kgo.NewClient(append(c.Opts(),
		kgo.TransactionalID(txnID),
		kgo.TransactionTimeout(timeout),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.MetadataMinAge(clientMetadataMinAge),
		kgo.MaxBufferedRecords(maxBuffered),
		kgo.WithLogger(watch),
	)...)
	if err == nil {
		if err = checkGuarantees(cl); err != nil {
			cl.Close()
		}
	}
	if err != nil {
		return 0, fmt.Errorf("kafka: new transactional producer %q: %w", txnID, err)
	}
	defer cl.Close()
	if err := cl.BeginTransaction(); err != nil {
		return 0, fmt.Errorf("kafka: transaction %q: begin: %w", txnID, access{txnID: txnID}.classify(err))
	}
	var (
		mu   sync.Mutex
		perr error
	)
	failed := func() bool { mu.Lock(); defer mu.Unlock(); return perr != nil }
	n := 0
	for r := range recs {
		if failed() || ctx.Err() != nil {
			break
		}
		// Produce blocks while maxBuffered records are unacknowledged.
		cl.Produce(ctx, toKgo(&r), func(kr *kgo.Record, err error) {
			if err == nil {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if perr == nil {
				err := access{topicOp: "Write", topic: kr.Topic, txnID: txnID}.classify(err)
				perr = fmt.Errorf("kafka: transaction %q: produce to topic %q partition %d: %w", txnID, kr.Topic, kr.Partition, err)
			}
		})
		n++
	}
	ferr := cl.Flush(ctx)
	mu.Lock()
	err = perr
	mu.Unlock()
	if err == nil && ferr != nil {
		err = fmt.Errorf("kafka: transaction %q: flush: %w", txnID, ferr)
	}
	if err == nil && ctx.Err() != nil {
		err = fmt.Errorf("kafka: transaction %q: %w", txnID, ctx.Err())
	}
	commit := kgo.TryCommit
	if err != nil {
		commit = kgo.TryAbort
	}
	if eerr := cl.EndTransaction(context.WithoutCancel(ctx), commit); eerr != nil {
		if err != nil {
			return 0, err
		}
		return 0, fmt.Errorf("kafka: transaction %q: commit: %w", txnID, access{txnID: txnID}.classify(eerr))
	}
	if err != nil {
		return 0, err
	}
	if watch.seen.Load() {
		return 0, fmt.Errorf("kafka: transaction %q: %w", txnID, ErrCommitNotMade)
	}
	return n, nil
}
