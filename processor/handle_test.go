package processor_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/kstate/kstate/internal/handle"
	"github.com/kstate/kstate/internal/kv"
	"github.com/kstate/kstate/internal/shard"
	"github.com/kstate/kstate/internal/timers"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/state"
)

func newRuntime(t *testing.T, mode processor.TimeMode) (*handle.Runtime, *shard.Shard) {
	t.Helper()
	sh, err := shard.OpenShard(shard.ShardOptions{Backend: kv.NewMemory(), AllowTTL: mode == processor.ProcessingTime})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sh.Close() })
	var tm *timers.Timers
	if mode != processor.NoTime {
		tm = timers.New(sh)
	}
	return handle.NewRuntime(handle.Config{Shard: sh, Timers: tm, TimeMode: mode,
		Query: processor.QueryInfo{ApplicationID: "app", RunID: "r", Partition: 2}}), sh
}

func TestTimersPerKey(t *testing.T) {
	rt, sh := newRuntime(t, processor.ProcessingTime)
	h := rt.Handle()
	sh.Begin(0)
	rt.SetPhase(handle.PhaseInput)
	for _, k := range []string{"a", "b"} {
		rt.SetKey([]byte(k))
		for _, ms := range []int64{30, 10, 20, 10} {
			if err := h.RegisterTimer(ms); err != nil {
				t.Fatal(err)
			}
		}
	}
	rt.SetKey([]byte("a"))
	if err := h.DeleteTimer(20); err != nil {
		t.Fatal(err)
	}
	if err := h.DeleteTimer(99); err != nil { // missing: no-op
		t.Fatal(err)
	}
	ts, err := h.ListTimers()
	if err != nil || len(ts) != 2 || ts[0] != 10 || ts[1] != 30 {
		t.Fatalf("a's timers %v %v", ts, err)
	}
	rt.SetKey([]byte("b"))
	if ts, _ := h.ListTimers(); len(ts) != 3 {
		t.Fatalf("b's timers %v", ts)
	}
	rt.SetBatchID(7)
	if q := h.QueryInfo(); q != (processor.QueryInfo{ApplicationID: "app", RunID: "r", BatchID: 7, Partition: 2}) {
		t.Fatalf("query info %+v", q)
	}
}

func TestHandleMisuse(t *testing.T) {
	rt, sh := newRuntime(t, processor.NoTime)
	h := rt.Handle()
	sh.Begin(-1)
	rt.SetPhase(handle.PhaseInput)
	rt.SetKey([]byte("k"))
	for name, err := range map[string]error{
		"RegisterTimer(5)": h.RegisterTimer(5),
		"DeleteTimer(5)":   h.DeleteTimer(5),
	} {
		if !errors.Is(err, processor.ErrNoTimers) || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := h.ListTimers(); !errors.Is(err, processor.ErrNoTimers) {
		t.Errorf("ListTimers: %v", err)
	}
	if err := h.DeleteIfExists("x"); !errors.Is(err, processor.ErrNotInit) || !strings.Contains(err.Error(), `DeleteIfExists("x") in HandleInputRows`) {
		t.Errorf("DeleteIfExists: %v", err)
	}
	if _, err := processor.NewValueState(h, "late", state.String()); !errors.Is(err, state.ErrNotDeclaring) {
		t.Errorf("NewValueState outside Init: %v", err)
	}
	if _, err := processor.NewValueState[string](nil, "v", state.String()); !errors.Is(err, processor.ErrForeignHandle) {
		t.Errorf("nil handle: %v", err)
	}
	sh.Abort()

	rt2, _ := newRuntime(t, processor.EventTime)
	rt2.SetPhase(handle.PhaseInit)
	err := rt2.Handle().RegisterTimer(1)
	if !errors.Is(err, processor.ErrNoKey) || err.Error() != "processor: RegisterTimer(1) in Init: no current grouping key; only allowed in HandleInputRows, HandleExpiredTimer and HandleInitialState" {
		t.Errorf("timer in Init: %v", err)
	}
}

func TestModesAndTimerValues(t *testing.T) {
	if processor.ProcessingTime.String() != "ProcessingTime" || processor.Update.String() != "Update" || processor.TimeMode(9).Valid() {
		t.Fatal("mode strings")
	}
	tv := processor.NewTimerValues(5, -1)
	if tv.ProcessingTimeMs() != 5 || tv.WatermarkMs() != -1 {
		t.Fatal(tv)
	}
}
