package kstatetest_test

import (
	"context"
	"encoding/json"
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

// event is the processor's input type, decoded from every input topic's
// own format.
type event struct {
	Source string
	Value  string
}

// joiner keeps, per key, every row it saw ("source:value") and emits the
// rows of each call, so the order within a call and the history across
// calls are both visible.
type joiner struct {
	processor.Defaults[string, string]
	seen state.ListState[string]
}

func (j *joiner) Init(h processor.Handle) (err error) {
	j.seen, err = processor.NewListState(h, "seen", state.String())
	return err
}

func (j *joiner) HandleInputRows(key string, rows iter.Seq[event], _ processor.TimerValues, out processor.Emitter[string]) error {
	var call []string
	for r := range rows {
		call = append(call, r.Source+":"+r.Value)
		if err := j.seen.AppendValue(r.Source + ":" + r.Value); err != nil {
			return err
		}
	}
	all, err := j.seen.Get()
	if err != nil {
		return err
	}
	n := 0
	for range all {
		n++
	}
	return out.Emit(fmt.Sprintf("%s %s (%d)", key, strings.Join(call, ","), n))
}

// textEvent decodes "value" from a plain string topic.
type textEvent struct{ source string }

func (t textEvent) Serialize(e event) ([]byte, error) { return []byte(e.Value), nil }
func (t textEvent) Deserialize(b []byte) (event, error) {
	return event{Source: t.source, Value: string(b)}, nil
}

// jsonEvent decodes {"v": "value"} from a JSON topic.
type jsonEvent struct{}

func (jsonEvent) Serialize(e event) ([]byte, error) {
	return json.Marshal(map[string]string{"v": e.Value})
}
func (jsonEvent) Deserialize(b []byte) (event, error) {
	var m struct{ V *string }
	if err := json.Unmarshal(b, &m); err != nil || m.V == nil {
		return event{}, fmt.Errorf("not a {\"v\": ...} object: %q", b)
	}
	return event{Source: "json", Value: *m.V}, nil
}

func joinerConfig(inputs ...kstate.Input[event]) kstate.Topology[string, event, string] {
	return kstate.Topology[string, event, string]{
		Inputs:       inputs,
		KeySerde:     serde.String(),
		NewProcessor: func() processor.StatefulProcessor[string, event, string] { return &joiner{} },
		Output: kstate.Output[string, string]{
			Serde: serde.String(),
		},
	}
}

// TestTwoInputStreams is Spark's "two input streams" scenario: two topics
// with different formats feed one processor; a key's rows of both reach
// one HandleInputRows call, the first input's rows first whatever the
// arrival order, and the state built from both survives a restart.
func TestTwoInputStreams(t *testing.T) {
	cfg := joinerConfig(
		kstate.Input[event]{Topic: "clicks", ValueSerde: textEvent{"text"}},
		kstate.Input[event]{Topic: "orders", ValueSerde: jsonEvent{}},
	)
	d := kstatetest.New(t, cfg, kstatetest.Partitions(3))
	d.InputTo("orders", "a", event{Value: "o1"})
	d.InputTo("clicks", "a", event{Value: "c1"})
	d.InputTo("clicks", "b", event{Value: "c2"})
	d.InputTo("orders", "a", event{Value: "o2"})
	d.InputTo("clicks", "a", event{Value: "c3"})
	d.MustRunBatch()
	got := d.OutputValues()
	slices.Sort(got)
	if want := []string{"a text:c1,text:c3,json:o1,json:o2 (4)", "b text:c2 (1)"}; !slices.Equal(got, want) {
		t.Fatalf("outputs %q, want %q", got, want)
	}

	d.Restart()
	d.InputTo("orders", "b", event{Value: "o3"})
	d.InputRecordTo("clicks", []byte("b"), []byte("c4"), d.Now())
	d.MustRunBatch()
	if got, want := d.OutputValues(), []string{"b text:c4,json:o3 (3)"}; !slices.Equal(got, want) {
		t.Fatalf("after restart: outputs %q, want %q", got, want)
	}

	// A value only the JSON topic cannot decode meets OnDecodeError,
	// naming that topic.
	d.InputRecordTo("orders", []byte("a"), []byte("plain"), d.Now())
	var de *kstate.DecodeError
	if err := d.RunBatch(); !errors.As(err, &de) || de.Topic != "orders" || de.Part != "value" {
		t.Fatalf("undecodable JSON: %v, want a DecodeError of topic orders", err)
	}
}

// TestThreeInputStreams is Spark's "three input streams": three topics,
// three codecs (plain string, JSON, a record decoder reading a header),
// one counter per key over all of them, batch after batch.
func TestThreeInputStreams(t *testing.T) {
	fromHeader := func(rec processor.Record) (event, error) {
		for _, h := range rec.Headers {
			if h.Key == "v" {
				return event{Source: rec.Topic, Value: string(h.Value)}, nil
			}
		}
		return event{}, errors.New("no header v")
	}
	cfg := joinerConfig(
		kstate.Input[event]{Topic: "t1", ValueSerde: textEvent{"t1"}},
		kstate.Input[event]{Topic: "t2", ValueSerde: jsonEvent{}},
		kstate.Input[event]{Topic: "t3", ValueFromRecord: fromHeader},
	)
	d := kstatetest.New(t, cfg, kstatetest.Partitions(2))
	want := map[string]int{}
	for round := range 3 {
		for i, k := range []string{"x", "y", "z", "x"} {
			v := fmt.Sprintf("%d.%d", round, i)
			d.InputTo("t1", k, event{Value: v})
			d.InputTo("t2", k, event{Value: v})
			d.InputRecordTo("t3", []byte(k), nil, d.Now(), processor.Header{Key: "v", Value: []byte(v)})
			want[k] += 3
		}
		d.MustRunBatch()
		for _, o := range d.OutputValues() {
			k, rest, _ := strings.Cut(o, " ")
			if !strings.HasSuffix(rest, fmt.Sprintf("(%d)", want[k])) {
				t.Fatalf("round %d: output %q, want %d rows seen by %s", round, o, want[k], k)
			}
			// t1's rows, then t2's, then t3's.
			rows := strings.Split(strings.Fields(rest)[0], ",")
			if !slices.IsSortedFunc(rows, func(a, b string) int { return strings.Compare(src(a), src(b)) }) {
				t.Fatalf("round %d: rows %q not in input order", round, rows)
			}
		}
		if round == 1 {
			d.Restart()
		}
	}
}

// src maps a row's source to its input's position.
func src(row string) string {
	s, _, _ := strings.Cut(row, ":")
	return map[string]string{"t1": "1", "json": "2", "t3": "3"}[s]
}

// TestInputsShortForm: kstate.Topics with several topics share one
// ValueSerde.
func TestInputsShortForm(t *testing.T) {
	cfg := counterConfig()
	cfg.Inputs = kstate.Topics(serde.String(), "in1", "in2")
	d := kstatetest.New(t, cfg)
	d.InputTo("in2", "a", "x")
	d.InputTo("in1", "a", "x")
	d.Input("b", "x") // the first input topic
	d.MustRunBatch()
	got := d.OutputValues()
	slices.Sort(got)
	if want := []string{"a=2", "b=1"}; !slices.Equal(got, want) {
		t.Fatalf("outputs %q, want %q", got, want)
	}
}

// TestInputsConfigErrors: the input list is validated by kstate.New.
func TestInputsConfigErrors(t *testing.T) {
	opts := kstate.Options{ApplicationID: "joiner", Kafka: kstate.KafkaOptions{Brokers: []string{"localhost:9092"}}}
	base := func() kstate.Topology[string, event, string] {
		c := joinerConfig(kstate.Input[event]{Topic: "a", ValueSerde: textEvent{}})
		c.Output.Topic = "out"
		return c
	}
	for _, tc := range []struct {
		name string
		edit func(*kstate.Topology[string, event, string])
		want string
	}{
		{"twice", func(c *kstate.Topology[string, event, string]) {
			c.Inputs = append(c.Inputs, kstate.Input[event]{Topic: "a", ValueSerde: jsonEvent{}})
		}, `input topic "a" is listed twice`},
		{"no decoder", func(c *kstate.Topology[string, event, string]) {
			c.Inputs = append(c.Inputs, kstate.Input[event]{Topic: "b"})
		}, `Inputs[1] (topic "b") needs ValueSerde or ValueFromRecord`},
		{"two decoders", func(c *kstate.Topology[string, event, string]) {
			c.Inputs[0].ValueFromRecord = func(processor.Record) (event, error) { return event{}, nil }
		}, `Inputs[0] (topic "a"): set ValueSerde or ValueFromRecord, not both`},
		{"bad topic", func(c *kstate.Topology[string, event, string]) { c.Inputs[0].Topic = "a b" }, `input topic "a b"`},
		{"none", func(c *kstate.Topology[string, event, string]) { c.Inputs = nil }, "Topology.Inputs is required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := base()
			tc.edit(&c)
			_, err := kstate.New(c, opts)
			if !errors.Is(err, kstate.ErrConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: %v, want ErrConfig with %q", err, tc.want)
			}
		})
	}
}

// TestGroupByOnDriver: records keyed by user, grouped by country through
// the repartition topic: the first batch forwards them (no output), the
// second processes them under their country; a value without a country
// is a decode error of part "group key".
func TestGroupByOnDriver(t *testing.T) {
	cfg := counterConfig()
	cfg.Inputs = kstate.Topics(serde.String(), "signins")
	cfg.GroupBy = []kstate.GroupBy[string, string]{{Topic: "signins", Key: func(_ []byte, v string) (string, error) {
		if v == "" {
			return "", errors.New("no country")
		}
		return v, nil
	}}}
	d := kstatetest.New(t, cfg, kstatetest.Partitions(4))
	for _, kv := range [][2]string{{"alice", "de"}, {"bob", "fr"}, {"carol", "de"}, {"dave", "it"}} {
		d.Input(kv[0], kv[1])
	}
	d.MustRunBatch()
	if got := d.OutputValues(); len(got) != 0 {
		t.Fatalf("first batch (forward only): outputs %q", got)
	}
	d.MustRunBatch()
	got := d.OutputValues()
	slices.Sort(got)
	if want := []string{"de=2", "fr=1", "it=1"}; !slices.Equal(got, want) {
		t.Fatalf("outputs %q, want %q", got, want)
	}
	d.Restart()
	d.Input("erin", "de")
	d.MustRunBatch()
	d.MustRunBatch()
	if got, want := d.OutputValues(), []string{"de=3"}; !slices.Equal(got, want) {
		t.Fatalf("after restart: outputs %q, want %q", got, want)
	}
	d.Input("frank", "")
	var de *kstate.DecodeError
	if err := d.RunBatch(); !errors.As(err, &de) || de.Part != "group key" || de.Topic != "signins" {
		t.Fatalf("value without a country: %v, want a DecodeError of part \"group key\"", err)
	}
}

// TestGroupByConfigErrors: GroupBy is validated by kstate.New.
func TestGroupByConfigErrors(t *testing.T) {
	opts := kstate.Options{ApplicationID: "counter", Kafka: kstate.KafkaOptions{Brokers: []string{"localhost:9092"}}}
	for _, tc := range []struct {
		name string
		g    []kstate.GroupBy[string, string]
		want string
	}{
		{"unknown topic", []kstate.GroupBy[string, string]{{Topic: "other", Key: func([]byte, string) (string, error) { return "", nil }}}, `GroupBy[0]: topic "other" is not an input topic`},
		{"no key", []kstate.GroupBy[string, string]{{Topic: "in"}}, `GroupBy[0] (topic "in"): Key is required`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := counterConfig()
			c.Output.Topic, c.Inputs, c.GroupBy = "out", kstate.Topics(serde.String(), "in"), tc.g
			if _, err := kstate.New(c, opts); !errors.Is(err, kstate.ErrConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: %v, want ErrConfig with %q", err, tc.want)
			}
		})
	}
	c := counterConfig()
	c.Output.Topic, c.Inputs = "out", kstate.Topics(serde.String(), "a", "b")
	err := kstate.SetInputOffsets(context.Background(), c, opts, map[int32]int64{0: 1})
	if !errors.Is(err, kstate.ErrConfig) || !strings.Contains(err.Error(), "one input topic") {
		t.Fatalf("SetInputOffsets with two input topics: %v, want ErrConfig", err)
	}
}

// TestInputsDeadLetterNamesTopic: an undecodable record of the second
// input topic is dead-lettered with that topic (and its own offset) in
// its headers; the first topic's rows of the batch are processed.
func TestInputsDeadLetterNamesTopic(t *testing.T) {
	cfg := joinerConfig(
		kstate.Input[event]{Topic: "clicks", ValueSerde: textEvent{"text"}},
		kstate.Input[event]{Topic: "orders", ValueSerde: jsonEvent{}},
	)
	cfg.OnDecodeError = kstate.DecodeErrorDeadLetter
	d := kstatetest.New(t, cfg)
	d.InputTo("orders", "a", event{Value: "o1"})
	d.InputRecordTo("orders", []byte("a"), []byte("not json"), d.Now())
	d.InputTo("clicks", "a", event{Value: "c1"})
	d.MustRunBatch()
	if got, want := d.OutputValues(), []string{"a text:c1,json:o1 (2)"}; !slices.Equal(got, want) {
		t.Fatalf("outputs %q, want %q", got, want)
	}
	dl := d.DeadLetters()
	if len(dl) != 1 || dl[0].Headers[kstate.HeaderSourceTopic] != "orders" || dl[0].Headers[kstate.HeaderSourceOffset] != "1" || string(dl[0].Value) != "not json" {
		t.Fatalf("dead letters %+v, want the record of orders offset 1", dl)
	}
}
