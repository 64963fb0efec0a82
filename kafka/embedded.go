package kafka

import (
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

// EmbeddedOptions configures an in-process cluster. The zero value works.
type EmbeddedOptions struct {
	// Partitions of topics created with the broker default (auto-created,
	// or created with Partitions <= 0); default 4.
	Partitions int
	// Topics to create at start, with their partition counts (<= 0:
	// Partitions).
	Topics map[string]int
	// NumBrokers, default 1.
	NumBrokers int
	// BrokerConfigs are broker-level configs (see kfake.BrokerConfigs),
	// e.g. "log.cleaner.backoff.ms" for how often compacted topics are
	// cleaned (default here 30000).
	BrokerConfigs map[string]string
}

// Embedded is an in-process Kafka (franz-go's kfake) listening on
// 127.0.0.1 with random ports. It supports transactions, read_committed,
// consumer groups and compaction, but completes transactions synchronously,
// so it hides races a real broker shows: it is never the only proof.
type Embedded struct {
	c       *kfake.Cluster
	brokers []string
	once    sync.Once
}

// NewEmbedded starts a cluster.
func NewEmbedded(o EmbeddedOptions) (*Embedded, error) {
	if o.Partitions <= 0 {
		o.Partitions = 4
	}
	if o.NumBrokers <= 0 {
		o.NumBrokers = 1
	}
	configs := map[string]string{
		"log.cleaner.backoff.ms": "30000",
	}
	for k, v := range o.BrokerConfigs {
		configs[k] = v
	}
	opts := []kfake.Opt{
		kfake.NumBrokers(o.NumBrokers),
		kfake.DefaultNumPartitions(o.Partitions),
		kfake.BrokerConfigs(configs),
		// Tests use short session timeouts; Kafka's 6s floor would make
		// every failover test slow.
		kfake.GroupMinSessionTimeout(100 * time.Millisecond),
	}
	for topic, n := range o.Topics {
		if n <= 0 {
			n = o.Partitions
		}
		opts = append(opts, kfake.SeedTopics(int32(n), topic))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka: start embedded cluster: %w", err)
	}
	return &Embedded{c: c, brokers: c.ListenAddrs()}, nil
}

// Brokers returns the bootstrap addresses.
func (e *Embedded) Brokers() []string { return append([]string(nil), e.brokers...) }

// Compact compacts every compacted topic now (tests of restore after
// compaction).
func (e *Embedded) Compact() { e.c.Compact() }

// Close stops the cluster. Idempotent.
func (e *Embedded) Close() { e.once.Do(e.c.Close) }
