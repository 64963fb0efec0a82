package main

import (
	"bytes"
	"context"
	"testing"
	"time"
)

func TestSessionTracker(t *testing.T) {
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

const want = `u1  session s1 ended after 2 views (home, cart); still open: s2
u1  session s2 ended after 2 views (help, faq); still open: s3
u2  session s9 ended after 1 view (pricing); still open: none
`
