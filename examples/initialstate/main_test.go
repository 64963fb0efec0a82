package main

import (
	"bytes"
	"context"
	"testing"
	"time"
)

func TestInitialState(t *testing.T) {
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

const want = `initial  x,10 y,100
in       x x
out      x=12   (initial state rows applied by this run: 2)
restart  (same application id: not its first run any more)
in       x y
out      x=13 y=101   (initial state rows applied by this run: 0)
`
