package shard_test

import (
	"maps"
	"slices"
	"testing"

	"github.com/kstate/kstate/internal/shard"
	"github.com/kstate/kstate/state"
)

func TestValueState(t *testing.T) {
	type step struct {
		op      string // update, clear
		v       int64
		key     string
		wantOK  bool
		wantVal int64
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"absent", []step{{op: "get", key: "a"}}},
		{"update then get", []step{{op: "update", key: "a", v: 5}, {op: "get", key: "a", wantOK: true, wantVal: 5}}},
		{"update replaces", []step{{op: "update", key: "a", v: 5}, {op: "update", key: "a", v: -7}, {op: "get", key: "a", wantOK: true, wantVal: -7}}},
		{"zero value exists", []step{{op: "update", key: "a", v: 0}, {op: "get", key: "a", wantOK: true, wantVal: 0}}},
		{"clear", []step{{op: "update", key: "a", v: 5}, {op: "clear", key: "a"}, {op: "get", key: "a"}}},
		{"clear absent", []step{{op: "clear", key: "a"}, {op: "get", key: "a"}}},
		{"update after clear", []step{{op: "update", key: "a", v: 1}, {op: "clear", key: "a"}, {op: "update", key: "a", v: 2}, {op: "get", key: "a", wantOK: true, wantVal: 2}}},
		{"scoped to key", []step{{op: "update", key: "a", v: 1}, {op: "get", key: "b"}, {op: "get", key: "a", wantOK: true, wantVal: 1}}},
		{"empty key is a key", []step{{op: "update", key: "", v: 3}, {op: "get", key: "a"}, {op: "get", key: "", wantOK: true, wantVal: 3}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Run every sequence twice: all in one batch, and one batch per step
			// (reads then come from the store rather than from staging).
			for _, perStep := range []bool{false, true} {
				s := openMem(t, false)
				var v state.ValueState[int64]
				declare(t, s, func() { v = must[state.ValueState[int64]](t)(shard.NewValueState(s, "v", state.Int64())) })
				s.Begin(1000)
				for i, st := range tc.steps {
					if perStep && i > 0 {
						_, err := s.Finish()
						noErr(t, err)
						noErr(t, s.Commit(int64(i)))
						s.Begin(1000)
					}
					s.SetCurrentKey([]byte(st.key))
					switch st.op {
					case "update":
						noErr(t, v.Update(st.v))
					case "clear":
						noErr(t, v.Clear())
					case "get":
						got, ok, err := v.Get()
						noErr(t, err)
						ex, err := v.Exists()
						noErr(t, err)
						if ok != st.wantOK || ex != st.wantOK || got != st.wantVal {
							t.Fatalf("step %d (perStep=%v): Get = %d, %v; Exists = %v; want %d, %v", i, perStep, got, ok, ex, st.wantVal, st.wantOK)
						}
					}
				}
				s.Abort()
			}
		})
	}
}

func TestValueStateStructAndNil(t *testing.T) {
	type point struct{ X, Y int }
	s := openMem(t, false)
	var v state.ValueState[*point]
	declare(t, s, func() { v = must[state.ValueState[*point]](t)(shard.NewValueState(s, "p", state.JSON[*point]())) })
	s.Begin(0)
	s.SetCurrentKey([]byte("k"))
	wantErr(t, v.Update(nil), state.ErrNilValue, `ValueState "p"`, "Update")
	noErr(t, v.Update(&point{1, 2}))
	got, ok, err := v.Get()
	if err != nil || !ok || *got != (point{1, 2}) {
		t.Fatalf("Get = %+v, %v, %v", got, ok, err)
	}
}

func TestListState(t *testing.T) {
	type step struct {
		op   string // put, append, appendList, clear, get
		vs   []string
		key  string
		want []string
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"absent", []step{{op: "get", key: "a"}}},
		{"append order", []step{{op: "append", key: "a", vs: []string{"x"}}, {op: "append", key: "a", vs: []string{"y"}}, {op: "appendList", key: "a", vs: []string{"z", "w"}}, {op: "get", key: "a", want: []string{"x", "y", "z", "w"}}}},
		{"put replaces longer", []step{{op: "appendList", key: "a", vs: []string{"1", "2", "3"}}, {op: "put", key: "a", vs: []string{"x"}}, {op: "get", key: "a", want: []string{"x"}}}},
		{"put replaces shorter", []step{{op: "put", key: "a", vs: []string{"1"}}, {op: "put", key: "a", vs: []string{"x", "y", "z"}}, {op: "get", key: "a", want: []string{"x", "y", "z"}}}},
		{"append after put", []step{{op: "put", key: "a", vs: []string{"1", "2"}}, {op: "append", key: "a", vs: []string{"3"}}, {op: "get", key: "a", want: []string{"1", "2", "3"}}}},
		{"clear", []step{{op: "put", key: "a", vs: []string{"1", "2"}}, {op: "clear", key: "a"}, {op: "get", key: "a"}}},
		{"append after clear", []step{{op: "put", key: "a", vs: []string{"1", "2"}}, {op: "clear", key: "a"}, {op: "append", key: "a", vs: []string{"3"}}, {op: "get", key: "a", want: []string{"3"}}}},
		{"duplicates kept", []step{{op: "appendList", key: "a", vs: []string{"x", "x"}}, {op: "append", key: "a", vs: []string{"x"}}, {op: "get", key: "a", want: []string{"x", "x", "x"}}}},
		{"scoped to key", []step{{op: "append", key: "a", vs: []string{"1"}}, {op: "append", key: "ab", vs: []string{"2"}}, {op: "get", key: "a", want: []string{"1"}}, {op: "get", key: "ab", want: []string{"2"}}, {op: "get", key: "", want: nil}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, perStep := range []bool{false, true} {
				s := openMem(t, false)
				var l state.ListState[string]
				declare(t, s, func() { l = must[state.ListState[string]](t)(shard.NewListState(s, "l", state.String())) })
				s.Begin(0)
				for i, st := range tc.steps {
					if perStep && i > 0 {
						_, err := s.Finish()
						noErr(t, err)
						noErr(t, s.Commit(int64(i)))
						s.Begin(0)
					}
					s.SetCurrentKey([]byte(st.key))
					switch st.op {
					case "put":
						noErr(t, l.Put(st.vs))
					case "append":
						noErr(t, l.AppendValue(st.vs[0]))
					case "appendList":
						noErr(t, l.AppendList(st.vs))
					case "clear":
						noErr(t, l.Clear())
					case "get":
						seq, err := l.Get()
						got := collect(t, seq, err)
						ex, err := l.Exists()
						noErr(t, err)
						if !slices.Equal(got, st.want) || ex != (len(st.want) > 0) {
							t.Fatalf("step %d (perStep=%v): Get = %q, Exists = %v; want %q", i, perStep, got, ex, st.want)
						}
					}
				}
				s.Abort()
			}
		})
	}
}

func TestListStateMisuse(t *testing.T) {
	s := openMem(t, false)
	var l state.ListState[*int]
	declare(t, s, func() { l = must[state.ListState[*int]](t)(shard.NewListState(s, "items", state.JSON[*int]())) })
	s.Begin(0)
	s.SetCurrentKey([]byte("k"))
	one := 1
	wantErr(t, l.Put(nil), state.ErrEmptyList, `ListState "items"`, "Put")
	wantErr(t, l.AppendList([]*int{}), state.ErrEmptyList, `ListState "items"`, "AppendList")
	wantErr(t, l.AppendValue(nil), state.ErrNilValue, `ListState "items"`, "AppendValue")
	wantErr(t, l.Put([]*int{&one, nil}), state.ErrNilValue, `ListState "items"`, "Put", "element 1")
	// A rejected Put must not have staged anything.
	seq, err := l.Get()
	if got := collect(t, seq, err); len(got) != 0 {
		t.Fatalf("list after rejected writes = %v", got)
	}
}

func TestMapStateOrder(t *testing.T) {
	s := openMem(t, false)
	var mi state.MapState[int64, string]
	var ms state.MapState[string, float64]
	var mf state.MapState[float64, bool]
	declare(t, s, func() {
		mi = must[state.MapState[int64, string]](t)(shard.NewMapState(s, "byInt", state.Int64(), state.String()))
		ms = must[state.MapState[string, float64]](t)(shard.NewMapState(s, "byString", state.String(), state.Float64()))
		mf = must[state.MapState[float64, bool]](t)(shard.NewMapState(s, "byFloat", state.Float64(), state.Bool()))
	})
	ints := []int64{5, -1, 0, -300, 1 << 40, -(1 << 40), 7}
	strs := []string{"b", "", "ab", "a", "B", "ba"}
	floats := []float64{2.5, -0.5, 0, -100, 1e10}
	for _, split := range []bool{false, true} {
		s.Begin(0)
		s.SetCurrentKey([]byte("k"))
		for i, k := range ints {
			if split && i == 3 { // half in the store, half staged
				_, err := s.Finish()
				noErr(t, err)
				noErr(t, s.Commit(1))
				s.Begin(0)
				s.SetCurrentKey([]byte("k"))
			}
			noErr(t, mi.UpdateValue(k, "v"))
		}
		for _, k := range strs {
			noErr(t, ms.UpdateValue(k, float64(len(k))))
		}
		for _, k := range floats {
			noErr(t, mf.UpdateValue(k, k > 0))
		}
		keys, err := mi.Keys()
		if got, want := collect(t, keys, err), slices.Sorted(slices.Values(ints)); !slices.Equal(got, want) {
			t.Fatalf("int keys = %v, want %v", got, want)
		}
		skeys, err := ms.Keys()
		if got, want := collect(t, skeys, err), slices.Sorted(slices.Values(strs)); !slices.Equal(got, want) {
			t.Fatalf("string keys = %q, want %q", got, want)
		}
		fkeys, err := mf.Keys()
		if got, want := collect(t, fkeys, err), slices.Sorted(slices.Values(floats)); !slices.Equal(got, want) {
			t.Fatalf("float keys = %v, want %v", got, want)
		}
		it, err := ms.Iterator()
		noErr(t, err)
		got := maps.Collect(it)
		if len(got) != len(strs) || got["ab"] != 2 || got[""] != 0 {
			t.Fatalf("Iterator = %v", got)
		}
		vals, err := mf.Values()
		if got := collect(t, vals, err); !slices.Equal(got, []bool{false, false, false, true, true}) {
			t.Fatalf("Values = %v", got)
		}
		noErr(t, mi.Clear())
		noErr(t, ms.Clear())
		noErr(t, mf.Clear())
		_, err = s.Finish()
		noErr(t, err)
		noErr(t, s.Commit(2))
	}
}

func TestMapStateOps(t *testing.T) {
	s := openMem(t, false)
	var m state.MapState[string, int]
	declare(t, s, func() {
		m = must[state.MapState[string, int]](t)(shard.NewMapState(s, "m", state.String(), state.Int()))
	})
	s.Begin(0)
	s.SetCurrentKey([]byte("g1"))
	check := func(k string, want int, wantOK bool) {
		t.Helper()
		v, ok, err := m.GetValue(k)
		noErr(t, err)
		c, err := m.ContainsKey(k)
		noErr(t, err)
		if v != want || ok != wantOK || c != wantOK {
			t.Fatalf("GetValue(%q) = %d, %v; ContainsKey = %v; want %d, %v", k, v, ok, c, want, wantOK)
		}
	}
	if ex, _ := m.Exists(); ex {
		t.Fatal("empty map exists")
	}
	check("a", 0, false)
	noErr(t, m.RemoveKey("a")) // no-op when absent
	noErr(t, m.UpdateValue("a", 1))
	noErr(t, m.UpdateValue("b", 2))
	noErr(t, m.UpdateValue("a", 3))
	check("a", 3, true)
	check("b", 2, true)
	s.SetCurrentKey([]byte("g2"))
	check("a", 0, false)
	if ex, _ := m.Exists(); ex {
		t.Fatal("map of another key exists")
	}
	s.SetCurrentKey([]byte("g1"))
	noErr(t, m.RemoveKey("a"))
	check("a", 0, false)
	if ex, _ := m.Exists(); !ex {
		t.Fatal("map with entry b does not exist")
	}
	noErr(t, m.Clear())
	check("b", 0, false)
	if ex, _ := m.Exists(); ex {
		t.Fatal("cleared map exists")
	}
}
