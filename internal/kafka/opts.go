package kafka

import (
	"context"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// NewAdminOpts is NewAdmin with extra client options (TLS, SASL, …): the
// seam for secured clusters used by the state reader and the reset tool.
func NewAdminOpts(brokers []string, extra ...kgo.Opt) (*Admin, error) {
	return ClientConfig{Brokers: brokers, Extra: extra}.NewAdmin()
}

// NewPartitionReaderOpts is NewPartitionReader with extra client options.
func NewPartitionReaderOpts(ctx context.Context, brokers []string, topic string, partition int32, from int64, extra ...kgo.Opt) (*PartitionReader, error) {
	return ClientConfig{Brokers: brokers, Extra: extra}.NewPartitionReader(ctx, topic, partition, from)
}

// Kadm exposes the admin's kadm client for operations this package does not
// wrap (group descriptions, topic deletion) in the reset tool.
func (a *Admin) Kadm() *kadm.Client { return a.adm }
