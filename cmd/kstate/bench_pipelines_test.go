package main

import (
	"slices"
	"testing"
)

func TestBenchPipelinesVariants(t *testing.T) {
	o := defaultBenchOptions()
	o.Processors, o.Backends, o.Pipelines = []string{"count", "heavy"}, []string{"pebble"}, []int{1, 2}
	o.expandBackends()
	o.expandPipelines()
	want := []string{"count.pebble-p1", "count.pebble-p2", "heavy.pebble-p1", "heavy.pebble-p2"}
	if !slices.Equal(o.Processors, want) {
		t.Fatalf("variants %v, want %v", o.Processors, want)
	}
	if err := o.validate(); err != nil {
		t.Fatal(err)
	}
	p, backend := variant(benchProcs(o), "heavy.pebble-p2")
	if p.name != "heavy.pebble-p2" || backend != "pebble" || pipelinesOf("heavy.pebble-p2") != 2 || pipelinesOf("count") != 0 {
		t.Fatalf("variant: %q %q %d", p.name, backend, pipelinesOf("heavy.pebble-p2"))
	}
	o.Processors = []string{"count-p0"}
	if err := o.validate(); err == nil {
		t.Fatal("count-p0 accepted")
	}
}
