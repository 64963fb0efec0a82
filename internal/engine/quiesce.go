package engine

import "context"

// WaitRestores waits until the restore goroutine of every partition
// assigned now has returned (its task handed over, or its error reported
// to the loop), or ctx ends. A test driver calls it while the loop is
// parked in Poll, to know what the next poll will promote without
// sleeping.
func (c *Coordinator) WaitRestores(ctx context.Context) error {
	c.mu.Lock()
	done := make([]chan struct{}, 0, len(c.mu.slots))
	for _, s := range c.mu.slots {
		done = append(done, s.done)
	}
	c.mu.Unlock()
	for _, ch := range done {
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}
