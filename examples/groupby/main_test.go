package main

import (
	"bytes"
	"context"
	"testing"
	"time"
)

func TestGroupBy(t *testing.T) {
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

const want = `in   alice@de bob@fr carol@de dave@it
out  de=2 fr=1 it=1
in   erin@fr alice@de
out  de=3 fr=2 it=1
`
