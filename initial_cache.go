package kstate

import (
	"context"
	"sync"

	"github.com/kstate/kstate/internal/engine"
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
	rows, err := r.cfg.InitialState.rows(ctx, r.cfg.Brokers, r.cfg.KeyCodec)
	return rows, r.partitions, err
}
