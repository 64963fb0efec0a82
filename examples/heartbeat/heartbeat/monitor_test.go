package heartbeat_test

import (
	"slices"
	"testing"
	"time"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/examples/heartbeat/heartbeat"
	"github.com/kstate/kstate/kstatetest"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/serde"
	"github.com/kstate/kstate/state"
)

func newDriver(t *testing.T) *kstatetest.Driver[string, string, heartbeat.Event] {
	return kstatetest.New(t, kstate.Topology[string, string, heartbeat.Event]{
		KeySerde:     serde.String(),
		Inputs:       kstate.Topics(serde.String(), "input"),
		NewProcessor: heartbeat.NewMonitor(heartbeat.Timeout, heartbeat.Retention),
		TimeMode:     processor.ProcessingTime,
		Output: kstate.Output[string, heartbeat.Event]{
			Serde: serde.JSON[heartbeat.Event](),
		},
	}, kstatetest.ApplicationID("heartbeat"), kstatetest.Partitions(2))
}

// events returns the outputs as "sensor KIND", in order.
func events(d *kstatetest.Driver[string, string, heartbeat.Event]) []string {
	var out []string
	for _, e := range d.OutputValues() {
		out = append(out, e.Sensor+" "+e.Kind)
	}
	return out
}

func expect(t *testing.T, at string, got []string, want ...string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Fatalf("%s: events %q, want %q", at, got, want)
	}
}

// The monitor's timers are driven by the driver's clock alone: SILENT after
// 10 s of silence, BACK on return, forgotten after an hour (TTL).
func TestMonitor(t *testing.T) {
	d := newDriver(t)
	start := d.Now().UnixMilli()
	d.Input("s1", "hb")
	d.MustRunBatch()
	expect(t, "0s", events(d), "s1 ONLINE")
	if got := d.Timers("s1"); !slices.Equal(got, []int64{start + 10_000}) {
		t.Fatalf("timers of s1 %v, want [start+10s]", got)
	}

	d.AdvanceClock(9 * time.Second)
	d.Input("s1", "hb") // moves the timer to 19s
	d.MustRunBatch()
	expect(t, "9s", events(d))
	if got := d.Timers("s1"); !slices.Equal(got, []int64{start + 19_000}) {
		t.Fatalf("timers of s1 %v, want the timer moved to start+19s", got)
	}

	d.AdvanceClock(9999 * time.Millisecond) // 18.999s
	d.MustRunBatch()
	expect(t, "18.999s", events(d))
	d.AdvanceClock(time.Millisecond) // 19s: no input, the timer fires
	d.MustRunBatch()
	out := d.Outputs()
	if len(out) != 1 || out[0].Value.Kind != heartbeat.Silent || out[0].Value.LastMs != start+9_000 || out[0].Value.AtMs != start+19_000 {
		t.Fatalf("19s: outputs %+v, want s1 SILENT at 19s, last heartbeat at 9s", out)
	}
	if silent, ok := kstatetest.ValueOf(d, "s1", "silent", state.Bool()); !ok || !silent {
		t.Fatalf("s1 not marked silent")
	}

	d.AdvanceClock(5 * time.Second)
	d.Input("s1", "hb")
	d.MustRunBatch()
	expect(t, "24s", events(d), "s1 BACK")
	d.AdvanceClock(10 * time.Second)
	d.MustRunBatch()
	expect(t, "34s", events(d), "s1 SILENT")

	// Each state value lives an hour after its last write, and expires
	// without any code running: lastSeen (written at 24s) at 1h24s, silent
	// (written at 34s) at 1h34s.
	d.AdvanceClock(time.Hour - 10*time.Second) // 1h24s
	if _, ok := kstatetest.ValueOf(d, "s1", "lastSeen", state.Int64()); ok {
		t.Fatal("lastSeen still visible an hour after the last heartbeat")
	}
	if _, ok := kstatetest.ValueOf(d, "s1", "silent", state.Bool()); !ok {
		t.Fatal("silent expired before an hour after it was written")
	}
	d.MustRunBatch()
	d.AdvanceClock(10 * time.Second) // 1h34s
	d.MustRunBatch()
	if n := d.Counters().TTLRemovals; n != 2 {
		t.Fatalf("TTLRemovals = %d, want 2 (lastSeen and silent)", n)
	}
	expect(t, "1h34s", events(d))
	d.Input("s1", "hb")
	d.MustRunBatch()
	expect(t, "1h34s", events(d), "s1 ONLINE")
}

// State and timers survive a restart: the shards are restored from the
// changelog the driver captured.
func TestMonitorRestart(t *testing.T) {
	d := newDriver(t)
	start := d.Now().UnixMilli()
	for _, s := range []string{"s1", "s2", "s3"} {
		d.Input(s, "hb")
	}
	d.MustRunBatch()
	events(d)
	d.AdvanceClock(3 * time.Second)
	d.Input("s3", "hb") // s3's timer at 13s
	d.MustRunBatch()

	d.Restart()
	if n := d.Counters().RestoreRecords; n == 0 {
		t.Fatal("Restart restored no changelog records")
	}
	if got := d.Timers("s3"); !slices.Equal(got, []int64{start + 13_000}) {
		t.Fatalf("timers of s3 after Restart %v, want [start+13s]", got)
	}
	if last, ok := kstatetest.ValueOf(d, "s3", "lastSeen", state.Int64()); !ok || last != start+3_000 {
		t.Fatalf("lastSeen of s3 after Restart = %d, %v; want start+3s", last, ok)
	}
	d.AdvanceClock(7 * time.Second) // 10s
	d.MustRunBatch()
	got := events(d)
	slices.Sort(got) // s1 and s2 may be on different partitions
	expect(t, "10s after Restart", got, "s1 SILENT", "s2 SILENT")
	d.AdvanceClock(3 * time.Second) // 13s
	d.MustRunBatch()
	expect(t, "13s after Restart", events(d), "s3 SILENT")
	d.Restart(kstatetest.KeepLocalState())
	d.Input("s3", "hb")
	d.MustRunBatch()
	expect(t, "after a second Restart", events(d), "s3 BACK")
}
