package startup

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

var (
	errDown = errors.New("connection refused")
	errBad  = errors.New("topic missing")
)

// A fake clock: Sleep records the waits and moves now.
type fake struct {
	now    time.Duration
	sleeps []time.Duration
	cut    bool // Sleep fails
}

func (f *fake) sleep(ctx context.Context, d time.Duration) error {
	if f.cut {
		return context.Canceled
	}
	f.sleeps = append(f.sleeps, d)
	f.now += d
	return nil
}

func (f *fake) retry(deadline, max time.Duration, warned *int) Retry {
	return Retry{
		Max:         max,
		Unreachable: func(err error) bool { return errors.Is(err, errDown) },
		Expired:     func(delay time.Duration) bool { return f.now+delay > deadline },
		Sleep:       f.sleep,
		Warn:        func(time.Duration, error) { *warned++ },
	}
}

func TestRetryBackoffDoublesToTheCapUntilSuccess(t *testing.T) {
	f := &fake{}
	var warned, calls int
	out, err := f.retry(time.Hour, 0, &warned).Do(t.Context(), func(context.Context) error {
		if calls++; calls < 8 {
			return errDown
		}
		return nil
	})
	if out != Done || err != nil {
		t.Fatalf("Do = %v, %v, want Done, nil", out, err)
	}
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond,
		1600 * time.Millisecond, 3200 * time.Millisecond, 5 * time.Second}
	if !slices.Equal(f.sleeps, want) || warned != len(want) {
		t.Fatalf("waits %v (%d warnings), want %v, one warning each", f.sleeps, warned, want)
	}
}

func TestRetryCap(t *testing.T) {
	f := &fake{}
	var warned, calls int
	f.retry(time.Hour, 2*time.Second, &warned).Do(t.Context(), func(context.Context) error {
		if calls++; calls < 7 {
			return errDown
		}
		return nil
	})
	if got := f.sleeps[len(f.sleeps)-1]; got != 2*time.Second {
		t.Fatalf("waits %v: want the last capped at 2s", f.sleeps)
	}
}

func TestRetryExpiresBeforeWaitingPastTheDeadline(t *testing.T) {
	f := &fake{}
	var warned, calls int
	out, err := f.retry(time.Second, 0, &warned).Do(t.Context(), func(context.Context) error { calls++; return errDown })
	// 100+200+400 = 700ms waited; 800ms more would pass 1s.
	if out != Expired || !errors.Is(err, errDown) || calls != 4 || warned != 3 {
		t.Fatalf("Do = %v, %v after %d calls, %d warnings; want Expired with the last error after 4 calls, 3 warnings", out, err, calls, warned)
	}
}

func TestRetryStopsAtAnErrorNotRetried(t *testing.T) {
	f := &fake{}
	var warned, calls int
	out, err := f.retry(time.Hour, 0, &warned).Do(t.Context(), func(context.Context) error {
		if calls++; calls < 3 {
			return errDown
		}
		return errBad
	})
	if out != Done || !errors.Is(err, errBad) || calls != 3 {
		t.Fatalf("Do = %v, %v after %d calls, want Done with the error not retried after 3", out, err, calls)
	}
}

func TestRetryInterrupted(t *testing.T) {
	f := &fake{cut: true}
	var warned int
	out, err := f.retry(time.Hour, 0, &warned).Do(t.Context(), func(context.Context) error { return errDown })
	if out != Interrupted || !errors.Is(err, context.Canceled) {
		t.Fatalf("Do = %v, %v, want Interrupted with the wait's error", out, err)
	}
}

func TestSleepWallClock(t *testing.T) {
	if err := Sleep(t.Context(), time.Millisecond); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep on a cancelled ctx = %v", err)
	}
}
