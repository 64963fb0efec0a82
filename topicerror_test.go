package kstate_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/internal/kafka"
	"github.com/kstate/kstate/internal/testprocs"
	"github.com/kstate/kstate/kafka/embedded"
)

// An existing changelog topic that is not compacted stops Run and SetInputOffsets with the public
// *kstate.TopicMismatchError (matched by kstate.ErrTopicMismatch), whose
// message says which topic kstate needs for what.
func TestEmbeddedTopicMismatch(t *testing.T) {
	e, err := embedded.Start(embedded.Options{Partitions: 2, Topics: map[string]int{"in": 2, "out": 2}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	adm, err := kafka.ClientConfig{Brokers: e.Brokers()}.NewAdmin()
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	// Not compacted: the broker's default cleanup.policy, delete.
	if err := adm.EnsureTopic(ctx, kafka.TopicSpec{Name: "app-changelog", Partitions: 2, ReplicationFactor: -1}); err != nil {
		t.Fatal(err)
	}
	cfg := config(e.Brokers(), t.TempDir(), testprocs.NewCounter)
	check := func(what string, err error) {
		t.Helper()
		var tm *kstate.TopicMismatchError
		if !errors.As(err, &tm) {
			t.Fatalf("%s: err = %v (%T), want a *kstate.TopicMismatchError", what, err, err)
		}
		if tm.Topic != "app-changelog" || tm.What != "cleanup.policy" || tm.Want != "compact" || tm.Got != "delete" {
			t.Fatalf("%s: %+v, want topic app-changelog, cleanup.policy delete, want compact", what, tm)
		}
		if !errors.Is(err, kstate.ErrTopicMismatch) {
			t.Fatalf("%s: errors.Is(%v, ErrTopicMismatch) = false", what, err)
		}
		if msg := err.Error(); !strings.Contains(msg, "changelog topic") || !strings.Contains(msg, `topic "app-changelog" has cleanup.policy delete, want compact: fix or delete the topic`) {
			t.Fatalf("%s: message %q does not say which topic and why", what, msg)
		}
	}
	check("Run", newApp(t, cfg).Run(ctx))
	check("SetInputOffsets", kstate.SetInputOffsets(ctx, cfg.Topology, cfg.Options, map[int32]int64{0: 0}))
}
