package engine

import (
	"errors"
	"fmt"
	"iter"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/serde"
	"github.com/kstate/kstate/state"
)

// counter is SPEC's counter example with all three kinds of state: a
// ValueState count, a ListState of seen values, a MapState value→count.
func counter() processor.StatefulProcessor[string, string, string] {
	var (
		count state.ValueState[int64]
		seen  state.ListState[string]
		per   state.MapState[string, int64]
	)
	return &fnProc[string, string, string]{
		init: func(h processor.Handle) (err error) {
			if count, err = processor.NewValueState(h, "count", state.Int64()); err != nil {
				return err
			}
			if seen, err = processor.NewListState(h, "seen", state.String()); err != nil {
				return err
			}
			per, err = processor.NewMapState(h, "per", state.String(), state.Int64())
			return err
		},
		input: func(h processor.Handle, key string, rows iter.Seq[string], tv processor.TimerValues, out processor.Emitter[string]) error {
			n, _, err := count.Get()
			if err != nil {
				return err
			}
			for v := range rows {
				n++
				if err := seen.AppendValue(v); err != nil {
					return err
				}
				c, _, err := per.GetValue(v)
				if err != nil {
					return err
				}
				if err := per.UpdateValue(v, c+1); err != nil {
					return err
				}
			}
			if err := count.Update(n); err != nil {
				return err
			}
			var vals []string
			list, err := seen.Get()
			if err != nil {
				return err
			}
			for v := range list {
				vals = append(vals, v)
			}
			return out.Emit(fmt.Sprintf("%d:%s", n, strings.Join(vals, ",")))
		},
	}
}

func TestCounterAcrossBatchesAndRestart(t *testing.T) {
	dir := t.TempDir()
	h := &harness[string, string, string]{t: t, cfg: strCfg(counter, processor.NoTime)}
	h.mustOpen(dir)
	got := h.run(0, h.rec("a", "x", 0), h.rec("b", "y", 0), h.rec("a", "y", 0), h.rec("a", "x", 0), h.rec("b", "y", 0))
	equal(t, "batch 1 (keys in first-appearance order, rows in offset order)", got, []string{"a=3:x,y,x", "b=2:y,y"})
	c := h.task.Counters()
	if c.RowsIn != 5 || c.RowsOut != 2 || c.Keys != 2 || c.Batches != 1 {
		t.Fatalf("counters %+v", c)
	}
	h.task.Close()
	// Reopen the RocksDB shard: state survived.
	h.mustOpen(dir)
	equal(t, "after reopen", h.run(0, h.rec("b", "z", 0)), []string{"b=3:y,y,z"})
	h.task.Close()
	// A fresh memory shard restored from the changelog only.
	h.mustOpen("")
	equal(t, "after restore", h.run(0, h.rec("a", "z", 0)), []string{"a=4:x,y,x,z"})
}

func TestQueryInfoAndBatchID(t *testing.T) {
	var ids []int64
	proc := func() processor.StatefulProcessor[string, string, string] {
		return &fnProc[string, string, string]{
			input: func(h processor.Handle, key string, rows iter.Seq[string], tv processor.TimerValues, out processor.Emitter[string]) error {
				q := h.QueryInfo()
				if q.ApplicationID != "app" || q.RunID != "run" || q.Partition != 3 {
					return fmt.Errorf("query info %+v", q)
				}
				ids = append(ids, q.BatchID)
				return nil
			},
		}
	}
	h := &harness[string, string, string]{t: t, cfg: strCfg(proc, processor.NoTime)}
	h.mustOpen("")
	h.run(0, h.rec("a", "1", 0))
	h.run(0) // empty: does not count
	h.run(0, h.rec("a", "1", 0))
	// An aborted batch keeps its id for the retry.
	if _, err := h.task.RunBatch(0, []Record{h.rec("a", "1", 0)}); err != nil {
		t.Fatal(err)
	}
	h.task.Abort()
	h.run(0, h.rec("a", "1", 0))
	if fmt.Sprint(ids) != "[0 1 2 2]" {
		t.Fatalf("batch ids %v, want [0 1 2 2]", ids)
	}
}

// timerLog registers, for every row "r<ms>" a timer at ms (and "d<ms>"
// deletes it), and logs fired timers as "key@expiry".
// wmProc emits "<key>:<value>@<wm>" per row; rows are "<eventTimeMs>" and a
// row registers a timer at its event time + 10.
func TestTTLExpiryAfterClockMoves(t *testing.T) {
	proc := func() processor.StatefulProcessor[string, string, string] {
		var v state.ValueState[string]
		return &fnProc[string, string, string]{
			init: func(h processor.Handle) (err error) {
				v, err = processor.NewValueState(h, "last", state.String(), state.WithTTL(time.Second))
				return err
			},
			input: func(h processor.Handle, key string, rows iter.Seq[string], tv processor.TimerValues, out processor.Emitter[string]) error {
				for r := range rows {
					if r == "get" {
						s, ok, err := v.Get()
						if err != nil {
							return err
						}
						if !ok {
							s = "<absent>"
						}
						if err := out.Emit(s); err != nil {
							return err
						}
						continue
					}
					if err := v.Update(r); err != nil {
						return err
					}
				}
				return nil
			},
		}
	}
	h := &harness[string, string, string]{t: t, cfg: strCfg(proc, processor.ProcessingTime)}
	h.mustOpen("")
	h.run(10_000, h.rec("k", "hello", 0), h.rec("j", "bye", 0))
	equal(t, "before expiry", h.run(10_999, h.rec("k", "get", 0)), []string{"k=hello"})
	// j expires at 11_000 without being read: cleanup still removes it.
	equal(t, "at expiry", h.run(11_000, h.rec("k", "get", 0)), []string{"k=<absent>"})
	if c := h.task.Counters(); c.TTLRemovals != 2 {
		t.Fatalf("TTL removals %d, want 2 (counters %+v)", c.TTLRemovals, c)
	}
}

func TestUserPanicAndErrorNameMethodKeyPartition(t *testing.T) {
	for _, tc := range []struct {
		name   string
		proc   *fnProc[string, string, string]
		method string
		want   string
	}{
		{"panic in input", &fnProc[string, string, string]{
			input: func(processor.Handle, string, iter.Seq[string], processor.TimerValues, processor.Emitter[string]) error {
				var s []int
				i := 3
				s[i] = 1
				return nil
			}}, "HandleInputRows", `partition 3: HandleInputRows(key "k") panicked: runtime error: index out of range [3] with length 0`},
		{"error in input", &fnProc[string, string, string]{
			input: func(processor.Handle, string, iter.Seq[string], processor.TimerValues, processor.Emitter[string]) error {
				return errors.New("bad row")
			}}, "HandleInputRows", `partition 3: HandleInputRows(key "k"): bad row`},
		{"error in init", &fnProc[string, string, string]{
			init: func(processor.Handle) error { return errors.New("no") }}, "Init", `partition 3: Init: no`},
		{"panic in init", &fnProc[string, string, string]{
			init: func(processor.Handle) error { panic("oops") }}, "Init", `partition 3: Init panicked: oops`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &harness[string, string, string]{t: t, cfg: strCfg(func() processor.StatefulProcessor[string, string, string] { return tc.proc }, processor.NoTime)}
			err := h.open("")
			t.Cleanup(func() { h.task.Close() })
			if err == nil {
				_, err = h.task.RunBatch(0, []Record{h.rec("k", "v", 0)})
			}
			var ue *UserError
			if !errors.As(err, &ue) || ue.Method != tc.method {
				t.Fatalf("error %v, want a UserError of %s", err, tc.method)
			}
			if err.Error() != tc.want {
				t.Fatalf("error\n %q, want\n %q", err.Error(), tc.want)
			}
		})
	}
}

func TestDecodeErrorNamesTopicPartitionOffset(t *testing.T) {
	cfg := Config[string, int64, string]{
		Topic: "in", Partition: 1, TimeMode: processor.NoTime,
		KeySerde: serde.String(), ValueSerde: serde.Int64(), OutputSerde: serde.String(),
		NewProcessor: func() processor.StatefulProcessor[string, int64, string] {
			return &fnProc[string, int64, string]{}
		},
	}
	h := &harness[string, int64, string]{t: t, cfg: cfg}
	h.mustOpen("")
	good, _ := state.Int64().Encode(7)
	_, err := h.task.RunBatch(0, []Record{{Offset: 41, Key: []byte("a"), Value: good}, {Offset: 42, Key: []byte("a"), Value: []byte("xyz")}})
	var de *DecodeError
	if !errors.As(err, &de) || de.Offset != 42 || de.Part != "value" {
		t.Fatalf("error %v", err)
	}
	if !strings.Contains(err.Error(), `topic "in" partition 1 offset 42`) {
		t.Fatalf("error %q", err)
	}
	h.task.Abort()
}

func TestInitialStateAppliedOnceBeforeInput(t *testing.T) {
	dir := t.TempDir()
	var calls []string
	proc := func() processor.StatefulProcessor[string, string, string] {
		var v state.ValueState[int64]
		return &fnProc[string, string, string]{
			init: func(h processor.Handle) (err error) {
				v, err = processor.NewValueState(h, "count", state.Int64())
				return err
			},
			inital: func(h processor.Handle, key string, s string, tv processor.TimerValues) error {
				calls = append(calls, "init:"+key+"="+s)
				n, _ := strconv.ParseInt(s, 10, 64)
				old, _, err := v.Get()
				if err != nil {
					return err
				}
				return v.Update(old + n)
			},
			input: func(h processor.Handle, key string, rows iter.Seq[string], tv processor.TimerValues, out processor.Emitter[string]) error {
				n, _, err := v.Get()
				if err != nil {
					return err
				}
				for range rows {
					n++
				}
				calls = append(calls, "input:"+key)
				if err := v.Update(n); err != nil {
					return err
				}
				return out.Emit(strconv.FormatInt(n, 10))
			},
		}
	}
	rows := func() []InitialRow[string] {
		mk := func(k, s string) InitialRow[string] {
			return InitialRow[string]{Key: k, KeyBytes: []byte(k), Apply: func(p any, tv processor.TimerValues) error {
				return p.(processor.InitialStateHandler[string, string]).HandleInitialState(k, s, tv)
			}}
		}
		return []InitialRow[string]{mk("x", "4"), mk("x", "6")}
	}
	h := &harness[string, string, string]{t: t, cfg: strCfg(proc, processor.NoTime)}
	h.mustOpen(dir)
	if !h.task.Fresh() || h.task.InitialStateApplied() {
		t.Fatal("new shard is not fresh")
	}
	h.task.SetInitialState(rows())
	// The first attempt aborts: the rows are applied again by the retry.
	if _, err := h.task.RunBatch(0, []Record{h.rec("x", "a", 0)}); err != nil {
		t.Fatal(err)
	}
	h.task.Abort()
	calls = nil
	out := h.run(0, Record{Offset: 0, Key: []byte("x"), Value: []byte("a")}, h.rec("x", "b", 0))
	equal(t, "outputs", out, []string{"x=12"})
	equal(t, "calls", calls, []string{"init:x=4", "init:x=6", "input:x"})
	if !h.task.InitialStateApplied() || h.task.Counters().InitialStateRows != 2 {
		t.Fatalf("applied %v counters %+v", h.task.InitialStateApplied(), h.task.Counters())
	}
	h.task.Close()
	h.mustOpen(dir)
	if h.task.Fresh() || !h.task.InitialStateApplied() {
		t.Fatal("after restart: fresh or not applied")
	}
	h.task.SetInitialState(rows()) // ignored: already applied
	calls = nil
	equal(t, "after restart", h.run(0, h.rec("x", "c", 0)), []string{"x=13"})
	equal(t, "calls", calls, []string{"input:x"})
}

func TestModeChangeAcrossRestartFails(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*Config[string, string, string])
		want   string
	}{
		{"time mode", func(c *Config[string, string, string]) { c.TimeMode = processor.EventTime },
			"partition 3: time mode changed from ProcessingTime to EventTime across restarts"},
		{"output mode", func(c *Config[string, string, string]) { c.OutputMode = processor.Append },
			"partition 3: output mode changed from Update to Append across restarts"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			var fired []string
			h := &harness[string, string, string]{t: t, cfg: strCfg(timerLog(&fired, nil), processor.ProcessingTime)}
			h.mustOpen(dir)
			h.run(0, h.rec("k", "r5", 0))
			h.task.Close()
			tc.change(&h.cfg)
			err := h.open(dir)
			h.task.Close()
			var me *ModeError
			if !errors.As(err, &me) || !strings.HasPrefix(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}

func TestMisuseErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mode   processor.TimeMode
		proc   *fnProc[string, string, string]
		target error
		msg    string
	}{
		{"timer in NoTime", processor.NoTime, &fnProc[string, string, string]{
			input: func(h processor.Handle, _ string, _ iter.Seq[string], _ processor.TimerValues, _ processor.Emitter[string]) error {
				return h.RegisterTimer(5)
			}}, processor.ErrNoTimers, "RegisterTimer(5)"},
		{"list timers in NoTime", processor.NoTime, &fnProc[string, string, string]{
			input: func(h processor.Handle, _ string, _ iter.Seq[string], _ processor.TimerValues, _ processor.Emitter[string]) error {
				_, err := h.ListTimers()
				return err
			}}, processor.ErrNoTimers, "ListTimers"},
		{"timer in Init", processor.ProcessingTime, &fnProc[string, string, string]{
			init: func(h processor.Handle) error { return h.RegisterTimer(5) }}, processor.ErrNoKey, "RegisterTimer(5) in Init"},
		{"state outside Init", processor.NoTime, &fnProc[string, string, string]{
			input: func(h processor.Handle, _ string, _ iter.Seq[string], _ processor.TimerValues, _ processor.Emitter[string]) error {
				_, err := processor.NewValueState(h, "late", state.String())
				return err
			}}, state.ErrNotDeclaring, `"late"`},
		{"DeleteIfExists outside Init", processor.NoTime, &fnProc[string, string, string]{
			input: func(h processor.Handle, _ string, _ iter.Seq[string], _ processor.TimerValues, _ processor.Emitter[string]) error {
				return h.DeleteIfExists("old")
			}}, processor.ErrNotInit, `DeleteIfExists("old")`},
		{"TTL in EventTime", processor.EventTime, &fnProc[string, string, string]{
			init: func(h processor.Handle) error {
				_, err := processor.NewValueState(h, "v", state.String(), state.WithTTL(time.Second))
				return err
			}}, state.ErrTTLNotAllowed, `"v"`},
		{"duplicate name", processor.NoTime, &fnProc[string, string, string]{
			init: func(h processor.Handle) error {
				if _, err := processor.NewValueState(h, "v", state.String()); err != nil {
					return err
				}
				_, err := processor.NewListState(h, "v", state.String())
				return err
			}}, state.ErrDuplicate, `"v"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &harness[string, string, string]{t: t, cfg: strCfg(func() processor.StatefulProcessor[string, string, string] { return tc.proc }, tc.mode)}
			err := h.open("")
			t.Cleanup(func() { h.task.Close() })
			if err == nil {
				_, err = h.task.RunBatch(0, []Record{h.rec("k", "1", 0)})
			}
			mustErrIs(t, err, tc.target)
			if !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("error %q does not name %s", err, tc.msg)
			}
		})
	}
}

func TestCloseClosesProcessorOnceAndIsIdempotent(t *testing.T) {
	closed := 0
	h := &harness[string, string, string]{t: t, cfg: strCfg(func() processor.StatefulProcessor[string, string, string] {
		return &fnProc[string, string, string]{closed: &closed}
	}, processor.NoTime)}
	h.mustOpen("")
	if _, err := h.task.RunBatch(0, []Record{h.rec("k", "1", 0)}); err != nil {
		t.Fatal(err)
	}
	if err := h.task.Close(); err != nil {
		t.Fatal(err)
	}
	if err := h.task.Close(); err != nil {
		t.Fatal(err)
	}
	if closed != 1 {
		t.Fatalf("Close called %d times", closed)
	}
	if _, err := h.task.RunBatch(0, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("batch after close: %v", err)
	}
}
