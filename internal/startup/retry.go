// Package startup is kstate's one start-up retry: while Kafka is
// unreachable at start (a pod started before its brokers), a start-up call
// is retried with a doubling backoff, each retry logged at Warn with
// WarnMessage, until the start-up deadline. The root's pipeline count, the
// coordinator's topic checks and group join, and the session's producer
// init all retry through Retry.Do; each keeps only what differs: which
// errors are retried, how the deadline is read, its clock, and the error
// it returns when it gives up.
package startup

import (
	"context"
	"time"
)

// Backoff between start-up retries: BackoffMin, doubling up to the cap
// (Retry.Max, default BackoffMax).
const (
	BackoffMin = 100 * time.Millisecond
	BackoffMax = 5 * time.Second
)

// WarnMessage is the message of the Warn logged before each retry.
const WarnMessage = "Kafka unreachable at start-up: retrying"

// Outcome says how Retry.Do ended.
type Outcome int

const (
	// Done: the call succeeded (nil error) or failed with an error that
	// is not retried.
	Done Outcome = iota
	// Expired: the call kept failing with retried errors and waiting for
	// the next retry would pass the deadline; the error is the last call's.
	Expired
	// Interrupted: the wait before a retry was cut short (ctx ended); the
	// error is the wait's.
	Interrupted
)

// Retry is the policy of one start-up call. Unreachable, Expired and
// Sleep are required.
type Retry struct {
	// Max caps the backoff. Zero: BackoffMax.
	Max time.Duration
	// Unreachable reports whether err is Kafka being unreachable, which
	// is retried.
	Unreachable func(err error) bool
	// Expired reports whether waiting delay before the next try would
	// pass the start-up deadline.
	Expired func(delay time.Duration) bool
	// Sleep waits d or until ctx ends, on the caller's clock, and returns
	// ctx's error if it ended first.
	Sleep func(ctx context.Context, d time.Duration) error
	// Warn logs a retry with WarnMessage. Optional.
	Warn func(delay time.Duration, err error)
}

// Do calls call until it succeeds or fails with an error Unreachable does
// not accept (Done), the deadline would pass (Expired), or a wait is
// interrupted (Interrupted).
func (r Retry) Do(ctx context.Context, call func(context.Context) error) (Outcome, error) {
	limit := r.Max
	if limit <= 0 {
		limit = BackoffMax
	}
	for delay := BackoffMin; ; delay = min(2*delay, limit) {
		err := call(ctx)
		if err == nil || !r.Unreachable(err) {
			return Done, err
		}
		if r.Expired(delay) {
			return Expired, err
		}
		if r.Warn != nil {
			r.Warn(delay, err)
		}
		if serr := r.Sleep(ctx, delay); serr != nil {
			return Interrupted, serr
		}
	}
}

// Sleep is Retry.Sleep on the wall clock.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
