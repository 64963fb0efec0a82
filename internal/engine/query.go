package engine

import (
	"errors"
	"fmt"

	"github.com/kstate/kstate/internal/murmur2"
)

// ErrNotOwned: a live query asked for a partition this instance does not
// own (or that it has not restored yet).
var ErrNotOwned = errors.New("partition not owned by this instance")

// ErrNotReady: a live query came before Run learned the input's layout.
var ErrNotReady = errors.New("not running yet")

// KeyPartition returns the input partition of a grouping key (murmur2, as
// Kafka's default partitioner), once Run knows the input's partition count.
func (c *Coordinator) KeyPartition(key []byte) (int32, error) {
	c.mu.Lock()
	n := c.mu.partitions
	c.mu.Unlock()
	if n <= 0 {
		return 0, ErrNotReady
	}
	return murmur2.Partition(key, n), nil
}

// ReadCommitted reads partition p's committed state (shard.ReadCommitted):
// from any goroutine, concurrently with batches. It fails with ErrNotOwned
// unless p is assigned to this instance and restored; a partition revoked
// while it reads makes it fail with state.ErrClosed.
func (c *Coordinator) ReadCommitted(p int32, lower, upper []byte, each func(key, value []byte) bool) error {
	c.mu.Lock()
	s := c.mu.slots[p]
	var t TaskHandle
	if s != nil && s.ready && !s.orphaned {
		t = s.task
	}
	c.mu.Unlock()
	if t == nil {
		return fmt.Errorf("partition %d: %w", p, ErrNotOwned)
	}
	return t.Shard().ReadCommitted(lower, upper, each)
}

// Owns reports whether partition p is assigned to this instance and
// restored (ReadCommitted answers for it).
func (c *Coordinator) Owns(p int32) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.mu.slots[p]
	return s != nil && s.ready && !s.orphaned && s.task != nil
}

// Partitions is the input's partition count once Run learned it (0 before).
func (c *Coordinator) Partitions() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.partitions
}
