package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/kstate/kstate/state"
)

// realClock is time itself (inside a synctest bubble: the bubble's clock).
type realClock struct{ start time.Time }

func (c realClock) Now() time.Time         { return time.Now() }
func (c realClock) Elapsed() time.Duration { return time.Since(c.start) }
func (c realClock) Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// handoverCoordinator is a Coordinator with only what newTask uses; its
// NewTask fails with a lock error until freeAt.
func handoverCoordinator(freeAt time.Duration, opened *int) *Coordinator {
	clk := realClock{start: time.Now()}
	return &Coordinator{
		cfg: CoordinatorConfig{
			RestoreTimeout: 10 * time.Second, MaxBatchDuration: time.Minute,
			NewTask: func(p int32) (TaskHandle, error) {
				if clk.Elapsed() < freeAt {
					return nil, fmt.Errorf("open shard: %w: held", state.ErrLocked)
				}
				*opened++
				return nil, nil
			},
		},
		clock: clk,
		log:   slog.New(slog.DiscardHandler),
	}
}

// A shard still locked by its previous owner (another pipeline that has
// not seen its revoke) is waited for; the wait ends with the restore's
// cancellation, and past its bound the lock error is returned.
func TestNewTaskWaitsForTheShardHandover(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		opened := 0
		c := handoverCoordinator(3*time.Second, &opened)
		start := time.Now()
		if _, err := c.newTask(t.Context(), 0); err != nil || opened != 1 {
			t.Fatalf("newTask: %v, opened %d", err, opened)
		}
		if waited := time.Since(start); waited < 3*time.Second || waited > 3*time.Second+handoverBackoffMax {
			t.Fatalf("waited %v for a shard freed after 3s", waited)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		opened := 0
		c := handoverCoordinator(time.Hour, &opened)
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second) // revoked again meanwhile
		defer cancel()
		if _, err := c.newTask(ctx, 0); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("newTask after cancellation: %v", err)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		opened := 0
		c := handoverCoordinator(time.Hour, &opened)
		start := time.Now()
		_, err := c.newTask(t.Context(), 0)
		if !errors.Is(err, state.ErrLocked) {
			t.Fatalf("newTask of a shard held for good: %v", err)
		}
		if waited, limit := time.Since(start), c.cfg.RestoreTimeout+c.cfg.MaxBatchDuration; waited > limit {
			t.Fatalf("gave up after %v, over the bound %v", waited, limit)
		}
		t.Log(err)
	})
}
