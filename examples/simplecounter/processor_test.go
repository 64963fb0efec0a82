package main

import (
	"strings"
	"testing"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/kstatetest"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/serde"
	"github.com/kstate/kstate/state"
)

// The Counter without Kafka: a a a b b gives a=3 b=2, and a c continues
// from the stored counts, also after a restart.
func TestCounter(t *testing.T) {
	d := kstatetest.New(t, kstate.Topology[string, string, int64]{
		KeySerde:     serde.String(),
		Inputs:       kstate.Topics(serde.String(), "input"),
		NewProcessor: func() processor.StatefulProcessor[string, string, int64] { return &Counter{} },
		Output: kstate.Output[string, int64]{
			Serde: serde.Int64(),
		},
	}, kstatetest.ApplicationID("simplecounter"), kstatetest.Partitions(3))
	round := func(words string) map[string]int64 {
		for _, w := range strings.Fields(words) {
			d.Input(w, w)
		}
		d.MustRunBatch()
		got := map[string]int64{}
		for _, o := range d.Outputs() {
			got[string(o.Key)] = o.Value
		}
		return got
	}
	if got := round("a a a b b"); len(got) != 2 || got["a"] != 3 || got["b"] != 2 {
		t.Fatalf("a a a b b: outputs %v, want a=3 b=2", got)
	}
	d.Restart()
	if got := round("a c"); len(got) != 2 || got["a"] != 4 || got["c"] != 1 {
		t.Fatalf("a c: outputs %v, want a=4 c=1", got)
	}
	for key, want := range map[string]int64{"a": 4, "b": 2, "c": 1} {
		if n, ok := kstatetest.ValueOf(d, key, "count", state.Int64()); !ok || n != want {
			t.Errorf("count of %s = %d, %v; want %d", key, n, ok, want)
		}
	}
	if got := round(""); len(got) != 0 {
		t.Errorf("an empty batch emitted %v", got)
	}
}
