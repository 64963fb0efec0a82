package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/kstate/kstate/examples/heartbeat/heartbeat"
)

// The story on the embedded Kafka; integration/examples_test.go runs it
// on a real broker.
func TestHeartbeat(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	if err := heartbeat.Run(ctx, nil, t.TempDir(), &out); err != nil {
		t.Fatalf("Run: %v\noutput so far:\n%s", err, out.String())
	}
	if got := out.String(); got != want {
		t.Fatalf("output:\n%s\nwant:\n%s", got, want)
	}
}

const want = `heartbeat monitor: a sensor silent for 10s raises an alert; its state is kept for 1h (TTL)

time      heartbeat   events
12:00:00  s1 s2       s1 ONLINE; s2 ONLINE
12:00:05  s1          -
12:00:10  -           s2 SILENT (last heartbeat 12:00:00)
12:00:12  s2          s2 BACK after 12s of silence
12:00:15  -           s1 SILENT (last heartbeat 12:00:05)
12:00:22  -           s2 SILENT (last heartbeat 12:00:12)
13:30:00  -           state of every sensor expired: 4 entries removed by TTL
13:30:00  s1          s1 ONLINE

timers registered 5, fired 3; 5 heartbeats in, 7 events out
`
