package kafka

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// WriteTransaction writes recs (each naming its topic and partition) in
// one transaction of a short-lived producer with transactional id txnID,
// and returns the offset of each record. It commits only if every record
// was acknowledged; otherwise it aborts, so read_committed readers see all
// of recs or none. Initialising the producer id fences an earlier producer
// with the same id and aborts its open transaction, so give every writer
// of the same records (e.g. a changelog partition's re-seed) the same id.
func WriteTransaction(ctx context.Context, brokers []string, txnID string, timeout time.Duration, recs []Record) ([]int64, error) {
	return ClientConfig{Brokers: brokers}.WriteTransaction(ctx, txnID, timeout, recs)
}

// WriteTransaction is WriteTransaction with c's TLS, SASL and extra options.
func (c ClientConfig) WriteTransaction(ctx context.Context, txnID string, timeout time.Duration, recs []Record) ([]int64, error) {
	if len(c.Brokers) == 0 {
		return nil, errors.New("kafka: WriteTransaction: no brokers")
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
		kgo.WithLogger(watch),
	)...)
	if err == nil {
		if err = checkGuarantees(cl); err != nil {
			cl.Close()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("kafka: new transactional producer %q: %w", txnID, err)
	}
	defer cl.Close()
	if err := cl.BeginTransaction(); err != nil {
		return nil, fmt.Errorf("kafka: transaction %q: begin: %w", txnID, access{txnID: txnID}.classify(err))
	}
	krs := make([]*kgo.Record, len(recs))
	for i := range recs {
		krs[i] = toKgo(&recs[i])
	}
	offs := make([]int64, len(recs))
	var perr error
	for i, r := range cl.ProduceSync(ctx, krs...) {
		if r.Err != nil && perr == nil {
			err := access{topicOp: "Write", topic: r.Record.Topic, txnID: txnID}.classify(r.Err)
			perr = fmt.Errorf("kafka: transaction %q: produce to topic %q partition %d: %w", txnID, r.Record.Topic, r.Record.Partition, err)
		}
		offs[i] = r.Record.Offset
	}
	commit := kgo.TryCommit
	if perr != nil {
		commit = kgo.TryAbort
	}
	if err := cl.EndTransaction(ctx, commit); err != nil {
		if perr != nil {
			return nil, perr
		}
		return nil, fmt.Errorf("kafka: transaction %q: commit: %w", txnID, access{txnID: txnID}.classify(err))
	}
	if perr != nil {
		return nil, perr
	}
	if watch.seen.Load() {
		return nil, fmt.Errorf("kafka: transaction %q: %w", txnID, ErrCommitNotMade)
	}
	return offs, nil
}
