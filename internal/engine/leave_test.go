package engine_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/kstate/kstate/internal/engine"
	"github.com/kstate/kstate/internal/engine/enginetest"
)

// leaveSession is a Session with no partitions whose Poll waits for ctx
// (or fails with pollErr); it records whether it was closed or left.
type leaveSession struct {
	pollErr       error
	closed, left  int
	leaveDeadline bool // Leave got a ctx with a deadline
}

func (s *leaveSession) Poll(ctx context.Context, _ int, _ engine.GroupEvents) ([]engine.Message, error) {
	if s.pollErr != nil {
		return nil, s.pollErr
	}
	<-ctx.Done()
	return nil, ctx.Err()
}
func (s *leaveSession) Pause([]engine.Partition)  {}
func (s *leaveSession) Resume([]engine.Partition) {}
func (s *leaveSession) Begin() error              { return nil }
func (s *leaveSession) Produce(context.Context, []engine.Message) ([]int64, error) {
	return nil, nil
}
func (s *leaveSession) End(context.Context, bool) (bool, error) { return true, nil }
func (s *leaveSession) TransactionalID() string                 { return "app-i1" }
func (s *leaveSession) Close() error                            { s.closed++; return nil }
func (s *leaveSession) Leave(ctx context.Context) error {
	s.left++
	_, s.leaveDeadline = ctx.Deadline()
	return nil
}

// LeaveGroupOnShutdown: only a graceful shutdown (ctx cancelled, Run
// returning nil) leaves the group, and then instead of a plain Close; an
// error stop, or the option off, only closes the session (a static member
// keeps its place for a restart).
func TestLeaveGroupOnlyOnGracefulShutdown(t *testing.T) {
	errPoll := errors.New("test: poll failed")
	for _, tc := range []struct {
		name      string
		leave     bool
		pollErr   error
		wantLeft  int
		wantClose int
	}{
		{"graceful, option on", true, nil, 1, 0},
		{"graceful, option off", false, nil, 0, 1},
		{"error stop, option on", true, errPoll, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := enginetest.NewBroker("app", "in", map[string]int{"in": 2, "out": 2})
			s := &leaveSession{pollErr: tc.pollErr}
			c, err := engine.NewCoordinator(engine.CoordinatorConfig{
				ApplicationID: "app", InstanceID: "i1", RunID: "r1",
				Topic: "in", OutputTopic: "out", ChangelogTopic: "app-changelog",
				MaxBatchRecords: 10, RestoreTimeout: time.Second, ShutdownTimeout: time.Second,
				LeaveGroupOnShutdown: tc.leave,
				Admin:                enginetest.Admin{B: b},
				NewSession:           func() (engine.Session, error) { return s, nil },
				Changelog:            enginetest.Changelog{B: b},
				Clock:                &instantClock{},
				NewTask:              func(int32) (engine.TaskHandle, error) { return nil, errors.New("test: no tasks") },
			})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(50*time.Millisecond, cancel)
			defer cancel()
			err = c.Run(ctx)
			if (tc.pollErr == nil) != (err == nil) {
				t.Fatalf("Run: %v", err)
			}
			if s.left != tc.wantLeft || s.closed != tc.wantClose {
				t.Fatalf("left %d closed %d times, want left %d closed %d", s.left, s.closed, tc.wantLeft, tc.wantClose)
			}
			if s.left > 0 && !s.leaveDeadline {
				t.Fatal("Leave's ctx has no deadline: a hanging broker would hold the shutdown")
			}
		})
	}
}
