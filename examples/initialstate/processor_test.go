package main

import (
	"slices"
	"testing"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/kstatetest"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/serde"
)

// Initial x=10, y=100: x x gives x=12; after a restart the initial state is
// not applied again, so x y gives x=13 y=101.
func TestCounterWithInitialState(t *testing.T) {
	var csvErr error
	d := kstatetest.New(t, kstate.Topology[string, string, int64]{
		KeySerde:     serde.String(),
		Inputs:       kstate.Topics(serde.String(), "input"),
		NewProcessor: func() processor.StatefulProcessor[string, string, int64] { return &Counter{} },
		InitialState: kstate.InitialStateFromSeq(readCSV(initialCSV, &csvErr)),
		Output: kstate.Output[string, int64]{
			Serde: serde.Int64(),
		},
	}, kstatetest.ApplicationID("initialstate"), kstatetest.Partitions(2))
	if csvErr != nil {
		t.Fatal(csvErr)
	}
	d.Input("x", "x")
	d.Input("x", "x")
	d.MustRunBatch()
	if got := d.OutputValues(); !slices.Equal(got, []int64{12}) {
		t.Fatalf("x x: outputs %v, want [12]", got)
	}
	d.Restart()
	d.Input("x", "x")
	d.Input("y", "y")
	d.MustRunBatch()
	got := map[string]int64{}
	for _, o := range d.Outputs() {
		got[string(o.Key)] = o.Value
	}
	if len(got) != 2 || got["x"] != 13 || got["y"] != 101 {
		t.Fatalf("x y after a restart: outputs %v, want x=13 y=101", got)
	}
	if n := d.Counters().InitialStateRows; n != 2 {
		t.Errorf("InitialStateRows = %d, want 2 (x and y, once)", n)
	}
}

// Several initial rows of one key add up.
func TestInitialRowsAddUp(t *testing.T) {
	var csvErr error
	d := kstatetest.New(t, kstate.Topology[string, string, int64]{
		KeySerde:     serde.String(),
		Inputs:       kstate.Topics(serde.String(), "input"),
		NewProcessor: func() processor.StatefulProcessor[string, string, int64] { return &Counter{} },
		InitialState: kstate.InitialStateFromSeq(readCSV("x,1\nx,2\n", &csvErr)),
		Output: kstate.Output[string, int64]{
			Serde: serde.Int64(),
		},
	}, kstatetest.ApplicationID("initialstate"))
	d.Input("x", "x")
	d.MustRunBatch()
	if got := d.OutputValues(); csvErr != nil || !slices.Equal(got, []int64{4}) {
		t.Fatalf("outputs %v (csv error %v), want [4]", got, csvErr)
	}
}
