package kstate

import (
	"context"
	"fmt"
	"sync"

	"github.com/kstate/kstate/internal/engine"
	"github.com/kstate/kstate/internal/initial"
	"github.com/kstate/kstate/internal/kafka"
)

// initialCache loads the initial state once per Run, when the first
// partition on its first run needs it, and routes the rows to partitions
// with Kafka's default partitioner. Restore goroutines call it concurrently.
type initialCache[K any] struct {
	mu     sync.Mutex
	loaded bool
	byPart map[int32][]engine.InitialRow[K]
}

func (c *initialCache[K]) forPartition(ctx context.Context, r interface {
	loadInitial(ctx context.Context) ([]engine.InitialRow[K], int, error)
}, p int32) ([]engine.InitialRow[K], error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.loaded {
		rows, n, err := r.loadInitial(ctx)
		if err != nil {
			return nil, err
		}
		c.byPart = make(map[int32][]engine.InitialRow[K])
		for _, row := range rows {
			q := engine.PartitionFor(row.KeyBytes, n)
			c.byPart[q] = append(c.byPart[q], row)
		}
		c.loaded = true
	}
	return c.byPart[p], nil
}

func (r *runner[K, I, O]) loadInitial(ctx context.Context) ([]engine.InitialRow[K], int, error) {
	read := func(ctx context.Context, topic string) ([]initial.Record, error) {
		recs, err := kafka.ReadAll(ctx, r.cfg.Brokers, topic)
		out := make([]initial.Record, len(recs))
		for i, rec := range recs {
			out[i] = initial.Record{Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset, Key: rec.Key, Value: rec.Value}
		}
		return out, err
	}
	rows, err := r.cfg.InitialState.Rows(ctx, read, r.cfg.KeySerde)
	if err != nil {
		return nil, 0, fmt.Errorf("kstate: %w", err)
	}
	return rows, r.partitions, nil
}
