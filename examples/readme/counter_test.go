package main

import (
	"slices"
	"testing"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/kstatetest"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/serde"
	"github.com/kstate/kstate/state"
)

func TestCounter(t *testing.T) {
	d := kstatetest.New(t, kstate.Topology[string, string, string]{
		Inputs:       kstate.Topics(serde.String(), "words"),
		KeySerde:     serde.String(),
		NewProcessor: func() processor.StatefulProcessor[string, string, string] { return &Counter{} },
		Output:       kstate.Output[string, string]{Topic: "counts", Serde: serde.String()},
	})
	for _, w := range []string{"a", "a", "a", "b", "b"} {
		d.Input(w, w) // key, value
	}
	d.MustRunBatch() // one micro-batch on the real engine, then a simulated commit
	if got := d.OutputValues(); !slices.Equal(got, []string{"3", "2"}) {
		t.Fatalf("outputs %q, want 3 (for a) and 2 (for b)", got)
	}
	d.Restart() // state is restored from the changelog the driver captured
	if n, ok := kstatetest.ValueOf(d, "a", "count", state.Int64()); !ok || n != 3 {
		t.Fatalf("count of a after a restart = %d, %v; want 3", n, ok)
	}
}
