package engine

import (
	"errors"
	"fmt"
	"iter"
	"strconv"
	"strings"
	"testing"

	"github.com/kstate/kstate/processor"
)

func wmProc(fired *[]string) func() processor.StatefulProcessor[string, string, string] {
	return func() processor.StatefulProcessor[string, string, string] {
		return &fnProc[string, string, string]{
			input: func(h processor.Handle, key string, rows iter.Seq[string], tv processor.TimerValues, out processor.Emitter[string]) error {
				for v := range rows {
					ms, _ := strconv.ParseInt(v, 10, 64)
					if err := h.RegisterTimer(ms + 10); err != nil {
						return err
					}
					if err := out.Emit(fmt.Sprintf("%s@wm%d", v, tv.WatermarkMs())); err != nil {
						return err
					}
				}
				return nil
			},
			timer: func(h processor.Handle, key string, tv processor.TimerValues, t processor.ExpiredTimerInfo, out processor.Emitter[string]) error {
				*fired = append(*fired, fmt.Sprintf("%s@%d(wm%d)", key, t.ExpiryTimeMs, tv.WatermarkMs()))
				return nil
			},
		}
	}
}

func eventCfg(p func() processor.StatefulProcessor[string, string, string], latenessMs int64) Config[string, string, string] {
	cfg := strCfg(p, processor.EventTime)
	cfg.AllowedLatenessMs = latenessMs
	cfg.EventTime = func(v string, _ int64) int64 { ms, _ := strconv.ParseInt(v, 10, 64); return ms }
	return cfg
}

func TestWatermarkLateRowsAndEventTimeTimers(t *testing.T) {
	dir := t.TempDir()
	var fired []string
	h := &harness[string, string, string]{t: t, cfg: eventCfg(wmProc(&fired), 5)}
	h.mustOpen(dir)
	if wm := h.task.Watermark(); wm != -1 {
		t.Fatalf("initial watermark %d", wm)
	}
	// Batch 1: no watermark yet; nothing is late. Max event 110 → wm 105 at the end.
	out := h.run(0, h.rec("a", "100", 0), h.rec("b", "110", 0))
	equal(t, "batch 1", out, []string{"a=100@wm-1", "b=110@wm-1"})
	if h.task.Watermark() != 105 || !h.task.NeedsBatch() {
		t.Fatalf("watermark %d needs batch %v", h.task.Watermark(), h.task.NeedsBatch())
	}
	// Batch 2 (no data): timer a@110 > 105 does not fire yet.
	h.run(0)
	if len(fired) != 0 || h.task.NeedsBatch() {
		t.Fatalf("fired %v, needs batch %v", fired, h.task.NeedsBatch())
	}
	// Batch 3: 105 is late (≤ wm), 104 late, 106 on time; event 130 → wm 125.
	out = h.run(0, h.rec("a", "105", 0), h.rec("a", "104", 0), h.rec("a", "106", 0), h.rec("c", "130", 0))
	equal(t, "batch 3", out, []string{"a=106@wm105", "c=130@wm105"})
	if c := h.task.Counters(); c.LateRowsDropped != 2 || c.RowsIn != 4 {
		t.Fatalf("counters %+v", c)
	}
	if len(fired) != 0 {
		t.Fatalf("fired %v with watermark 105", fired)
	}
	// Restart: the watermark is durable; the next batch fires a@110, b@120, a@116.
	h.task.Close()
	h.mustOpen(dir)
	if h.task.Watermark() != 125 {
		t.Fatalf("watermark after restart %d", h.task.Watermark())
	}
	h.run(0)
	equal(t, "fired", fired, []string{"a@110(wm125)", "a@116(wm125)", "b@120(wm125)"})
	// A watermark never goes back.
	h.run(0, h.rec("d", "126", 0))
	if h.task.Watermark() != 125 {
		t.Fatalf("watermark went to %d", h.task.Watermark())
	}
}

func TestAbortRollsBackWatermarkAndCounters(t *testing.T) {
	var fired []string
	h := &harness[string, string, string]{t: t, cfg: eventCfg(wmProc(&fired), 0)}
	h.mustOpen("")
	h.run(0, h.rec("a", "100", 0))
	before := h.task.Counters()
	res, err := h.task.RunBatch(0, []Record{h.rec("a", "200", 0), h.rec("a", "50", 0)})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Outputs) != 1 {
		t.Fatalf("outputs %v", outs(res))
	}
	h.task.Abort()
	if h.task.Watermark() != 100 || h.task.Counters() != before {
		t.Fatalf("after abort: watermark %d counters %+v (before %+v)", h.task.Watermark(), h.task.Counters(), before)
	}
	out := h.run(0, Record{Offset: 1, Key: []byte("a"), Value: []byte("200")}, Record{Offset: 2, Key: []byte("a"), Value: []byte("50")})
	equal(t, "retry", out, []string{"a=200@wm100"})
	if c := h.task.Counters(); c.LateRowsDropped != 1 || h.task.Watermark() != 200 {
		t.Fatalf("counters %+v watermark %d", c, h.task.Watermark())
	}
}

// TestOutputOlderThanLateWatermarkFails: outputs are checked against the
// watermark for late events — the watermark the previous batch ran with —
// as in Spark. The value of each input row is its output event time; the
// record timestamp is its input event time.
func TestOutputOlderThanLateWatermarkFails(t *testing.T) {
	proc := func() processor.StatefulProcessor[string, string, string] {
		return &fnProc[string, string, string]{
			input: func(h processor.Handle, key string, rows iter.Seq[string], tv processor.TimerValues, out processor.Emitter[string]) error {
				for v := range rows {
					_ = out.Emit(v) // the error is sticky even when ignored
				}
				return nil
			},
		}
	}
	cfg := strCfg(proc, processor.EventTime)
	cfg.OutputEventTime = func(o string) int64 { ms, _ := strconv.ParseInt(o, 10, 64); return ms }
	h := &harness[string, string, string]{t: t, cfg: cfg}
	h.mustOpen("")
	res, err := h.task.RunBatch(0, []Record{h.rec("a", "0", 100)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Outputs[0].TimestampMs != 0 {
		t.Fatalf("output timestamp %d, want the output event time 0", res.Outputs[0].TimestampMs)
	}
	h.log = append(h.log, res.Changelog...)
	h.task.Commit(int64(len(h.log)))
	// Batch 2 runs at watermark 100; the previous batch had none, so an
	// output at 40 is not late yet.
	equal(t, "batch 2", h.run(0, h.rec("a", "40", 160)), []string{"a=40"})
	// Restart: the late-events watermark (100) comes back from the changelog.
	h.task.Close()
	h.mustOpen("")
	// Batch 3 runs at watermark 160 with late-events watermark 100: an
	// output at 100 is on time, one at 99 is late.
	_, err = h.task.RunBatch(0, []Record{h.rec("b", "100", 170), h.rec("b", "99", 171)})
	mustErrIs(t, err, ErrLateOutput)
	var ue *UserError
	if !errors.As(err, &ue) || ue.Method != "HandleInputRows" || ue.Key != `"b"` {
		t.Fatalf("error %v", err)
	}
	if !strings.Contains(err.Error(), "event time 99, watermark for late events 100") {
		t.Fatalf("error %q does not name the output time and the watermark", err)
	}
	h.task.Abort()
}

// TestTimerEmitsAtItsExpiry: a timer fires when the watermark passes it and
// may emit a row stamped with its own expiry (the usual window result),
// even though that is older than the watermark it fired at.
func TestTimerEmitsAtItsExpiry(t *testing.T) {
	proc := func() processor.StatefulProcessor[string, string, string] {
		return &fnProc[string, string, string]{
			input: func(h processor.Handle, key string, rows iter.Seq[string], tv processor.TimerValues, out processor.Emitter[string]) error {
				for v := range rows {
					ms, _ := strconv.ParseInt(v, 10, 64)
					if err := h.RegisterTimer(ms + 10); err != nil {
						return err
					}
				}
				return nil
			},
			timer: func(h processor.Handle, key string, tv processor.TimerValues, et processor.ExpiredTimerInfo, out processor.Emitter[string]) error {
				return out.Emit(strconv.FormatInt(et.ExpiryTimeMs, 10))
			},
		}
	}
	cfg := eventCfg(proc, 0)
	cfg.OutputEventTime = func(o string) int64 { ms, _ := strconv.ParseInt(o, 10, 64); return ms }
	h := &harness[string, string, string]{t: t, cfg: cfg}
	h.mustOpen("")
	equal(t, "batch 1", h.run(0, h.rec("a", "100", 0)), nil) // timer 110; wm -> 100
	equal(t, "batch 2", h.run(0, h.rec("a", "200", 0)), nil) // timer 210; wm -> 200
	equal(t, "batch 3", h.run(0), []string{"a=110"})         // fires at wm 200, stamped 110
	equal(t, "batch 4", h.run(0, h.rec("a", "400", 0)), nil) // timer 410; wm -> 400
	equal(t, "batch 5", h.run(0), []string{"a=210"})         // late-events wm 200 ≤ 210
}
func TestPanicInConfigCallbackIsAnError(t *testing.T) {
	cfg := eventCfg(wmProc(new([]string)), 0)
	cfg.EventTime = func(string, int64) int64 { panic("extractor") }
	h := &harness[string, string, string]{t: t, cfg: cfg}
	h.mustOpen("")
	_, err := h.task.RunBatch(0, []Record{h.rec("a", "1", 0)})
	var ue *UserError
	if !errors.As(err, &ue) || ue.Panic != "extractor" {
		t.Fatalf("error %v", err)
	}
	h.task.Abort()
	if _, err := h.task.RunBatch(0, nil); err != nil {
		t.Fatalf("task unusable after a recovered panic: %v", err)
	}
	h.task.Abort()
}

// A crash between the commit that advanced the watermark and the batch
// that fires the timers it made due must not leave those timers waiting
// for new input: after a restart the task wants a batch (regression: the
// "watermark advanced" flag lived only in memory, so a restarted idle
// partition never fired them; found by integration/crash_test.go).
func TestDueTimersFireAfterRestartWithoutInput(t *testing.T) {
	dir := t.TempDir()
	var fired []string
	h := &harness[string, string, string]{t: t, cfg: eventCfg(wmProc(&fired), 0)}
	h.mustOpen(dir)
	h.run(0, h.rec("a", "100", 0), h.rec("b", "200", 0)) // timer a@110; watermark 200
	if !h.task.NeedsBatch() {
		t.Fatal("no batch wanted after the watermark advanced")
	}
	// Crash: the timer batch never runs. Restart.
	h.task.Close()
	h.mustOpen(dir)
	if !h.task.NeedsBatch() {
		t.Fatal("restarted task with due timers wants no batch: they would wait for new input")
	}
	h.run(0)
	equal(t, "fired", fired, []string{"a@110(wm200)"})
	if h.task.NeedsBatch() {
		t.Fatal("still wants a batch after the timers fired")
	}
	// A restart of a task whose timers all fired costs one empty batch.
	h.task.Close()
	h.mustOpen(dir)
	if res, err := h.task.RunBatch(0, nil); err != nil || !res.Empty {
		t.Fatalf("batch after restart: %+v, %v", res, err)
	}
	h.task.Abort()
}
