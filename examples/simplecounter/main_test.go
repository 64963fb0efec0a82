package main

import (
	"bytes"
	"context"
	"testing"
	"time"
)

func TestSimpleCounter(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, nil, t.TempDir(), &out); err != nil {
		t.Fatalf("run: %v\noutput so far:\n%s", err, out.String())
	}
	if got := out.String(); got != want {
		t.Fatalf("output:\n%s\nwant:\n%s", got, want)
	}
}

const want = `in   a a a b b
out  a=3 b=2
in   a c
out  a=4 b=2 c=1
`
