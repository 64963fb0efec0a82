package kstate_test

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/internal/testprocs"
)

// A new application's group has no committed offsets; the embedded Kafka
// (kfake) answers an offset fetch for an unknown group with
// GROUP_ID_NOT_FOUND where a real broker answers "no offsets". RunToEnd
// must treat both as "nothing committed yet", process the backlog (and the
// initial state, when there is one) and return, as Spark's
// Trigger.AvailableNow does on a new checkpoint. Before the fix RunToEnd
// failed with "committed offsets of group …: GROUP_ID_NOT_FOUND" and wrote
// nothing.
func TestEmbeddedRunToEndNewApplication(t *testing.T) {
	for _, tc := range []struct {
		name    string
		initial bool
		want    string
	}{
		{"no initial state", false, "a=[1 2] b=[1]"},
		{"initial state", true, "a=[11 12] b=[1]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			brokers := startEmbedded(t, 2)
			testprocs.Produce(t, brokers, "in", "a=x", "a=y", "b=z")
			cfg := config(brokers, t.TempDir(), testprocs.NewCounter)
			if tc.initial {
				cfg.InitialState = kstate.InitialStateFromSeq(maps.All(map[string]int64{"a": 10}))
			}
			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			defer cancel()
			if err := newApp(t, cfg).RunToEnd(ctx); err != nil {
				t.Fatalf("RunToEnd of a new application: %v", err)
			}
			out, err := testprocs.Read(ctx, brokers, "out")
			if err != nil {
				t.Fatal(err)
			}
			want(t, out, tc.want)
		})
	}
}
