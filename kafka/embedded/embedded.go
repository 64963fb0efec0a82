// Package embedded runs an in-process Kafka cluster (franz-go's kfake) for
// demos and fast tests. It lives in its own package so that a production
// binary, which never imports it, does not link the fake broker.
//
// The cluster supports transactions, read_committed, consumer groups and
// compaction, but it completes transactions synchronously and so hides
// timing races that a real broker shows: it is a fast stand-in, never the
// only proof. For tests against a real broker use package kafka/kafkatest.
package embedded

import (
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

// Options configures a cluster. The zero value works.
type Options struct {
	// Partitions of topics created with the broker default (auto-created,
	// or created with Partitions <= 0); default 4.
	Partitions int
	// Topics to create at start, with their partition counts (<= 0:
	// Partitions).
	Topics map[string]int
	// NumBrokers, default 1.
	NumBrokers int
	// BrokerConfigs are broker-level configs, e.g. "log.cleaner.backoff.ms"
	// for how often compacted topics are cleaned (default here 30000).
	BrokerConfigs map[string]string
}

// Cluster is an in-process Kafka listening on 127.0.0.1 with random ports.
type Cluster struct {
	c       *kfake.Cluster
	brokers []string
	once    sync.Once
}

// Start starts a cluster. Close it when done.
func Start(o Options) (*Cluster, error) {
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
		return nil, fmt.Errorf("embedded: start cluster: %w", err)
	}
	return &Cluster{c: c, brokers: c.ListenAddrs()}, nil
}

// Brokers returns the bootstrap addresses.
func (e *Cluster) Brokers() []string { return append([]string(nil), e.brokers...) }

// Compact compacts every compacted topic now (tests of restore after
// compaction).
func (e *Cluster) Compact() { e.c.Compact() }

// Close stops the cluster. Idempotent.
func (e *Cluster) Close() { e.once.Do(e.c.Close) }
