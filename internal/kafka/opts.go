package kafka

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// NewAdminOpts is NewAdmin with extra client options (TLS, SASL, …)
// appended to the tool defaults: the seam for secured clusters used by the
// state reader and the reset tool.
func NewAdminOpts(brokers []string, extra ...kgo.Opt) (*Admin, error) {
	if len(brokers) == 0 {
		return nil, errors.New("kafka: NewAdmin: no brokers")
	}
	cl, err := kgo.NewClient(append(toolOpts(brokers), extra...)...)
	if err != nil {
		return nil, fmt.Errorf("kafka: new admin client: %w", err)
	}
	return &Admin{cl: cl, adm: kadm.NewClient(cl)}, nil
}

// NewPartitionReaderOpts is NewPartitionReader with extra client options
// appended to the tool defaults.
func NewPartitionReaderOpts(ctx context.Context, brokers []string, topic string, partition int32, from int64, extra ...kgo.Opt) (*PartitionReader, error) {
	if from < 0 {
		return nil, fmt.Errorf("kafka: reader of topic %q partition %d: negative start offset %d", topic, partition, from)
	}
	cl, err := kgo.NewClient(append(toolOpts(brokers), extra...)...)
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

// Kadm exposes the admin's kadm client for operations this package does not
// wrap (group descriptions, topic deletion) in the reset tool.
func (a *Admin) Kadm() *kadm.Client { return a.adm }
