package processor_test

import (
	"errors"
	"fmt"
	"iter"
	"testing"
	"time"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/kstatetest"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/serde"
)

// emitting emits each row's value with EmitWith (timestamp = the row as
// ms), or, for a row "to:<topic>", with EmitTo to that topic.
type emitting struct {
	topics map[string]*processor.OutputTopic[string]
}

func (*emitting) Init(processor.Handle) error { return nil }

func (e *emitting) HandleInputRows(_ string, rows iter.Seq[string], _ processor.TimerValues, out processor.Emitter[string]) error {
	for v := range rows {
		if t, ok := e.topics[v]; ok || len(v) > 3 && v[:3] == "to:" {
			if t == nil {
				t = processor.NewOutputTopic(v[3:], serde.String())
			}
			if err := processor.EmitTo(out, t, v, processor.OutputMeta{}); err != nil {
				return err
			}
			continue
		}
		var ms int64
		if _, err := fmt.Sscan(v, &ms); err != nil {
			return err
		}
		meta := processor.OutputMeta{Timestamp: time.UnixMilli(ms), Headers: []processor.Header{{Key: "h", Value: []byte(v)}}}
		if err := processor.EmitWith(out, v, meta); err != nil {
			return err
		}
	}
	return nil
}

func (*emitting) HandleExpiredTimer(string, processor.TimerValues, processor.ExpiredTimerInfo, processor.Emitter[string]) error {
	return nil
}
func (*emitting) Close() error { return nil }

func emittingConfig(p *emitting, mode processor.TimeMode) kstate.Topology[string, string, string] {
	cfg := kstate.Topology[string, string, string]{
		KeySerde:     serde.String(),
		Inputs:       kstate.Topics(serde.String(), "input"),
		NewProcessor: func() processor.StatefulProcessor[string, string, string] { return p },
		TimeMode:     mode,
		Output: kstate.Output[string, string]{
			Serde: serde.String(),
		},
	}
	for _, t := range p.topics {
		cfg.Output.EmitTo = append(cfg.Output.EmitTo, t)
	}
	return cfg
}

func TestEmitWithTimestamp(t *testing.T) {
	d := kstatetest.New(t, emittingConfig(&emitting{}, processor.NoTime))
	defer d.Close()
	d.Input("a", "1700000000000")
	d.MustRunBatch()
	out := d.Outputs()
	if len(out) != 1 || !out[0].Timestamp.Equal(time.UnixMilli(1700000000000)) ||
		len(out[0].Headers) != 1 || out[0].Headers[0].Key != "h" || string(out[0].Headers[0].Value) != "1700000000000" {
		t.Fatalf("outputs %+v", out)
	}
}

func TestEmitToUndeclaredTopic(t *testing.T) {
	audit := processor.NewOutputTopic("audit", serde.String())
	d := kstatetest.New(t, emittingConfig(&emitting{topics: map[string]*processor.OutputTopic[string]{"to:audit": audit}}, processor.NoTime))
	defer d.Close()
	d.Input("a", "to:audit") // declared: fine, not among the main topic's outputs
	d.MustRunBatch()
	if n := len(d.Outputs()); n != 0 {
		t.Fatalf("%d outputs on the main topic", n)
	}
	if got := d.TopicOutputs("audit"); len(got) != 1 || string(got[0].Value) != "to:audit" || string(got[0].Key) != "a" {
		t.Fatalf("audit outputs %+v", got)
	}
	d.Input("a", "to:other")
	err := d.RunBatch()
	if !errors.Is(err, kstate.ErrUndeclaredTopic) {
		t.Fatalf("EmitTo an undeclared topic: %v", err)
	}
	t.Log(err)
}

func TestEmitWithLateTimestamp(t *testing.T) {
	d := kstatetest.New(t, emittingConfig(&emitting{}, processor.EventTime))
	defer d.Close()
	d.InputAt("a", "5000", time.UnixMilli(5000))
	d.MustRunBatch()
	d.InputAt("a", "6000", time.UnixMilli(6000))
	d.MustRunBatch() // the watermark for late events is now 5000
	d.InputAt("a", "100", time.UnixMilli(7000))
	if err := d.RunBatch(); !errors.Is(err, processor.ErrLateOutput) {
		t.Fatalf("EmitWith a timestamp older than the watermark: %v", err)
	}
}

func TestEmitWithForeignEmitter(t *testing.T) {
	out := processor.EmitterFunc[string](func(string) error { return nil })
	if err := processor.EmitWith[string](out, "x", processor.OutputMeta{}); !errors.Is(err, processor.ErrForeignEmitter) {
		t.Fatalf("EmitWith: %v", err)
	}
	if err := processor.EmitTo[string, string](out, processor.NewOutputTopic("t", serde.String()), "x", processor.OutputMeta{}); !errors.Is(err, processor.ErrForeignEmitter) {
		t.Fatalf("EmitTo: %v", err)
	}
}

// ValueFromRecord sees the record's partition, offset, timestamp and key.
func TestValueFromRecord(t *testing.T) {
	var got []processor.Record
	cfg := kstate.Topology[string, string, string]{
		KeySerde: serde.String(),
		Inputs: kstate.TopicsFromRecord(func(r processor.Record) (string, error) {
			got = append(got, r)
			return string(r.Value), nil
		}, "input"),
		NewProcessor: func() processor.StatefulProcessor[string, string, string] { return &WordCount{} },
		Output: kstate.Output[string, string]{
			Serde: serde.String(),
		},
	}
	d := kstatetest.New(t, cfg, kstatetest.ApplicationID("meta"))
	defer d.Close()
	d.InputRecord([]byte("a"), []byte("x"), time.UnixMilli(42))
	d.InputRecord([]byte("a"), []byte("y"), time.UnixMilli(43), processor.Header{Key: "trace", Value: []byte("t1")})
	d.MustRunBatch()
	p := d.Partition("a")
	if len(got) != 2 || got[1].Offset != 1 || got[1].Partition != p || !got[1].Timestamp.Equal(time.UnixMilli(43)) || string(got[1].Key) != "a" || string(got[1].Value) != "y" {
		t.Fatalf("records %+v", got)
	}
	if h := got[1].Headers; len(h) != 1 || h[0].Key != "trace" || string(h[0].Value) != "t1" || got[0].Headers != nil {
		t.Fatalf("headers %+v, %+v", got[0].Headers, h)
	}
	if fmt.Sprint(d.OutputValues()) != "[a=2]" {
		t.Fatalf("outputs %v", d.OutputValues())
	}
}

// Topology: ValueSerde or ValueFromRecord, not both; Output.EmitTo valid and
// unique.
func TestRecordConfigErrors(t *testing.T) {
	base := func() (kstate.Topology[string, string, string], kstate.Options) {
		return kstate.Topology[string, string, string]{
				Inputs:       kstate.Topics(serde.String(), "in"),
				KeySerde:     serde.String(),
				NewProcessor: func() processor.StatefulProcessor[string, string, string] { return &WordCount{} },
				Output: kstate.Output[string, string]{
					Topic: "out",
					Serde: serde.String(),
				},
			}, kstate.Options{
				ApplicationID: "x",
				Kafka: kstate.KafkaOptions{
					Brokers: []string{"localhost:9092"},
				},
			}
	}
	for name, mut := range map[string]func(*kstate.Topology[string, string, string]){
		"both decoders": func(c *kstate.Topology[string, string, string]) {
			c.Inputs[0].ValueFromRecord = func(processor.Record) (string, error) { return "", nil }
		},
		"no decoder": func(c *kstate.Topology[string, string, string]) { c.Inputs[0].ValueSerde = nil },
		"duplicate topic": func(c *kstate.Topology[string, string, string]) {
			c.Output.EmitTo = []processor.NamedTopic{processor.NewOutputTopic("a", serde.String()), processor.NewOutputTopic("a", serde.Int64())}
		},
		"bad topic name": func(c *kstate.Topology[string, string, string]) {
			c.Output.EmitTo = []processor.NamedTopic{processor.NewOutputTopic("a b", serde.String())}
		},
	} {
		c, o := base()
		mut(&c)
		if _, err := kstate.New(c, o); !errors.Is(err, kstate.ErrConfig) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
