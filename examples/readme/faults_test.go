package main

import (
	"errors"
	"slices"
	"testing"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/kstatetest"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/serde"
	"github.com/kstate/kstate/state"
)

func TestCounterSurvivesFailures(t *testing.T) {
	d := kstatetest.New(t, kstate.Topology[string, string, string]{
		Inputs:       kstate.Topics(serde.String(), "words"),
		KeySerde:     serde.String(),
		NewProcessor: func() processor.StatefulProcessor[string, string, string] { return &Counter{} },
		Output:       kstate.Output[string, string]{Topic: "counts", Serde: serde.String()},
	}, kstatetest.Partitions(2))
	d.Input("a", "a")
	d.Input("b", "b")
	d.MustRunBatch()

	// Killed after the batch's transaction committed, before the local
	// state was written: the restart restores the batch from the changelog.
	d.Crash(kstatetest.BeforeLocalCommit)
	d.Input("a", "a")
	if err := d.RunBatch(); !errors.Is(err, kstatetest.ErrCrashed) {
		t.Fatalf("RunBatch = %v, want the crash", err)
	}
	d.Restart(kstatetest.KeepLocalState())

	// A failed commit: nothing of the batch is visible; it is redone.
	d.FailNextCommit()
	d.Input("a", "a")
	if err := d.RunBatch(); err == nil {
		t.Fatal("the commit did not fail")
	}
	d.MustRunBatch()

	// Partitions move to a second instance, restored from the changelog.
	d.Rebalance(0, 1)
	d.Input("a", "a")
	d.MustRunBatch()

	if got := d.OutputValues(); !slices.Equal(got, []string{"1", "1", "2", "3", "4"}) {
		t.Fatalf("outputs %q: each count exactly once", got)
	}
	if n, _ := kstatetest.ValueOf(d, "a", "count", state.Int64()); n != 4 {
		t.Fatalf("count of a = %d, want 4", n)
	}
}
