package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/kstate/kstate/examples/eventtime/eventtime"
)

// The story on the embedded Kafka; integration/examples_test.go runs it
// on a real broker.
func TestEventTime(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	if err := eventtime.Run(ctx, nil, t.TempDir(), &out); err != nil {
		t.Fatalf("Run: %v\noutput so far:\n%s", err, out.String())
	}
	if got := out.String(); got != want {
		t.Fatalf("output:\n%s\nwant:\n%s", got, want)
	}
}

const want = `tumbling windows of 1m per sensor; watermark = max event time seen - 10s

in    s1 12:00:05 20.0°C, s2 12:00:30 18.0°C, s1 12:00:40 21.0°C
in    s1 12:00:35 21.5°C, s2 12:01:02 19.0°C
in    s1 12:01:15 22.0°C
out   s1 window 12:00-12:01: 3 readings, avg 20.8°C, max 21.5°C (closed at watermark 12:01:05)
out   s2 window 12:00-12:01: 1 reading, avg 18.0°C, max 18.0°C (closed at watermark 12:01:05)
in    s2 12:00:58 30.0°C
late  dropped and counted: its event time is at or before the watermark
in    s1 12:01:40 23.0°C
in    s1 12:02:20 22.5°C
out   s1 window 12:01-12:02: 2 readings, avg 22.5°C, max 23.0°C (closed at watermark 12:02:10)
out   s2 window 12:01-12:02: 1 reading, avg 19.0°C, max 19.0°C (closed at watermark 12:02:10)

8 readings in, 1 dropped as late, 4 windows out; windows from 12:02 on are still open
`
