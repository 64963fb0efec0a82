package kafka

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Producer is a plain idempotent (non-transactional) producer, for test and
// demo input and, later, dead-letter records outside the exactly-once path.
type Producer struct {
	cl *kgo.Client
}

// NewProducer connects to the cluster (lazily: errors show on first use).
func NewProducer(brokers []string) (*Producer, error) {
	return ClientConfig{Brokers: brokers}.NewProducer()
}

// NewProducer is NewProducer with c's TLS, SASL and extra options.
func (c ClientConfig) NewProducer() (*Producer, error) {
	if len(c.Brokers) == 0 {
		return nil, errors.New("kafka: NewProducer: no brokers")
	}
	cl, err := kgo.NewClient(append(c.Opts(),
		kgo.RecordPartitioner(newPartitioner()),
		kgo.MetadataMinAge(clientMetadataMinAge),
	)...)
	if err != nil {
		return nil, fmt.Errorf("kafka: new producer: %w", err)
	}
	return &Producer{cl: cl}, nil
}

// Produce writes recs and waits until all are acknowledged. Partition
// AnyPartition chooses by key; see AnyPartition. Records of one partition
// keep their order.
func (p *Producer) Produce(ctx context.Context, recs ...Record) error {
	if len(recs) == 0 {
		return nil
	}
	krs := make([]*kgo.Record, len(recs))
	for i := range recs {
		krs[i] = toKgo(&recs[i])
	}
	for _, r := range p.cl.ProduceSync(ctx, krs...) {
		if r.Err != nil {
			err := access{topicOp: "Write", topic: r.Record.Topic}.classify(r.Err)
			return fmt.Errorf("kafka: produce to topic %q partition %d: %w", r.Record.Topic, r.Record.Partition, err)
		}
	}
	return nil
}

// Close flushes nothing (Produce is synchronous) and releases the client.
func (p *Producer) Close() { p.cl.Close() }
