package main

import (
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// --pipelines: each processor variant (count, count.pebble, ...) runs once
// per Options.Batching.Pipelines value in every run, named variant-p<N>, so that the
// pipeline counts are measured interleaved on the same broker.

// expandPipelines turns the variants × --pipelines into the variants run,
// in order: count-p1, count-p2, heavy-p1, ...
func (o *benchOptions) expandPipelines() {
	if len(o.Pipelines) == 0 {
		return
	}
	var vs []string
	for _, p := range o.Processors {
		for _, n := range o.Pipelines {
			vs = append(vs, fmt.Sprintf("%s-p%d", p, n))
		}
	}
	o.Processors = vs
}

// cutPipelines splits a variant name into the name without its -p<N>
// suffix and N: 0 without a suffix, -1 for a malformed one.
func cutPipelines(name string) (string, int) {
	base, suffix, ok := strings.Cut(name, "-p")
	if !ok {
		return name, 0
	}
	n, err := strconv.Atoi(suffix)
	if err != nil || n < 1 {
		return base, -1
	}
	return base, n
}

// pipelinesOf is the Options.Batching.Pipelines of a variant name (0: the default).
func pipelinesOf(name string) int {
	_, n := cutPipelines(name)
	return max(n, 0)
}

// processCPU is the CPU time (user + system) this process used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
