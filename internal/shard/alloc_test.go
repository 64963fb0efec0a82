package shard_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/kstate/kstate/internal/shard"
	"github.com/kstate/kstate/internal/timers"
	"github.com/kstate/kstate/state"
)

// TestStateWritesAllocate bounds the allocations of a state-heavy call's
// writes (ValueState.Update, four MapState.UpdateValue, ListState.AppendValue,
// a timer) with the built-in codecs: keys and values are encoded into
// reused buffers (their AppendEncode), staged values go into shared chunks
// and unit entries come from slabs. What is left is two allocations per
// call: the timer's entry in the by-time index (a skiplist node) and the
// list's remembered tail (a map key). Before, such a call allocated 33 times.
func TestStateWritesAllocate(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("allocation counts differ under -race")
	}
	s := openMem(t, false)
	var (
		v state.ValueState[int64]
		m state.MapState[string, int64]
		l state.ListState[int64]
	)
	declare(t, s, func() {
		v = must[state.ValueState[int64]](t)(shard.NewValueState(s, "v", state.Int64()))
		m = must[state.MapState[string, int64]](t)(shard.NewMapState(s, "m", state.String(), state.Int64()))
		l = must[state.ListState[int64]](t)(shard.NewListState(s, "l", state.Int64()))
	})
	tm := timers.New(s)
	const calls = 2000
	keys := make([][]byte, 2*calls)
	for i := range keys {
		keys[i] = []byte(fmt.Sprintf("key-%06d", i))
	}
	names := [4]string{"count", "sum", "min", "max"}
	next := 0
	call := func() {
		k := keys[next]
		next++
		s.SetCurrentKey(k)
		noErr(t, v.Update(int64(next)))
		for i, name := range names {
			noErr(t, m.UpdateValue(name, int64(i+next)))
		}
		noErr(t, l.AppendValue(int64(next)))
		noErr(t, tm.Register(k, 3_600_000+int64(next)))
	}
	// A first batch of the same size grows the staging layer's maps, which
	// keep their room for the next batch.
	s.Begin(0)
	for range calls {
		call()
	}
	recs, err := s.Finish()
	noErr(t, err)
	noErr(t, s.Commit(int64(len(recs))))

	s.Begin(0)
	allocs := testing.AllocsPerRun(calls-1, call) // AllocsPerRun makes one more call
	t.Logf("%.2f allocations per call", allocs)
	if allocs > 3 {
		t.Errorf("%.2f allocations per call, want at most 3", allocs)
	}
	// The staged values must be the ones written: buffers were reused.
	for _, i := range []int{calls, calls + 1, 2*calls - 1} {
		s.SetCurrentKey(keys[i])
		got, ok, err := m.GetValue("sum")
		noErr(t, err)
		if want := int64(1 + i + 1); !ok || got != want {
			t.Errorf("key %s: map sum = %d, %v; want %d", keys[i], got, ok, want)
		}
		got, ok, err = v.Get()
		noErr(t, err)
		if want := int64(i + 1); !ok || got != want {
			t.Errorf("key %s: value = %d, %v; want %d", keys[i], got, ok, want)
		}
	}
	s.Abort()
}

// appendOnlyCodec counts which encoding method the state layer used and
// fails values < 0 in both.
type appendOnlyCodec struct{ encodes, appends *int }

func (c appendOnlyCodec) Encode(v int64) ([]byte, error) {
	*c.encodes++
	return c.AppendEncode(nil, v)
}

func (c appendOnlyCodec) AppendEncode(dst []byte, v int64) ([]byte, error) {
	*c.appends++
	if v < 0 {
		return dst, fmt.Errorf("negative %d", v)
	}
	return fmt.Appendf(dst, "%020d", v), nil
}

func (appendOnlyCodec) Decode(b []byte) (int64, error) {
	var v int64
	_, err := fmt.Sscanf(string(b), "%d", &v)
	return v, err
}

// TestCodecAppendEncode: a user codec with AppendEncode is used through it
// for map keys, values and list elements, reads give back what was written,
// and its error fails the write with nothing staged.
func TestCodecAppendEncode(t *testing.T) {
	s := openMem(t, false)
	var encodes, appends int
	c := appendOnlyCodec{&encodes, &appends}
	var (
		m state.MapState[int64, int64]
		l state.ListState[int64]
	)
	declare(t, s, func() {
		m = must[state.MapState[int64, int64]](t)(shard.NewMapState(s, "m", state.Codec[int64](c), state.Codec[int64](c)))
		l = must[state.ListState[int64]](t)(shard.NewListState(s, "l", state.Codec[int64](c)))
	})
	s.Begin(0)
	s.SetCurrentKey([]byte("k"))
	noErr(t, m.UpdateValue(7, 70))
	noErr(t, m.UpdateValue(8, 80))
	noErr(t, l.AppendList([]int64{1, 2, 3}))
	if err := m.UpdateValue(9, -1); err == nil {
		t.Error("UpdateValue with a failing value encoding: no error")
	}
	if err := m.UpdateValue(-1, 1); err == nil {
		t.Error("UpdateValue with a failing key encoding: no error")
	}
	if err := l.AppendList([]int64{4, -5}); err == nil {
		t.Error("AppendList with a failing element: no error")
	}
	if encodes != 0 || appends == 0 {
		t.Errorf("Encode called %d times, AppendEncode %d: want only AppendEncode", encodes, appends)
	}
	keys, err := m.Keys()
	noErr(t, err)
	if ks := slices.Collect(keys); fmt.Sprint(ks) != "[7 8]" {
		t.Errorf("map keys %v, want [7 8]", ks)
	}
	if v, ok, err := m.GetValue(8); err != nil || !ok || v != 80 {
		t.Errorf("GetValue(8) = %d, %v, %v; want 80", v, ok, err)
	}
	got, err := l.Get()
	noErr(t, err)
	if vs := slices.Collect(got); fmt.Sprint(vs) != "[1 2 3]" {
		t.Errorf("list %v, want [1 2 3] (a failed AppendList stages nothing)", vs)
	}
	s.Abort()
}
