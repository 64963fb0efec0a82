package kstatetest_test

import (
	"errors"
	"fmt"
	"iter"
	"slices"
	"strings"
	"testing"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/kstatetest"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/serde"
	"github.com/kstate/kstate/state"
)

// Spark's state schema evolution scenarios on the real engine: an
// application runs with one state type, stops, and starts again (state
// restored from the changelog, local state thrown away) with another.

// evolving keeps one ValueState[S] named "state" per key: every row applies
// step, and the processor emits "key=" + show(new value).
type evolving[S any] struct {
	processor.Defaults[string, string]
	codec state.Codec[S]
	opts  []state.Option
	step  func(old S, ok bool) S
	show  func(S) string
	v     state.ValueState[S]
}

func (p *evolving[S]) Init(h processor.Handle) (err error) {
	p.v, err = processor.NewValueState(h, "state", p.codec, p.opts...)
	return err
}

func (p *evolving[S]) HandleInputRows(key string, rows iter.Seq[string], _ processor.TimerValues, out processor.Emitter[string]) error {
	v, ok, err := p.v.Get()
	if err != nil {
		return err
	}
	for range rows {
		v, ok = p.step(v, ok), true
	}
	if err := p.v.Update(v); err != nil {
		return err
	}
	if key == "boom" { // fails the batch after its state changes were staged
		return errors.New("boom")
	}
	return out.Emit(key + "=" + p.show(v))
}

// release is a processor version: the test swaps the current one between
// restarts, as a deployment would.
type release = func() processor.StatefulProcessor[string, string, string]

func evolvingConfig(current *release) kstate.Topology[string, string, string] {
	return kstate.Topology[string, string, string]{
		KeySerde:     serde.String(),
		Inputs:       kstate.Topics(serde.String(), "input"),
		NewProcessor: func() processor.StatefulProcessor[string, string, string] { return (*current)() },
		Output: kstate.Output[string, string]{
			Serde: serde.String(),
		},
	}
}

func counting[S any](c state.Codec[S], step func(S, bool) S, show func(S) string, opts ...state.Option) release {
	return func() processor.StatefulProcessor[string, string, string] {
		return &evolving[S]{codec: c, step: step, show: show, opts: opts}
	}
}

func countInt32(c state.Codec[int32]) release {
	return counting(c, func(n int32, _ bool) int32 { return n + 1 }, func(n int32) string { return fmt.Sprint(n) })
}

func countInt64(c state.Codec[int64]) release {
	return counting(c, func(n int64, _ bool) int64 { return n + 1 }, func(n int64) string { return fmt.Sprint(n) })
}

func countFloat(c state.Codec[float64]) release {
	return counting(c, func(n float64, _ bool) float64 { return n + 0.5 }, func(n float64) string { return fmt.Sprint(n) })
}

func run(t *testing.T, d *kstatetest.Driver[string, string, string], keys string, want ...string) {
	t.Helper()
	for k := range strings.FieldsSeq(keys) {
		d.Input(k, "x")
	}
	d.MustRunBatch()
	if got := d.OutputValues(); !slices.Equal(got, want) {
		t.Fatalf("outputs %q, want %q", got, want)
	}
}

type countV1 struct {
	Count int32  `avro:"count"`
	Note  string `avro:"note"`
}

type countAdded struct { // v1 + a field with a default, count widened
	Count int64  `avro:"count"`
	Note  string `avro:"note"`
	Label string `avro:"label" avrodefault:"new"`
	Seen  []int64
}

type countRemoved struct { // v1 without note
	Count int32 `avro:"count"`
}

type countReordered struct {
	Note  string `avro:"note"`
	Count int32  `avro:"count"`
}

type countRenamed struct { // count → total: remove + add
	Total int32  `avro:"total"`
	Note  string `avro:"note"`
}

type countNarrowed struct {
	Count int32 `avro:"count"`
}

type countWide struct {
	Count int64 `avro:"count"`
}

type countRetyped struct {
	Count string `avro:"count"`
}

type countPointer struct {
	Count *int32 `avro:"count"`
}

func TestEvolutionAllowed(t *testing.T) {
	v1 := counting(state.Avro[countV1](),
		func(c countV1, _ bool) countV1 { c.Count++; c.Note = "v1"; return c },
		func(c countV1) string { return fmt.Sprintf("%d/%s", c.Count, c.Note) })
	cases := []struct {
		name string
		next release
		want []string // after the restart: a (2 before) and c (new)
		b    string   // b (1 before), after another restart
	}{
		{"add field: old rows get the default", counting(state.Avro[countAdded](),
			func(c countAdded, _ bool) countAdded { c.Count++; c.Seen = append(c.Seen, c.Count); return c },
			func(c countAdded) string { return fmt.Sprintf("%d/%s/%s/%v", c.Count, c.Note, c.Label, c.Seen) }),
			[]string{"a=3/v1/new/[3]", "c=1///[1]"}, "b=2/v1/new/[2]"},
		{"remove field continues", counting(state.Avro[countRemoved](),
			func(c countRemoved, _ bool) countRemoved { c.Count++; return c },
			func(c countRemoved) string { return fmt.Sprint(c.Count) }),
			[]string{"a=3", "c=1"}, "b=2"},
		{"reorder fields continues", counting(state.Avro[countReordered](),
			func(c countReordered, _ bool) countReordered { c.Count++; return c },
			func(c countReordered) string { return fmt.Sprintf("%d/%s", c.Count, c.Note) }),
			[]string{"a=3/v1", "c=1/"}, "b=2/v1"},
		{"rename is remove + add: the count restarts", counting(state.Avro[countRenamed](),
			func(c countRenamed, _ bool) countRenamed { c.Total++; return c },
			func(c countRenamed) string { return fmt.Sprintf("%d/%s", c.Total, c.Note) }),
			[]string{"a=1/v1", "c=1/"}, "b=1/v1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			current := v1
			d := kstatetest.New(t, evolvingConfig(&current))
			run(t, d, "a a b", "a=2/v1", "b=1/v1")
			current = tc.next
			d.Restart()
			run(t, d, "a c", tc.want...)
			// A key untouched since the upgrade is still read from its
			// old version, after another restore.
			d.Restart()
			run(t, d, "b", tc.b)
		})
	}
}

func TestEvolutionPrimitiveUpcast(t *testing.T) {
	for _, keep := range []bool{false, true} {
		t.Run(fmt.Sprintf("keepLocal=%v", keep), func(t *testing.T) {
			var opts []kstatetest.RestartOption
			if keep {
				opts = append(opts, kstatetest.KeepLocalState())
			}
			current := countInt32(state.Int32())
			d := kstatetest.New(t, evolvingConfig(&current))
			run(t, d, "a a b", "a=2", "b=1")
			current = countInt64(state.Int64())
			d.Restart(opts...)
			run(t, d, "a", "a=3")
			if n, ok := kstatetest.ValueOf(d, "b", "state", state.Int64()); !ok || n != 1 {
				t.Fatalf("b = %d, %v; want 1 (written as int32, read as int64)", n, ok)
			}
			d.Restart(opts...)
			run(t, d, "a b", "a=4", "b=2")
		})
	}
	t.Run("float32→float64", func(t *testing.T) {
		current := counting(state.Float32(), func(n float32, _ bool) float32 { return n + 0.5 }, func(n float32) string { return fmt.Sprint(n) })
		d := kstatetest.New(t, evolvingConfig(&current))
		run(t, d, "a a a", "a=1.5")
		current = countFloat(state.Float64())
		d.Restart()
		run(t, d, "a", "a=2")
	})
	t.Run("avro int→long", func(t *testing.T) {
		current := countInt32(state.Avro[int32]())
		d := kstatetest.New(t, evolvingConfig(&current))
		run(t, d, "a a", "a=2")
		current = countInt64(state.Avro[int64]())
		d.Restart()
		run(t, d, "a", "a=3")
	})
}

// refused restarts the application with next and checks that the start
// fails with a *state.SchemaChangeError naming the variable and both
// schemas; then the old release starts again and the state is intact.
func refused(t *testing.T, first, next release, want error, schemas ...string) {
	t.Helper()
	current := first
	d := kstatetest.New(t, evolvingConfig(&current))
	for k := range strings.FieldsSeq("a a b") {
		d.Input(k, "x")
	}
	d.MustRunBatch()
	before := d.OutputValues()
	current = next
	d.Input("a", "x") // queued: no batch may run it under the refused release
	err := d.RestartError()
	var sce *state.SchemaChangeError
	if !errors.As(err, &sce) || !errors.Is(err, want) {
		t.Fatalf("restart error %v (%T), want a *state.SchemaChangeError wrapping %v", err, err, want)
	}
	var ue *kstate.UserError
	if !errors.As(err, &ue) || ue.Method != "Init" {
		t.Fatalf("restart error %v: want a kstate.UserError of Init", err)
	}
	if sce.Variable != "state" {
		t.Fatalf("SchemaChangeError.Variable = %q", sce.Variable)
	}
	for _, s := range append([]string{`"state"`}, schemas...) {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not name %s", err, s)
		}
	}
	t.Logf("refused: %v", err)
	current = first
	d.Restart()
	d.MustRunBatch() // the queued row of a
	if got := d.OutputValues(); len(before) != 2 || len(got) != 1 || !strings.HasPrefix(got[0], "a=") || got[0] == before[0] {
		t.Fatalf("outputs %q, then after the refused start %q: want a's count to go on", before, got)
	}
}

func TestEvolutionRefusedAtStartup(t *testing.T) {
	count1 := func(c countWide, _ bool) countWide { c.Count++; return c }
	showWide := func(c countWide) string { return fmt.Sprint(c.Count) }
	wide := counting(state.Avro[countWide](), count1, showWide)
	t.Run("primitive narrowing int64→int32", func(t *testing.T) {
		refused(t, countInt64(state.Int64()), countInt32(state.Int32()), state.ErrSchemaIncompatible, "int64", "int32", "narrowing")
	})
	t.Run("primitive narrowing float64→float32", func(t *testing.T) {
		refused(t, countFloat(state.Float64()),
			counting(state.Float32(), func(n float32, _ bool) float32 { return n + 1 }, func(n float32) string { return fmt.Sprint(n) }),
			state.ErrSchemaIncompatible, "float64", "float32", "narrowing")
	})
	t.Run("primitive type change int64→string", func(t *testing.T) {
		refused(t, countInt64(state.Int64()),
			counting(state.String(), func(s string, _ bool) string { return s + "x" }, func(s string) string { return s }),
			state.ErrSchemaIncompatible, "int64", "string", "type changed")
	})
	t.Run("codec change int64→avro long", func(t *testing.T) {
		refused(t, countInt64(state.Int64()), countInt64(state.Avro[int64]()), state.ErrSchemaIncompatible, "int64", `avro:"long"`, "codec changed")
	})
	t.Run("avro narrowing long→int", func(t *testing.T) {
		refused(t, wide, counting(state.Avro[countNarrowed](),
			func(c countNarrowed, _ bool) countNarrowed { c.Count++; return c },
			func(c countNarrowed) string { return fmt.Sprint(c.Count) }),
			state.ErrSchemaIncompatible, `"type":"long"`, `"type":"int"`, "field count: narrowing long → int")
	})
	t.Run("avro type change long→string", func(t *testing.T) {
		refused(t, wide, counting(state.Avro[countRetyped](),
			func(c countRetyped, _ bool) countRetyped { c.Count += "x"; return c },
			func(c countRetyped) string { return c.Count }),
			state.ErrSchemaIncompatible, `"type":"long"`, `"type":"string"`, "field count: type changed from long to string")
	})
	t.Run("avro value→pointer", func(t *testing.T) {
		refused(t, counting(state.Avro[countNarrowed](),
			func(c countNarrowed, _ bool) countNarrowed { c.Count++; return c },
			func(c countNarrowed) string { return fmt.Sprint(c.Count) }),
			counting(state.Avro[countPointer](),
				func(c countPointer, _ bool) countPointer { n := int32(1); c.Count = &n; return c },
				func(c countPointer) string { return "p" }),
			state.ErrSchemaIncompatible, `"type":"int"`, `["null","int"]`)
	})
	t.Run("threshold exceeded", func(t *testing.T) {
		max := state.WithMaxSchemaVersions(2)
		current := counting(state.Avro[countRemoved](), func(c countRemoved, _ bool) countRemoved { c.Count++; return c },
			func(c countRemoved) string { return fmt.Sprint(c.Count) }, max)
		d := kstatetest.New(t, evolvingConfig(&current))
		run(t, d, "a", "a=1")
		// Version 2: a field added.
		current = counting(state.Avro[countV1](), func(c countV1, _ bool) countV1 { c.Count++; return c },
			func(c countV1) string { return fmt.Sprint(c.Count) }, max)
		d.Restart()
		run(t, d, "a", "a=2")
		// Back to version 1 (a rollback) is no new version.
		current = counting(state.Avro[countRemoved](), func(c countRemoved, _ bool) countRemoved { c.Count++; return c },
			func(c countRemoved) string { return fmt.Sprint(c.Count) }, max)
		d.Restart()
		run(t, d, "a", "a=3")
		// Version 3: refused.
		current = counting(state.Avro[countAdded](), func(c countAdded, _ bool) countAdded { c.Count++; return c },
			func(c countAdded) string { return fmt.Sprint(c.Count) }, max)
		err := d.RestartError()
		var sce *state.SchemaChangeError
		if !errors.As(err, &sce) || !errors.Is(err, state.ErrTooManySchemaVersions) || !strings.Contains(err.Error(), "2 schema versions") {
			t.Fatalf("restart error %v, want too many schema versions", err)
		}
		t.Logf("refused: %v", err)
		// The default limit (16) lets it through.
		current = counting(state.Avro[countAdded](), func(c countAdded, _ bool) countAdded { c.Count++; return c },
			func(c countAdded) string { return fmt.Sprint(c.Count) })
		d.Restart()
		run(t, d, "a", "a=4")
	})
}

// keyed keeps a MapState[UK, MV] "m" (a count under one user key) and a
// ListState[E] "l" (one element per row) per key.
type keyed[UK, MV, E any] struct {
	processor.Defaults[string, string]
	kc   state.Codec[UK]
	uk   UK
	vc   state.Codec[MV]
	toV  func(int64) MV
	ofV  func(MV) int64
	ec   state.Codec[E]
	elem func(n int64) E
	show func(E) string
	opts []state.Option // of both variables
	m    state.MapState[UK, MV]
	l    state.ListState[E]
}

func (p *keyed[UK, MV, E]) Init(h processor.Handle) (err error) {
	if p.m, err = processor.NewMapState(h, "m", p.kc, p.vc, p.opts...); err != nil {
		return err
	}
	p.l, err = processor.NewListState(h, "l", p.ec, p.opts...)
	return err
}

func (p *keyed[UK, MV, E]) HandleInputRows(key string, rows iter.Seq[string], _ processor.TimerValues, out processor.Emitter[string]) error {
	v, _, err := p.m.GetValue(p.uk)
	if err != nil {
		return err
	}
	n := p.ofV(v)
	for range rows {
		n++
		if err := p.l.AppendValue(p.elem(n)); err != nil {
			return err
		}
	}
	if err := p.m.UpdateValue(p.uk, p.toV(n)); err != nil {
		return err
	}
	seq, err := p.l.Get()
	if err != nil {
		return err
	}
	var parts []string
	for e := range seq {
		parts = append(parts, p.show(e))
	}
	return out.Emit(fmt.Sprintf("%s=%d %s", key, n, strings.Join(parts, ",")))
}

type elemV1 struct {
	N int32 `avro:"n"`
}

type elemV2 struct {
	Tag string `avro:"tag" avrodefault:"old"`
	N   int64  `avro:"n"`
}

// TestEvolutionListAndMap: a list's elements and a map's values written
// under an older Avro schema read under the new one, in both layouts
// (state.Packed rewrites a packed key's whole value under the new schema at
// its next write).
func TestEvolutionListAndMap(t *testing.T) {
	for _, packed := range []bool{false, true} {
		t.Run(fmt.Sprintf("packed=%v", packed), func(t *testing.T) {
			var opts []state.Option
			if packed {
				opts = append(opts, state.Packed())
			}
			evolutionListAndMap(t, opts)
		})
	}
}

func evolutionListAndMap(t *testing.T, opts []state.Option) {
	v1 := func() processor.StatefulProcessor[string, string, string] {
		return &keyed[string, int32, elemV1]{kc: state.Avro[string](), uk: "n", opts: opts,
			vc: state.Avro[int32](), toV: func(n int64) int32 { return int32(n) }, ofV: func(n int32) int64 { return int64(n) },
			ec: state.Avro[elemV1](), elem: func(n int64) elemV1 { return elemV1{N: int32(n)} },
			show: func(e elemV1) string { return fmt.Sprint(e.N) }}
	}
	v2 := func() processor.StatefulProcessor[string, string, string] {
		return &keyed[string, int64, elemV2]{kc: state.Avro[string](), uk: "n", opts: opts,
			vc: state.Avro[int64](), toV: func(n int64) int64 { return n }, ofV: func(n int64) int64 { return n },
			ec: state.Avro[elemV2](), elem: func(n int64) elemV2 { return elemV2{N: n, Tag: "v2"} },
			show: func(e elemV2) string { return fmt.Sprintf("%d:%s", e.N, e.Tag) }}
	}
	current := v1
	d := kstatetest.New(t, evolvingConfig(&current))
	run(t, d, "a a", "a=2 1,2")
	current = v2
	d.Restart()
	run(t, d, "a", "a=3 1:old,2:old,3:v2")
	d.Restart()
	run(t, d, "a", "a=4 1:old,2:old,3:v2,4:v2")

	// A changed map key schema is refused.
	current = func() processor.StatefulProcessor[string, string, string] {
		return &keyed[int64, int64, elemV2]{kc: state.Avro[int64](), uk: 1, opts: opts,
			vc: state.Avro[int64](), toV: func(n int64) int64 { return n }, ofV: func(n int64) int64 { return n },
			ec: state.Avro[elemV2](), elem: func(n int64) elemV2 { return elemV2{N: n} },
			show: func(elemV2) string { return "" }}
	}
	err := d.RestartError()
	var sce *state.SchemaChangeError
	if !errors.As(err, &sce) || !sce.Key || sce.Variable != "m" || !strings.Contains(err.Error(), `avro:"string"`) || !strings.Contains(err.Error(), `avro:"long"`) {
		t.Fatalf("restart error %v, want a key schema change of m", err)
	}
	t.Logf("refused: %v", err)
}

// The first batch after an upgrade fails mid-way: its state changes (under
// the new schema version) are discarded, the new version's registry entry
// is kept staged and committed by the next batch, and the counts are exact.
func TestEvolutionFirstBatchAborted(t *testing.T) {
	current := countInt32(state.Int32())
	d := kstatetest.New(t, evolvingConfig(&current))
	run(t, d, "a a", "a=2")
	current = countInt64(state.Int64())
	d.Restart()
	d.Input("a", "x")
	d.Input("boom", "x")
	var ue *kstate.UserError
	if err := d.RunBatch(); !errors.As(err, &ue) || ue.Key != `"boom"` {
		t.Fatalf("RunBatch = %v, want the boom key's error", err)
	}
	if got := d.OutputValues(); len(got) != 0 {
		t.Fatalf("aborted batch emitted %q", got)
	}
	run(t, d, "a", "a=3")
	d.Restart()
	run(t, d, "a a", "a=5")
	if n, ok := kstatetest.ValueOf(d, "a", "state", state.Int64()); !ok || n != 5 {
		t.Fatalf("a = %d, %v", n, ok)
	}
}
