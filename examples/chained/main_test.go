package main

import (
	"bytes"
	"context"
	"testing"
	"time"
)

func TestChained(t *testing.T) {
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

const want = `dedup: 7 clicks in, 6 page views out (key = page, record timestamp = click time)
  home     u1  timestamp 12:00:05
  home     u2  timestamp 12:00:20
  pricing  u1  timestamp 12:00:40
  pricing  u2  timestamp 12:01:10
  home     u1  timestamp 12:01:30
  signup   u2  timestamp 12:02:05
per-minute: views per page and event-time minute, emitted when the watermark passes the minute
  home     12:00-12:01  2
  pricing  12:00-12:01  1
  home     12:01-12:02  1
  pricing  12:01-12:02  1
`
