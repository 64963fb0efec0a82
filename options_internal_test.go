package kstate

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/serde"
	"github.com/kstate/kstate/state"
)

// minimalTopology is a valid Topology with only its required fields.
func minimalTopology() Topology[string, string, string] {
	return Topology[string, string, string]{
		Inputs:       Topics(serde.String(), "in"),
		KeySerde:     serde.String(),
		NewProcessor: func() processor.StatefulProcessor[string, string, string] { return nil },
		Output:       Output[string, string]{Topic: "out", Serde: serde.String()},
	}
}

// TestOptionsZeroValueDefaults: Options with only its required fields (every
// group left at its zero value) runs with the defaults each field documents,
// the same values the flat Config filled in before the split (config.go's
// constants, written out here as numbers so that a changed constant shows).
func TestOptionsZeroValueDefaults(t *testing.T) {
	c, err := newConfig(minimalTopology(), Options{
		ApplicationID: "app",
		Kafka:         KafkaOptions{Brokers: []string{"b:9092"}},
	}).withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	for _, tc := range []struct {
		field     string
		got, want any
	}{
		// Options.InstanceID: "<hostname>-<8 hex digits>" (checked below).
		{"Kafka.TLS", c.TLS == nil, true},
		{"Kafka.SASL", c.SASL == nil, true},
		{"Kafka.ClientOptions", len(c.KafkaOptions), 0},
		{"Kafka.SessionTimeout", c.SessionTimeout, 10 * time.Second},
		{"Kafka.TransactionTimeout", c.TransactionTimeout, 10 * time.Second},
		{"Kafka.MaxRecordBytes", c.MaxRecordBytes, 1048576},
		{"Kafka.MetadataRefresh", c.MetadataRefresh, 30 * time.Second},
		{"Kafka.LeaveGroupOnShutdown", c.LeaveGroupOnShutdown, false},
		{"State.Dir", c.StateDir, filepath.Join(os.TempDir(), "kstate")},
		{"State.Backend", c.StateBackend, ""},
		{"State.Memory", c.StateMemory, int64(0)},
		{"State.CacheBytes", c.StateCacheBytes, int64(64 << 20)},
		{"State.WriteBehindBytes", c.StateWriteBehindBytes, int64(4 << 20)},
		{"State.MaxVariableSetVersions", c.MaxStateVariableSetVersions, 0}, // the store's default applies:
		{"state.DefaultMaxVariableSetVersions", state.DefaultMaxVariableSetVersions, 128},
		{"Batching.TriggerInterval", c.TriggerInterval, time.Second},
		{"Batching.MaxRecords", c.MaxBatchRecords, 0}, // adaptive:
		{"batchLimits", func() [2]int { b, m := c.batchLimits(); return [2]int{b, m} }(), [2]int{5000, 20000}},
		{"Batching.MaxWait", c.MaxBatchWait, 200 * time.Millisecond},
		{"Batching.MaxDuration", c.MaxBatchDuration, 5 * time.Minute},
		{"Batching.Pipelines", c.Pipelines, 0},
		{"Timeouts.Startup", c.StartupTimeout, 60 * time.Second},
		{"Timeouts.Shutdown", c.ShutdownTimeout, 30 * time.Second},
		{"Group.Standbys", c.Standbys, 0},
		{"Group.AcceptableLag", c.AcceptableLag, int64(10000)},
		{"Group.ProbingInterval", c.ProbingInterval, time.Minute},
		{"Group.StandbyCleanupDelay", c.StandbyCleanupDelay, 10 * time.Minute},
		{"Group.AdvertisedURL", c.AdvertisedURL, ""},
		{"Observability.HTTPAddr", c.HTTPAddr, ""},
		{"Observability.Logger", c.Logger, slog.Default()},
		{"Observability.OnStateChange", c.OnStateChange == nil, true},
		{"Observability.Clock", reflect.ValueOf(c.Clock).Pointer(), reflect.ValueOf(time.Now).Pointer()},
		{"Topology.DeadLetterTopic", c.DeadLetterTopic, "app-dlq"},
		{"Topology.TimeMode", c.TimeMode, processor.NoTime},
		{"Topology.OutputMode", c.OutputMode, processor.Append},
		{"Topology.OnDecodeError", c.OnDecodeError, DecodeErrorFail},
		{"Topology.OnKeyPartitionMismatch", c.OnKeyPartitionMismatch, KeyPartitionAllow},
		{"Topology.OnProcessingError", c.OnProcessingError, ProcessingErrorFail},
	} {
		if !reflect.DeepEqual(tc.got, tc.want) {
			t.Errorf("%s: zero value gives %v, want the documented default %v", tc.field, tc.got, tc.want)
		}
	}
	if host != "" && !regexp.MustCompile(`^`+regexp.QuoteMeta(host)+`-[0-9a-f]{8}$`).MatchString(c.InstanceID) {
		t.Errorf("Options.InstanceID: zero value gives %q, want \"<hostname>-<8 hex digits>\"", c.InstanceID)
	}
}

// TestNewConfigMapsEveryField: every leaf field of Options and Topology
// reaches the flat config that the run path reads: set alone to a non-zero
// value, it changes the config. A field added to a group but not to
// newConfig fails here.
func TestNewConfigMapsEveryField(t *testing.T) {
	zero := fingerprint(newConfig(Topology[string, string, string]{}, Options{}))
	roots := map[string]func() (reflect.Value, func() config[string, string, string]){
		"Options": func() (reflect.Value, func() config[string, string, string]) {
			o := new(Options)
			return reflect.ValueOf(o).Elem(), func() config[string, string, string] { return newConfig(Topology[string, string, string]{}, *o) }
		},
		"Topology": func() (reflect.Value, func() config[string, string, string]) {
			top := new(Topology[string, string, string])
			return reflect.ValueOf(top).Elem(), func() config[string, string, string] { return newConfig(*top, Options{}) }
		},
	}
	for name, root := range roots {
		var walk func(path []string, typ reflect.Type)
		walk = func(path []string, typ reflect.Type) {
			if typ.Kind() == reflect.Struct {
				for i := range typ.NumField() {
					walk(append(slices.Clone(path), typ.Field(i).Name), typ.Field(i).Type)
				}
				return
			}
			v, flat := root() // a fresh root with only this leaf set
			for _, f := range path {
				v = v.FieldByName(f)
			}
			field := name + "." + strings.Join(path, ".")
			setNonZero(t, field, v)
			if slices.Equal(fingerprint(flat()), zero) {
				t.Errorf("%s set to a non-zero value does not reach the flat config: add it to newConfig", field)
			}
		}
		v, _ := root()
		walk(nil, v.Type())
	}
}

// fingerprint renders c comparably: funcs, pointers and slices by whether
// they are set, other fields by value.
func fingerprint(c config[string, string, string]) []string {
	v := reflect.ValueOf(c)
	out := make([]string, v.NumField())
	for i := range v.NumField() {
		f := v.Field(i)
		switch f.Kind() {
		case reflect.Func, reflect.Pointer, reflect.Interface, reflect.Slice, reflect.Map:
			out[i] = fmt.Sprint(f.IsNil())
		default:
			out[i] = fmt.Sprint(f.Interface())
		}
	}
	return out
}

// setNonZero sets v, a leaf field, to a non-zero value of its type.
func setNonZero(t *testing.T, path string, v reflect.Value) {
	switch v.Kind() {
	case reflect.String:
		v.SetString("x")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64:
		v.SetInt(7)
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
	case reflect.Func, reflect.Pointer, reflect.Interface:
		switch {
		case v.Kind() == reflect.Func:
			v.Set(reflect.MakeFunc(v.Type(), func([]reflect.Value) []reflect.Value { panic("not called") }))
		case v.Kind() == reflect.Pointer:
			v.Set(reflect.New(v.Type().Elem()))
		case v.Type() == reflect.TypeFor[serde.Serde[string]]() || v.Type() == reflect.TypeFor[serde.Serializer[string]]():
			v.Set(reflect.ValueOf(serde.String()))
		case v.Type().Name() == "Mechanism":
			m, err := SASLFromStrings("PLAIN", "u", "p")
			if err != nil {
				t.Fatal(err)
			}
			v.Set(reflect.ValueOf(m))
		case v.Type() == reflect.TypeFor[InitialState[string]]():
			v.Set(reflect.ValueOf(InitialStateFromSeq(func(func(string, int) bool) {})))
		default:
			t.Fatalf("%s: no non-zero value for %v", path, v.Type())
		}
	default:
		t.Fatalf("%s: no non-zero value for kind %v", path, v.Kind())
	}
}

// TestNewNamesFieldPaths: a misuse error names the field as the user writes
// it, Topology.X or Options.Group.X.
func TestNewNamesFieldPaths(t *testing.T) {
	opts := Options{ApplicationID: "app", Kafka: KafkaOptions{Brokers: []string{"b:9092"}}}
	for _, tc := range []struct {
		name string
		edit func(*Topology[string, string, string], *Options)
		want string
	}{
		{"no application id", func(_ *Topology[string, string, string], o *Options) { o.ApplicationID = "" }, `Options.ApplicationID ""`},
		{"no brokers", func(_ *Topology[string, string, string], o *Options) { o.Kafka.Brokers = nil }, "Options.Kafka.Brokers is empty"},
		{"negative wait", func(_ *Topology[string, string, string], o *Options) { o.Batching.MaxWait = -1 }, "Options.Batching.MaxWait -1ns is negative"},
		{"tiny cache", func(_ *Topology[string, string, string], o *Options) { o.State.CacheBytes = 1 }, "Options.State.CacheBytes 1 bytes"},
		{"negative startup", func(_ *Topology[string, string, string], o *Options) { o.Timeouts.Startup = -1 }, "Options.Timeouts.Startup -1ns is negative"},
		{"bad http addr", func(_ *Topology[string, string, string], o *Options) { o.Observability.HTTPAddr = "80" }, `Options.Observability.HTTPAddr "80"`},
		{"no inputs", func(top *Topology[string, string, string], _ *Options) { top.Inputs = nil }, "Topology.Inputs is required"},
		{"no decoder", func(top *Topology[string, string, string], _ *Options) { top.Inputs[0].ValueSerde = nil }, `Topology.Inputs[0] (topic "in") needs ValueSerde or ValueFromRecord`},
		{"no output", func(top *Topology[string, string, string], _ *Options) { top.Output = Output[string, string]{} }, "Topology.Output.Topic is required unless Output.Sinks is set"},
		{"no output serde", func(top *Topology[string, string, string], _ *Options) { top.Output.Serde = nil }, "Topology.Output.Serde is required with Output.Topic"},
		{"emit-to twice", func(top *Topology[string, string, string], _ *Options) {
			top.Output.EmitTo = []processor.NamedTopic{processor.NewOutputTopic("a", serde.String()), processor.NewOutputTopic("a", serde.String())}
		}, `Topology.Output.EmitTo[1]: "a" is declared twice`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			top, o := minimalTopology(), opts
			tc.edit(&top, &o)
			_, err := New(top, o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: %v, want an error naming %q", err, tc.want)
			}
		})
	}
}
