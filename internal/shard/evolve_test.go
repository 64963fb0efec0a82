package shard_test

import (
	"encoding/binary"
	"errors"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/kstate/kstate/changelog"
	"github.com/kstate/kstate/internal/changelogfmt"
	"github.com/kstate/kstate/internal/kv"
	"github.com/kstate/kstate/internal/shard"
	"github.com/kstate/kstate/state"
)

// A registry entry written before the registry kept schema histories (no
// "schemas", values with schema id 0) loads: its schema is version 1, and
// a widened codec reads its values.
func TestLegacyRegistryEntryEvolves(t *testing.T) {
	store := noClose{kv.NewMemory()}
	s, err := shard.OpenShard(shard.ShardOptions{Backend: store})
	noErr(t, err)
	legacy := []byte(`{"id":1,"kind":"value","schema":"int32"}`)
	noErr(t, s.PutMeta("var/count", legacy))
	noErr(t, s.PutMeta("varid/next", binary.BigEndian.AppendUint32(nil, 2)))
	old := must[[]byte](t)(state.Int32().Encode(41))
	commit(t, s, nil, 0, func() {
		noErr(t, s.Put(changelogfmt.StateKey(1, []byte("a"), nil), changelogfmt.EncodeValue(changelog.Header{Expiry: changelog.NoExpiry}, old)))
	})
	info, ok, err := shard.ParseVarInfo(changelogfmt.MetaKey("var/count"), legacy)
	if err != nil || !ok || info.SchemaID != 1 || !slices.Equal(info.Schemas, []string{"int32"}) || info.Schema != "int32" {
		t.Fatalf("ParseVarInfo(legacy) = %+v, %v, %v", info, ok, err)
	}

	var v state.ValueState[int64]
	declare(t, s, func() { v = must[state.ValueState[int64]](t)(shard.NewValueState(s, "count", state.Int64())) })
	commit(t, s, nil, 0, func() {
		s.SetCurrentKey([]byte("a"))
		n, ok, err := v.Get()
		if err != nil || !ok || n != 41 {
			t.Fatalf("Get = %d, %v, %v; want 41 (an int32 of schema id 0)", n, ok, err)
		}
		noErr(t, v.Update(n+1))
		s.SetCurrentKey([]byte("b"))
		noErr(t, v.Update(7))
	})
	raw, ok, err := s.Get(changelogfmt.StateKey(1, []byte("a"), nil))
	noErr(t, err)
	h, p, err := changelog.DecodeValue(raw)
	noErr(t, err)
	if !ok || h.SchemaID != 2 || len(p) != 8 {
		t.Fatalf("stored header %+v, payload %x: want schema id 2 and an int64", h, p)
	}
	vars, err := s.Variables()
	noErr(t, err)
	if len(vars) != 1 || vars[0].SchemaID != 2 || !slices.Equal(vars[0].Schemas, []string{"int32", "int64"}) || vars[0].Schema != "int64" {
		t.Fatalf("Variables = %+v", vars)
	}
	noErr(t, s.Close())

	// Reopened and declared again with the same codec: no new version.
	s, err = shard.OpenShard(shard.ShardOptions{Backend: store})
	noErr(t, err)
	t.Cleanup(func() { s.Close() })
	declare(t, s, func() { v = must[state.ValueState[int64]](t)(shard.NewValueState(s, "count", state.Int64())) })
	recs := commit(t, s, nil, 0, func() {
		s.SetCurrentKey([]byte("a"))
		if n, ok, err := v.Get(); err != nil || !ok || n != 42 {
			t.Fatalf("Get = %d, %v, %v; want 42", n, ok, err)
		}
	})
	if len(recs) != 0 {
		t.Fatalf("re-declaring the same schema wrote %d records", len(recs))
	}
}

// opaque is a codec without a schema.
type opaque struct{}

func (opaque) Encode(v string) ([]byte, error) { return []byte(v), nil }
func (opaque) Decode(b []byte) (string, error) { return string(b), nil }

func TestSchemaHistoryCodecs(t *testing.T) {
	s := openMem(t, false)
	declare(t, s, func() {
		must[state.ValueState[string]](t)(shard.NewValueState[string](s, "opaque", opaque{}))
		must[state.ValueState[int64]](t)(shard.NewValueState(s, "avro", state.Avro[int64]()))
		_, err := shard.NewValueState(s, "bad", state.Avro[uint32]())
		wantErr(t, err, nil, `"bad"`, "uint32", "has no Avro schema")
		_, err = shard.NewValueState(s, "max", state.Int64(), state.WithMaxSchemaVersions(-1))
		wantErr(t, err, nil, "WithMaxSchemaVersions(-1)")
	})
	vars, err := s.Variables()
	noErr(t, err)
	if len(vars) != 2 || vars[0].Name != "avro" || vars[0].SchemaID != 1 || !slices.Equal(vars[0].Schemas, []string{`avro:"long"`}) ||
		vars[1].Name != "opaque" || vars[1].SchemaID != 0 || vars[1].Schemas != nil {
		t.Fatalf("Variables = %+v", vars)
	}
	// JSON: any change is taken (not checked), and recorded.
	s2 := openMem(t, false)
	type a struct{ X int }
	type b struct{ Y string }
	declare(t, s2, func() { must[state.ValueState[a]](t)(shard.NewValueState(s2, "j", state.JSON[a]())) })
	commit(t, s2, nil, 0, func() {})
	declare(t, s2, func() { must[state.ValueState[b]](t)(shard.NewValueState(s2, "j", state.JSON[b]())) })
	vars, err = s2.Variables()
	noErr(t, err)
	if len(vars) != 1 || vars[0].SchemaID != 2 || len(vars[0].Schemas) != 2 {
		t.Fatalf("Variables = %+v", vars)
	}
	// JSON → Avro is a codec change: refused.
	declare(t, s2, func() {
		_, err := shard.NewValueState(s2, "j", state.Avro[b]())
		var sce *state.SchemaChangeError
		if !errors.As(err, &sce) || !errors.Is(err, state.ErrSchemaIncompatible) {
			t.Fatalf("JSON → Avro: %v", err)
		}
	})
}

// custom is a codec with a schema kstate does not know.
type custom struct{ schema string }

func (custom) Encode(v string) ([]byte, error) { return []byte(v), nil }
func (custom) Decode(b []byte) (string, error) { return string(b), nil }
func (c custom) Schema() string                { return c.schema }

func TestCustomCodecSchemaCannotChange(t *testing.T) {
	s := openMem(t, false)
	declare(t, s, func() { must[state.ValueState[string]](t)(shard.NewValueState[string](s, "c", custom{"mine:v1"})) })
	commit(t, s, nil, 0, func() {})
	declare(t, s, func() {
		must[state.ValueState[string]](t)(shard.NewValueState[string](s, "c", custom{"mine:v1"}))
	})
	declare(t, s, func() {
		_, err := shard.NewValueState[string](s, "c", custom{"mine:v2"})
		wantErr(t, err, state.ErrSchemaIncompatible, "mine:v1", "mine:v2", "custom codec")
	})
}

// Spark (TransformWithStateSuite, "test that introducing TTL after restart
// fails query") fails a query whose variable gains a TTL on restart with
// STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE: a TTL is part of the variable's
// value schema. kstate refuses the declaration in Init (so Run fails at
// start-up) naming the variable and both settings; removing the TTL
// likewise. Changing the duration is accepted, as in Spark.
func TestTTLAddedOrRemovedOnRestartRefused(t *testing.T) {
	for _, tc := range []struct {
		name     string
		old, now []state.Option
		want     []string // nil: accepted
	}{
		{"added", nil, []state.Option{state.WithTTL(time.Hour)}, []string{`"v"`, "TTL change refused", "stored with no TTL", "now declared with TTL 1h0m0s"}},
		{"removed", []state.Option{state.WithTTL(time.Minute)}, nil, []string{`"v"`, "stored with TTL 1m0s", "now declared with no TTL"}},
		{"duration changed", []state.Option{state.WithTTL(time.Minute)}, []state.Option{state.WithTTL(time.Hour)}, nil},
		{"unchanged", nil, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := noClose{kv.NewMemory()}
			s, err := shard.OpenShard(shard.ShardOptions{Backend: store, AllowTTL: true})
			noErr(t, err)
			var v state.ValueState[int64]
			declare(t, s, func() { v = must[state.ValueState[int64]](t)(shard.NewValueState(s, "v", state.Int64(), tc.old...)) })
			commit(t, s, nil, 0, func() { s.SetCurrentKey([]byte("a")); noErr(t, v.Update(1)) })
			before, err := s.Variables()
			noErr(t, err)
			noErr(t, s.Close())

			s, err = shard.OpenShard(shard.ShardOptions{Backend: store, AllowTTL: true})
			noErr(t, err)
			defer s.Close()
			declare(t, s, func() { _, err = shard.NewValueState(s, "v", state.Int64(), tc.now...) })
			if tc.want == nil {
				noErr(t, err)
				return
			}
			wantErr(t, err, state.ErrTTLChanged, tc.want...)
			var sce *state.SchemaChangeError
			if !errors.As(err, &sce) || sce.Variable != "v" {
				t.Fatalf("err %v: want a *state.SchemaChangeError for \"v\"", err)
			}
			after, err := s.Variables()
			noErr(t, err)
			if !reflect.DeepEqual(before, after) {
				t.Fatalf("registry changed by a refused declaration: %+v → %+v", before, after)
			}
		})
	}
}

// Spark bounds how many times the set of a stateful operator's state
// variables may change (TransformWithStateSuite: with
// stateSchemaFilesThreshold 1, a restart that deletes countState fails with
// STATE_STORE_STATE_SCHEMA_FILES_THRESHOLD_EXCEEDED, numStateSchemaFiles 2,
// maxStateSchemaFiles 1; default 128). kstate counts versions of the set of
// declared variables per shard: the first Init that declares anything is
// version 1, every later Init that declares a new variable or drops one
// (DeleteIfExists) the next, once however many it changes. Past
// ShardOptions.MaxVariableSetVersions the declaration is refused, naming
// the variable, the limit and what to do; nothing is written.
func TestVariableSetVersionsBounded(t *testing.T) {
	store := noClose{kv.NewMemory()}
	start := func(limit int, init func(s *shard.Shard) error) error {
		t.Helper()
		s, err := shard.OpenShard(shard.ShardOptions{Backend: store, MaxVariableSetVersions: limit})
		noErr(t, err)
		defer s.Close()
		declare(t, s, func() { err = init(s) })
		if err == nil {
			commit(t, s, nil, 0, func() {})
		}
		return err
	}
	vars := func(names ...string) func(s *shard.Shard) error {
		return func(s *shard.Shard) error {
			for _, n := range names {
				if _, err := shard.NewValueState(s, n, state.Int64()); err != nil {
					return err
				}
			}
			return nil
		}
	}
	versions := func() uint32 {
		t.Helper()
		s, err := shard.OpenShard(shard.ShardOptions{Backend: store})
		noErr(t, err)
		defer s.Close()
		v, ok, err := s.GetMeta(shard.VarSetMeta)
		noErr(t, err)
		if !ok {
			return 0
		}
		return binary.BigEndian.Uint32(v)
	}
	noErr(t, start(2, vars("a", "b")))      // version 1
	noErr(t, start(2, vars("a", "b")))      // no change
	noErr(t, start(2, vars("a", "b", "c"))) // version 2
	if v := versions(); v != 2 {
		t.Fatalf("versions %d, want 2", v)
	}
	err := start(2, vars("a", "b", "c", "d"))
	wantErr(t, err, state.ErrTooManyVariableSetVersions, `"d"`, "version 3", "limit of 2", "Options.State.MaxVariableSetVersions", "raise the limit")
	err = start(2, func(s *shard.Shard) error { return s.DeleteIfExists("c") })
	wantErr(t, err, state.ErrTooManyVariableSetVersions, `dropping the variable "c"`)
	noErr(t, start(2, vars("a"))) // no longer declaring b and c keeps their data: no change
	if v := versions(); v != 2 {
		t.Fatalf("versions %d after refused changes, want 2", v)
	}
	// A higher limit, or none: the same changes go through, each start
	// counted once however many variables it adds.
	noErr(t, start(3, vars("a", "b", "c", "d", "e")))
	noErr(t, start(-1, func(s *shard.Shard) error { return s.DeleteIfExists("e") }))
	if v := versions(); v != 4 {
		t.Fatalf("versions %d, want 4", v)
	}

	// A shard written before the count existed: its registry is version 1.
	legacy := noClose{kv.NewMemory()}
	s, err := shard.OpenShard(shard.ShardOptions{Backend: legacy})
	noErr(t, err)
	noErr(t, s.PutMeta("var/count", []byte(`{"id":1,"kind":"value","schema":"int64"}`)))
	noErr(t, s.PutMeta("varid/next", binary.BigEndian.AppendUint32(nil, 2)))
	commit(t, s, nil, 0, func() {})
	noErr(t, s.Close())
	s, err = shard.OpenShard(shard.ShardOptions{Backend: legacy, MaxVariableSetVersions: 1})
	noErr(t, err)
	defer s.Close()
	declare(t, s, func() {
		must[state.ValueState[int64]](t)(shard.NewValueState(s, "count", state.Int64()))
		_, err = shard.NewValueState(s, "more", state.Int64())
	})
	wantErr(t, err, state.ErrTooManyVariableSetVersions, `"more"`, "version 2", "limit of 1")
}
