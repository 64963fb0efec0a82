package shard_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/kstate/kstate/changelog"
	"github.com/kstate/kstate/internal/shard"
	"github.com/kstate/kstate/state"
)

// ReadVarKey reads one variable's committed state under one grouping key:
// its registry entry and its entries under that key, nothing of other keys
// or of a batch in progress; a variable never declared is not found.
func TestReadVarKey(t *testing.T) {
	s := openMem(t, false)
	var v state.ValueState[int64]
	var m state.MapState[string, int64]
	declare(t, s, func() {
		v = must[state.ValueState[int64]](t)(shard.NewValueState(s, "count", state.Int64()))
		// A name with "count" as its prefix: its registry entry lies in
		// the range read for "count".
		m = must[state.MapState[string, int64]](t)(shard.NewMapState(s, "counts", state.String(), state.Int64()))
	})
	commit(t, s, nil, 1, func() {
		for _, k := range []string{"a", "b", "ab"} {
			s.SetCurrentKey([]byte(k))
			noErr(t, v.Update(int64(len(k))))
			noErr(t, m.UpdateValue("x", 1))
		}
	})
	// A batch in progress: not committed, not read.
	s.Begin(2)
	s.SetCurrentKey([]byte("a"))
	noErr(t, v.Update(99))

	entries, info, ok, err := shard.ReadVarKey(s.ReadCommitted, "count", []byte("a"))
	if err != nil || !ok {
		t.Fatalf("ReadVarKey(count, a) = %v, %v", ok, err)
	}
	if info.Name != "count" || info.Kind != "value" {
		t.Fatalf("info %+v, want the ValueState count", info)
	}
	var metas, states []string
	for k, val := range entries {
		d, err := changelog.DecodeKey([]byte(k))
		if err != nil {
			t.Fatal(err)
		}
		switch d.Kind {
		case changelog.KindMeta:
			metas = append(metas, d.Name)
		case changelog.KindState:
			if d.VarID != info.ID || string(d.GroupKey) != "a" {
				t.Fatalf("read the entry of var %d key %q", d.VarID, d.GroupKey)
			}
			_, payload, err := changelog.DecodeValue(val)
			if err != nil {
				t.Fatal(err)
			}
			n, err := state.Int64().Decode(payload)
			if err != nil || n != 1 {
				t.Fatalf("value of a = %d, %v; want the committed 1", n, err)
			}
			states = append(states, string(d.GroupKey))
		default:
			t.Fatalf("read a %s key", d.Kind)
		}
	}
	slices.Sort(metas)
	if !slices.Equal(metas, []string{"var/count", "var/counts"}) || !slices.Equal(states, []string{"a"}) {
		t.Fatalf("read registry entries %q and state of keys %q; want var/count (var/counts shares its prefix) and a", metas, states)
	}

	entries, _, ok, err = shard.ReadVarKey(s.ReadCommitted, "missing", []byte("a"))
	if err != nil || ok || len(entries) != 0 {
		t.Fatalf("ReadVarKey(missing) = %q, %v, %v; want not found", entries, ok, err)
	}
	noErr(t, s.Close())
	if _, _, _, err := shard.ReadVarKey(s.ReadCommitted, "count", []byte("a")); !errors.Is(err, state.ErrClosed) {
		t.Fatalf("ReadVarKey after Close: %v, want state.ErrClosed", err)
	}
}
