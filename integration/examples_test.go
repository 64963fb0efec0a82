package integration

import (
	"bytes"
	"context"
	"io"
	"testing"
	"time"

	"github.com/kstate/kstate/examples/eventtime/eventtime"
	"github.com/kstate/kstate/examples/heartbeat/heartbeat"
)

// The heartbeat and eventtime examples on the real broker, with the same
// exact output as on the embedded Kafka (examples/*/main_test.go).

func runExample(t *testing.T, run func(context.Context, []string, string, io.Writer) error, want string) {
	brokers := realKafka(t).Brokers()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, brokers, t.TempDir(), &out); err != nil {
		t.Fatalf("run: %v\noutput so far:\n%s", err, out.String())
	}
	if got := out.String(); got != want {
		t.Fatalf("output:\n%s\nwant:\n%s", got, want)
	}
}

func TestExampleHeartbeat(t *testing.T) {
	t.Parallel()
	runExample(t, heartbeat.Run, `heartbeat monitor: a sensor silent for 10s raises an alert; its state is kept for 1h (TTL)

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
`)
}

func TestExampleEventTime(t *testing.T) {
	t.Parallel()
	runExample(t, eventtime.Run, `tumbling windows of 1m per sensor; watermark = max event time seen - 10s

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
`)
}
