package state_test

import (
	"fmt"
	"iter"
	"strings"
	"testing"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/kstatetest"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/serde"
	"github.com/kstate/kstate/state"
)

// run feeds rows of key "k" to the processor made by newProc, one
// micro-batch per element of batches, on the real engine (kstatetest), and
// prints the outputs.
func run[O any](newProc func() processor.StatefulProcessor[string, string, O], out serde.Serde[O], batches ...[]string) {
	d := kstatetest.New(&testing.T{}, kstate.Topology[string, string, O]{
		KeySerde:     serde.String(),
		Inputs:       kstate.Topics(serde.String(), "input"),
		NewProcessor: newProc,
		Output: kstate.Output[string, O]{
			Serde: out,
		},
	}, kstatetest.ApplicationID("example"))
	defer d.Close()
	for _, rows := range batches {
		for _, r := range rows {
			d.Input("k", r)
		}
		d.MustRunBatch()
		for _, o := range d.OutputValues() {
			fmt.Println(o)
		}
	}
}

// Last remembers the last row of each key in a ValueState.
type Last struct {
	processor.Defaults[string, string]
	last state.ValueState[string]
}

func (p *Last) Init(h processor.Handle) (err error) {
	p.last, err = processor.NewValueState(h, "last", state.String())
	return err
}

func (p *Last) HandleInputRows(_ string, rows iter.Seq[string], _ processor.TimerValues, out processor.Emitter[string]) error {
	prev, ok, err := p.last.Get() // absent: ok == false
	if err != nil {
		return err
	}
	for r := range rows {
		if r == "clear" {
			if err := p.last.Clear(); err != nil {
				return err
			}
			continue
		}
		if err := p.last.Update(r); err != nil {
			return err
		}
	}
	now, exists, err := p.last.Get()
	if err != nil {
		return err
	}
	return out.Emit(fmt.Sprintf("before: %q %v, after: %q %v", prev, ok, now, exists))
}

func ExampleValueState() {
	run(func() processor.StatefulProcessor[string, string, string] { return &Last{} }, serde.String(),
		[]string{"x", "y"}, []string{"clear"}, []string{"z"})
	// Output:
	// before: "" false, after: "y" true
	// before: "y" true, after: "" false
	// before: "" false, after: "z" true
}

// History keeps every row of each key in a ListState.
type History struct {
	processor.Defaults[string, string]
	rows state.ListState[string]
}

func (p *History) Init(h processor.Handle) (err error) {
	p.rows, err = processor.NewListState(h, "rows", state.String())
	return err
}

func (p *History) HandleInputRows(_ string, rows iter.Seq[string], _ processor.TimerValues, out processor.Emitter[string]) error {
	for r := range rows {
		var err error
		switch r {
		case "reset":
			err = p.rows.Put([]string{"(reset)"}) // replaces the whole list
		default:
			err = p.rows.AppendValue(r)
		}
		if err != nil {
			return err
		}
	}
	all, err := p.rows.Get() // insertion order
	if err != nil {
		return err
	}
	s := ""
	for r := range all {
		s += r + " "
	}
	return out.Emit(strings.TrimSpace(s))
}

func ExampleListState() {
	run(func() processor.StatefulProcessor[string, string, string] { return &History{} }, serde.String(),
		[]string{"a", "b"}, []string{"c"}, []string{"reset", "d"})
	// Output:
	// a b
	// a b c
	// (reset) d
}

// Words counts each distinct row of a key in a MapState.
type Words struct {
	processor.Defaults[string, string]
	counts state.MapState[string, int64]
}

func (p *Words) Init(h processor.Handle) (err error) {
	p.counts, err = processor.NewMapState(h, "counts", state.String(), state.Int64())
	return err
}

func (p *Words) HandleInputRows(_ string, rows iter.Seq[string], _ processor.TimerValues, out processor.Emitter[string]) error {
	for r := range rows {
		if r == "-b" {
			if err := p.counts.RemoveKey("b"); err != nil {
				return err
			}
			continue
		}
		n, _, err := p.counts.GetValue(r)
		if err != nil {
			return err
		}
		if err := p.counts.UpdateValue(r, n+1); err != nil {
			return err
		}
	}
	entries, err := p.counts.Iterator() // ordered by user key
	if err != nil {
		return err
	}
	s := ""
	for w, n := range entries {
		s += fmt.Sprintf("%s=%d ", w, n)
	}
	return out.Emit(strings.TrimSpace(s))
}

func ExampleMapState() {
	run(func() processor.StatefulProcessor[string, string, string] { return &Words{} }, serde.String(),
		[]string{"b", "a", "b"}, []string{"-b", "c"})
	// Output:
	// a=1 b=2
	// a=1 c=1
}

// Avro derives the schema from the struct's tags; a field added in a
// later release reads as its avrodefault (or zero value) in older values.
func ExampleAvro() {
	type Visit struct {
		Page  string `avro:"page"`
		Count int64  `avro:"count"`
		Label string `avro:"label" avrodefault:"none"`
	}
	c := state.Avro[Visit]()
	fmt.Println(c.(state.SchemaCodec).Schema())
	b, err := c.Encode(Visit{Page: "/", Count: 3, Label: "home"})
	if err != nil {
		panic(err)
	}
	v, err := c.Decode(b)
	fmt.Printf("%d bytes: %+v %v\n", len(b), v, err)
	// Output:
	// avro:{"fields":[{"default":"","name":"page","type":"string"},{"default":0,"name":"count","type":"long"},{"default":"none","name":"label","type":"string"}],"name":"root","type":"record"}
	// 8 bytes: {Page:/ Count:3 Label:home} <nil>
}
