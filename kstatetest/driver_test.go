package kstatetest_test

import (
	"errors"
	"fmt"
	"iter"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/kstatetest"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/serde"
	"github.com/kstate/kstate/state"
)

// counter counts rows per key and emits "key=n"; it takes int64 initial
// state.
type counter struct {
	processor.Defaults[string, string]
	count  state.ValueState[int64]
	closed *int
}

func (c *counter) Init(h processor.Handle) (err error) {
	c.count, err = processor.NewValueState(h, "count", state.Int64())
	return err
}

func (c *counter) HandleInputRows(key string, rows iter.Seq[string], _ processor.TimerValues, out processor.Emitter[string]) error {
	n, _, err := c.count.Get()
	if err != nil {
		return err
	}
	for range rows {
		n++
	}
	if err := c.count.Update(n); err != nil {
		return err
	}
	return out.Emit(fmt.Sprintf("%s=%d", key, n))
}

func (c *counter) HandleInitialState(_ string, v int64, _ processor.TimerValues) error {
	return c.count.Update(v)
}

func (c *counter) Close() error {
	if c.closed != nil {
		*c.closed++
	}
	return nil
}

func counterConfig() kstate.Topology[string, string, string] {
	return kstate.Topology[string, string, string]{
		KeySerde:     serde.String(),
		Inputs:       kstate.Topics(serde.String(), "input"),
		NewProcessor: func() processor.StatefulProcessor[string, string, string] { return &counter{} },
		Output: kstate.Output[string, string]{
			Serde: serde.String(),
		},
	}
}

func inputs[K, I, O any](d *kstatetest.Driver[K, I, O], keys string, value I) {
	for k := range strings.FieldsSeq(keys) {
		d.Input(any(k).(K), value)
	}
}

func TestCounter(t *testing.T) {
	d := kstatetest.New(t, counterConfig())
	inputs(d, "a a a b b", "x")
	d.MustRunBatch()
	if got, want := d.OutputValues(), []string{"a=3", "b=2"}; !slices.Equal(got, want) {
		t.Fatalf("outputs %q, want %q", got, want)
	}
	for key, want := range map[string]int64{"a": 3, "b": 2} {
		if n, ok := kstatetest.ValueOf(d, key, "count", state.Int64()); !ok || n != want {
			t.Errorf("count of %s = %d, %v; want %d", key, n, ok, want)
		}
	}
	if _, ok := kstatetest.ValueOf(d, "c", "count", state.Int64()); ok {
		t.Error("count of c exists; want absent")
	}
	d.Input("a", "x")
	d.MustRunBatch()
	out := d.Outputs()
	if len(out) != 1 || out[0].Value != "a=4" || string(out[0].Key) != "a" || string(out[0].Bytes) != "a=4" || !out[0].Timestamp.IsZero() {
		t.Fatalf("outputs %+v, want one a=4 with key a and no timestamp", out)
	}
	c := d.Counters()
	if c.RowsIn != 6 || c.RowsOut != 3 || c.Keys != 3 {
		t.Errorf("counters %+v; want RowsIn 6, RowsOut 3, Keys 3", c)
	}
}

func TestConfigIsValidated(t *testing.T) {
	cfg := counterConfig()
	cfg.AllowedLateness = time.Second // needs EventTime
	ft := &fatalT{TB: t}
	func() {
		defer func() { _ = recover() }()
		kstatetest.New(ft, cfg)
	}()
	if !strings.Contains(ft.msg, "invalid config") || !strings.Contains(ft.msg, "AllowedLateness") {
		t.Fatalf("New fataled with %q; want kstate's config error about AllowedLateness", ft.msg)
	}
}

// fatalT records Fatalf and stops the goroutine with a panic.
type fatalT struct {
	testing.TB
	msg string
}

func (f *fatalT) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	panic(f)
}

func TestInitialStateOnFirstRunOnly(t *testing.T) {
	cfg := counterConfig()
	cfg.InitialState = kstate.InitialStateFromSeq(maps.All(map[string]int64{"x": 10}))
	d := kstatetest.New(t, cfg)
	inputs(d, "x x", "r")
	d.MustRunBatch()
	if got := d.OutputValues(); !slices.Equal(got, []string{"x=12"}) {
		t.Fatalf("outputs %q, want x=12", got)
	}
	d.Restart()
	d.Input("x", "r")
	d.MustRunBatch()
	if got := d.OutputValues(); !slices.Equal(got, []string{"x=13"}) {
		t.Fatalf("after Restart: outputs %q, want x=13 (initial state applied once)", got)
	}
	if n := d.Counters().InitialStateRows; n != 1 {
		t.Errorf("InitialStateRows = %d, want 1", n)
	}
}

func TestInitialStateFromTopic(t *testing.T) {
	cfg := counterConfig()
	cfg.InitialState = kstate.InitialStateFromTopic[string]("seed", serde.Int64())
	v, _ := serde.Int64().Serialize(5)
	d := kstatetest.New(t, cfg, kstatetest.InitialTopic("seed", kstatetest.Record{Key: []byte("x"), Value: v}))
	d.Input("x", "r")
	d.MustRunBatch()
	if got := d.OutputValues(); !slices.Equal(got, []string{"x=6"}) {
		t.Fatalf("outputs %q, want x=6", got)
	}

	ft := &fatalT{TB: t}
	func() {
		defer func() { _ = recover() }()
		kstatetest.New(ft, cfg)
	}()
	if !strings.Contains(ft.msg, `"seed"`) || !strings.Contains(ft.msg, "InitialTopic") {
		t.Fatalf("New without the topic fataled with %q; want a message naming the topic and InitialTopic", ft.msg)
	}
}

// monitor is a heartbeat monitor in ProcessingTime mode: every row moves
// the key's timer to now+10s; the timer emits "key SILENT"; the last-seen
// time lives 1h (TTL).
type monitor struct {
	h    processor.Handle
	seen state.ValueState[int64]
}

func (m *monitor) Init(h processor.Handle) (err error) {
	m.h = h
	m.seen, err = processor.NewValueState(h, "seen", state.Int64(), state.WithTTL(time.Hour))
	return err
}

func (m *monitor) HandleInputRows(key string, rows iter.Seq[string], tv processor.TimerValues, _ processor.Emitter[string]) error {
	past := false
	for row := range rows {
		past = past || row == "past"
	}
	ts, err := m.h.ListTimers()
	if err != nil {
		return err
	}
	for _, x := range ts {
		if err := m.h.DeleteTimer(x); err != nil {
			return err
		}
	}
	if err := m.h.RegisterTimer(tv.ProcessingTimeMs() + 10_000); err != nil {
		return err
	}
	if past { // a timer in the past fires in this batch
		if err := m.h.RegisterTimer(tv.ProcessingTimeMs() - 1000); err != nil {
			return err
		}
	}
	return m.seen.Update(tv.ProcessingTimeMs())
}

func (m *monitor) HandleExpiredTimer(key string, tv processor.TimerValues, et processor.ExpiredTimerInfo, out processor.Emitter[string]) error {
	return out.Emit(fmt.Sprintf("%s SILENT@%ds", key, (et.ExpiryTimeMs-kstatetestStart)/1000))
}

func (m *monitor) Close() error { return nil }

var kstatetestStart = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()

func monitorConfig() kstate.Topology[string, string, string] {
	return kstate.Topology[string, string, string]{
		KeySerde:     serde.String(),
		Inputs:       kstate.Topics(serde.String(), "input"),
		TimeMode:     processor.ProcessingTime,
		NewProcessor: func() processor.StatefulProcessor[string, string, string] { return &monitor{} },
		Output: kstate.Output[string, string]{
			Serde: serde.String(),
		},
	}
}

func TestProcessingTimeTimers(t *testing.T) {
	d := kstatetest.New(t, monitorConfig(), kstatetest.Partitions(3))
	if got := d.Now().UnixMilli(); got != kstatetestStart {
		t.Fatalf("Now = %v, want 2026-01-01T00:00:00Z", d.Now())
	}
	inputs(d, "s2 s1", "hb") // timers at 10s
	d.MustRunBatch()
	d.AdvanceClock(2 * time.Second)
	d.Input("s3", "hb") // timer at 12s
	d.MustRunBatch()
	if got := d.Timers("s1"); !slices.Equal(got, []int64{kstatetestStart + 10_000}) {
		t.Fatalf("timers of s1 %v, want [start+10s]", got)
	}
	d.AdvanceClock(7 * time.Second) // 9s: nothing due
	d.MustRunBatch()
	if got := d.OutputValues(); len(got) != 0 {
		t.Fatalf("outputs at 9s %q, want none", got)
	}
	d.AdvanceClock(5 * time.Second) // 14s: all three due, no input at all
	d.MustRunBatch()
	want := []string{"s1 SILENT@10s", "s2 SILENT@10s", "s3 SILENT@12s"}
	got := d.OutputValues()
	// Outputs are committed partition by partition; timers fire in
	// (expiry, key) order within each partition.
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("outputs at 14s %q, want %q", got, want)
	}
	if d.Timers("s1") != nil {
		t.Errorf("fired timer still registered: %v", d.Timers("s1"))
	}
	if n := d.Counters().TimersFired; n != 3 {
		t.Errorf("TimersFired = %d, want 3", n)
	}
}

func TestTimerOrderWithinPartition(t *testing.T) {
	d := kstatetest.New(t, monitorConfig())
	d.Input("b", "hb")
	d.MustRunBatch()
	d.Input("a", "hb")
	d.Input("c", "hb")
	d.MustRunBatch() // same time: a, b, c all at 10s
	d.AdvanceClock(time.Second)
	d.Input("0", "hb") // at 11s
	d.MustRunBatch()
	d.AdvanceClock(20 * time.Second)
	d.MustRunBatch()
	want := []string{"a SILENT@10s", "b SILENT@10s", "c SILENT@10s", "0 SILENT@11s"}
	if got := d.OutputValues(); !slices.Equal(got, want) {
		t.Fatalf("outputs %q, want %q ((expiry, key) order)", got, want)
	}
}

func TestTimerInThePastFiresInSameBatch(t *testing.T) {
	d := kstatetest.New(t, monitorConfig())
	d.Input("k", "past")
	d.MustRunBatch()
	if got := d.OutputValues(); !slices.Equal(got, []string{"k SILENT@-1s"}) {
		t.Fatalf("outputs %q, want the past timer fired in the same batch", got)
	}
}

func TestTTL(t *testing.T) {
	d := kstatetest.New(t, monitorConfig())
	d.Input("k", "hb")
	d.MustRunBatch()
	d.AdvanceClock(time.Hour - time.Millisecond)
	if _, ok := kstatetest.ValueOf(d, "k", "seen", state.Int64()); !ok {
		t.Fatal("seen expired 1ms early")
	}
	d.AdvanceClock(time.Millisecond)
	if _, ok := kstatetest.ValueOf(d, "k", "seen", state.Int64()); ok {
		t.Fatal("seen visible at its expiry; want invisible")
	}
	if n := d.Counters().TTLRemovals; n != 0 {
		t.Fatalf("TTLRemovals = %d before a batch ran; want 0", n)
	}
	d.MustRunBatch() // deletes it
	if n := d.Counters().TTLRemovals; n != 1 {
		t.Fatalf("TTLRemovals = %d, want 1", n)
	}
	d.Restart() // the tombstone is in the changelog too
	if _, ok := kstatetest.ValueOf(d, "k", "seen", state.Int64()); ok {
		t.Fatal("seen back after Restart")
	}
}

// windows counts rows per key and event-time second; an event-time timer at
// the end of each second emits "key@second=n" and drops the window.
type windows struct {
	h processor.Handle
	w state.MapState[int64, int64]
}

func (p *windows) Init(h processor.Handle) (err error) {
	p.h = h
	p.w, err = processor.NewMapState(h, "windows", state.Int64(), state.Int64())
	return err
}

func (p *windows) HandleInputRows(_ string, rows iter.Seq[int64], _ processor.TimerValues, _ processor.Emitter[string]) error {
	for ev := range rows {
		start := ev / 1000 * 1000
		n, _, err := p.w.GetValue(start)
		if err != nil {
			return err
		}
		if err := p.w.UpdateValue(start, n+1); err != nil {
			return err
		}
		if err := p.h.RegisterTimer(start + 999); err != nil {
			return err
		}
	}
	return nil
}

func (p *windows) HandleExpiredTimer(key string, _ processor.TimerValues, et processor.ExpiredTimerInfo, out processor.Emitter[string]) error {
	start := et.ExpiryTimeMs - 999
	n, _, err := p.w.GetValue(start)
	if err != nil {
		return err
	}
	if err := p.w.RemoveKey(start); err != nil {
		return err
	}
	return out.Emit(fmt.Sprintf("%s@%d=%d", key, start/1000, n))
}

func (p *windows) Close() error { return nil }

func TestEventTime(t *testing.T) {
	d := kstatetest.New(t, kstate.Topology[string, int64, string]{
		KeySerde: serde.String(),
		Inputs:   kstate.Topics(serde.Int64(), "input"),
		TimeMode: processor.EventTime,
		// the row is its event time (ms)
		EventTime:       func(v int64, _ int64) int64 { return v },
		AllowedLateness: 500 * time.Millisecond,
		NewProcessor:    func() processor.StatefulProcessor[string, int64, string] { return &windows{} },
		Output: kstate.Output[string, string]{
			Serde: serde.String(),
		},
	}, kstatetest.ApplicationID("windows"))
	for _, ev := range []int64{100, 900, 1200} {
		d.Input("s", ev)
	}
	d.MustRunBatch() // watermark 700: the timer at 999 is not due yet
	if got := d.OutputValues(); len(got) != 0 {
		t.Fatalf("outputs %q, want none before the watermark passes 999", got)
	}
	want := []kstatetest.Entry[int64, int64]{{Key: 0, Value: 2}, {Key: 1000, Value: 1}}
	if got := kstatetest.MapOf(d, "s", "windows", state.Int64(), state.Int64()); !slices.Equal(got, want) {
		t.Fatalf("windows %v, want %v", got, want)
	}
	d.Input("s", 800)  // after the watermark 700: counts
	d.Input("s", 700)  // at the watermark: late, dropped
	d.Input("s", 1600) // watermark → 1100 after this batch
	d.MustRunBatch()
	if got := d.OutputValues(); len(got) != 0 {
		t.Fatalf("outputs %q; the timer fires at the watermark of the batch, advanced only at its end", got)
	}
	d.MustRunBatch() // no input: the advanced watermark alone runs a batch
	if got := d.OutputValues(); !slices.Equal(got, []string{"s@0=3"}) {
		t.Fatalf("outputs %q, want s@0=3", got)
	}
	if n := d.Counters().LateRowsDropped; n != 1 {
		t.Fatalf("LateRowsDropped = %d, want 1", n)
	}
	if got := d.Timers("s"); !slices.Equal(got, []int64{1999}) {
		t.Fatalf("timers %v, want [1999]", got)
	}
}

func TestRestartRestoresStateAndTimers(t *testing.T) {
	for _, keep := range []bool{false, true} {
		t.Run(fmt.Sprintf("keepLocal=%v", keep), func(t *testing.T) {
			d := kstatetest.New(t, monitorConfig(), kstatetest.Partitions(2))
			inputs(d, "a b c", "hb")
			d.MustRunBatch()
			restored := d.Counters().RestoreRecords
			if keep {
				d.Restart(kstatetest.KeepLocalState())
			} else {
				d.Restart()
			}
			for _, k := range []string{"a", "b", "c"} {
				if got := d.Timers(k); !slices.Equal(got, []int64{kstatetestStart + 10_000}) {
					t.Errorf("timers of %s after Restart: %v", k, got)
				}
				if v, ok := kstatetest.ValueOf(d, k, "seen", state.Int64()); !ok || v != kstatetestStart {
					t.Errorf("seen of %s after Restart: %d, %v", k, v, ok)
				}
			}
			n := d.Counters().RestoreRecords - restored
			if keep && n != 0 || !keep && n == 0 {
				t.Errorf("restored %d changelog records (keepLocal %v)", n, keep)
			}
			d.AdvanceClock(10 * time.Second)
			d.MustRunBatch()
			got := d.OutputValues()
			slices.Sort(got)
			if want := []string{"a SILENT@10s", "b SILENT@10s", "c SILENT@10s"}; !slices.Equal(got, want) {
				t.Fatalf("outputs after Restart %q, want %q", got, want)
			}
		})
	}
}

func TestRestartClosesProcessors(t *testing.T) {
	closes := 0
	cfg := counterConfig()
	cfg.NewProcessor = func() processor.StatefulProcessor[string, string, string] { return &counter{closed: &closes} }
	d := kstatetest.New(t, cfg, kstatetest.Partitions(4))
	d.Restart()
	if closes != 4 {
		t.Fatalf("Close ran %d times on Restart, want 4", closes)
	}
	d.Close()
	d.Close()
	if closes != 8 {
		t.Fatalf("Close ran %d times after Close, want 8", closes)
	}
}

// failing fails on "err" rows and panics on "panic" rows.
type failing struct{ counter }

func (f *failing) HandleInputRows(key string, rows iter.Seq[string], tv processor.TimerValues, out processor.Emitter[string]) error {
	for r := range rows {
		switch r {
		case "err":
			return errors.New("boom")
		case "panic":
			panic("kaboom")
		}
	}
	return f.counter.HandleInputRows(key, rows, tv, out)
}

func TestUserErrors(t *testing.T) {
	cfg := counterConfig()
	cfg.NewProcessor = func() processor.StatefulProcessor[string, string, string] { return &failing{} }
	d := kstatetest.New(t, cfg, kstatetest.Partitions(2))
	d.Input("ok", "x")
	d.MustRunBatch()
	d.OutputValues()
	for _, row := range []string{"err", "panic"} {
		d.Input("ok", "x") // aborted with the failing batch
		d.Input("bad", row)
		err := d.RunBatch()
		var ue *kstate.UserError
		if !errors.As(err, &ue) {
			t.Fatalf("%s: RunBatch returned %v; want a kstate.UserError", row, err)
		}
		if ue.Method != "HandleInputRows" || ue.Key != `"bad"` || ue.Partition != d.Partition("bad") {
			t.Errorf("%s: UserError %+v; want HandleInputRows, key \"bad\", partition %d", row, ue, d.Partition("bad"))
		}
		if row == "panic" && ue.Panic != "kaboom" || row == "err" && (ue.Err == nil || ue.Err.Error() != "boom") {
			t.Errorf("%s: UserError %v does not carry the cause", row, ue)
		}
		if !strings.HasPrefix(err.Error(), "kstate: ") {
			t.Errorf("error %q is not wrapped as App.Run wraps it", err)
		}
		if got := d.OutputValues(); len(got) != 0 {
			t.Errorf("%s: outputs %q of an aborted batch", row, got)
		}
		if n, _ := kstatetest.ValueOf(d, "ok", "count", state.Int64()); n != 1 {
			t.Errorf("%s: count of ok = %d after the aborted batch, want 1", row, n)
		}
	}
	d.Input("ok", "x")
	d.MustRunBatch()
	if got := d.OutputValues(); !slices.Equal(got, []string{"ok=2"}) {
		t.Fatalf("after the errors: outputs %q, want ok=2", got)
	}
}

func TestDecodeError(t *testing.T) {
	d := kstatetest.New(t, kstate.Topology[string, int64, string]{
		Inputs:       kstate.Topics(serde.Int64(), "numbers"),
		KeySerde:     serde.String(),
		NewProcessor: func() processor.StatefulProcessor[string, int64, string] { return &windows{} },
		Output: kstate.Output[string, string]{
			Serde: serde.String(),
		},
	}, kstatetest.ApplicationID("decode"))
	d.Input("k", 1)
	d.InputRecord([]byte("k"), []byte("not 8 bytes"), d.Now())
	err := d.RunBatch()
	var de *kstate.DecodeError
	if !errors.As(err, &de) {
		t.Fatalf("RunBatch returned %v; want a kstate.DecodeError", err)
	}
	if de.Topic != "numbers" || de.Partition != 0 || de.Offset != 1 || de.Part != "value" {
		t.Fatalf("DecodeError %+v; want topic numbers, partition 0, offset 1, value", de)
	}
}

func TestPartitionRouting(t *testing.T) {
	d := kstatetest.New(t, counterConfig(), kstatetest.Partitions(4))
	keys := strings.Fields("a b c d e f g h")
	for _, k := range keys {
		d.Input(k, "x")
	}
	d.MustRunBatch()
	parts := map[int32]bool{}
	for _, o := range d.Outputs() {
		key := string(o.Key)
		if o.Partition != d.Partition(key) {
			t.Errorf("%s emitted by partition %d, routed to %d", key, o.Partition, d.Partition(key))
		}
		parts[o.Partition] = true
	}
	if len(parts) < 2 {
		t.Fatalf("8 keys on 4 partitions all went to %v", parts)
	}
	// Kafka's default partitioner, murmur2 of the key bytes mod 4.
	if d.Partition("a") != 0 || d.Partition("d") != 1 || d.Partition("c") != 2 || d.Partition("f") != 3 {
		t.Errorf("partitions of a, d, c, f = %d, %d, %d, %d; murmur2 gives 0, 1, 2, 3",
			d.Partition("a"), d.Partition("d"), d.Partition("c"), d.Partition("f"))
	}
	m := d.Metrics()
	if len(m.Partitions) != 4 || m.Total.RowsIn != 8 {
		t.Fatalf("metrics %+v", m)
	}
	var sum int64
	for _, c := range m.Partitions {
		sum += c.RowsIn
	}
	if sum != 8 {
		t.Fatalf("per-partition RowsIn sum to %d, want 8", sum)
	}
}
