package state_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/kstate/kstate/state"
)

type address struct {
	City string `avro:"city"`
	Zip  int32  `avro:"zip" avrodefault:"75001"`
}

type session struct {
	User     string             `avro:"user"`
	Clicks   int64              `avro:"clicks"`
	Score    float64            `avro:"score" avrodefault:"1.5"`
	Ratio    float32            `avro:"ratio"`
	Active   bool               `avro:"active" avrodefault:"true"`
	Raw      []byte             `avro:"raw"`
	Pages    []string           `avro:"pages"`
	Counts   map[string]int32   `avro:"counts"`
	Home     address            `avro:"home"`
	Work     *address           `avro:"work"`
	Past     []address          `avro:"past"`
	Tags     map[string]address `avro:"tags" avrodefault:"{}"`
	N        int                `avro:"n"`
	Skipped  string             `avro:"-"`
	internal int                //lint:ignore U1000 an unexported field stays out of the schema
}

func TestAvroSchemaDerivation(t *testing.T) {
	got := state.Avro[session]().(state.SchemaCodec).Schema()
	want := state.AvroSchemaPrefix + `{"fields":[` +
		`{"default":"","name":"user","type":"string"},` +
		`{"default":0,"name":"clicks","type":"long"},` +
		`{"default":1.5,"name":"score","type":"double"},` +
		`{"default":0,"name":"ratio","type":"float"},` +
		`{"default":true,"name":"active","type":"boolean"},` +
		`{"default":"","name":"raw","type":"bytes"},` +
		`{"default":[],"name":"pages","type":{"items":"string","type":"array"}},` +
		`{"default":{},"name":"counts","type":{"type":"map","values":"int"}},` +
		`{"default":{"city":"","zip":75001},"name":"home","type":{"fields":[{"default":"","name":"city","type":"string"},{"default":75001,"name":"zip","type":"int"}],"name":"home","namespace":"root","type":"record"}},` +
		`{"default":null,"name":"work","type":["null",{"fields":[{"default":"","name":"city","type":"string"},{"default":75001,"name":"zip","type":"int"}],"name":"work","namespace":"root","type":"record"}]},` +
		`{"default":[],"name":"past","type":{"items":{"fields":[{"default":"","name":"city","type":"string"},{"default":75001,"name":"zip","type":"int"}],"name":"item","namespace":"root.past","type":"record"},"type":"array"}},` +
		`{"default":{},"name":"tags","type":{"type":"map","values":{"fields":[{"default":"","name":"city","type":"string"},{"default":75001,"name":"zip","type":"int"}],"name":"value","namespace":"root.tags","type":"record"}}},` +
		`{"default":0,"name":"n","type":"long"}` +
		`],"name":"root","type":"record"}`
	if got != want {
		t.Fatalf("schema\n got %s\nwant %s", got, want)
	}
	for _, c := range []struct {
		schema string
		codec  state.SchemaCodec
	}{
		{`"int"`, state.Avro[int32]().(state.SchemaCodec)},
		{`"long"`, state.Avro[int64]().(state.SchemaCodec)},
		{`"long"`, state.Avro[int]().(state.SchemaCodec)},
		{`"double"`, state.Avro[float64]().(state.SchemaCodec)},
		{`"string"`, state.Avro[string]().(state.SchemaCodec)},
		{`"bytes"`, state.Avro[[]byte]().(state.SchemaCodec)},
		{`["null","long"]`, state.Avro[*int64]().(state.SchemaCodec)},
		{`{"items":"boolean","type":"array"}`, state.Avro[[]bool]().(state.SchemaCodec)},
	} {
		if got := c.codec.Schema(); got != state.AvroSchemaPrefix+c.schema {
			t.Errorf("schema %s, want %s", got, c.schema)
		}
	}
}

func avroRoundTrip[T any](t *testing.T, v T) {
	t.Helper()
	c := state.Avro[T]()
	b, err := c.Encode(v)
	if err != nil {
		t.Fatalf("Encode(%#v): %v", v, err)
	}
	got, err := c.Decode(b)
	if err != nil {
		t.Fatalf("Decode(%x): %v", b, err)
	}
	if !reflect.DeepEqual(got, v) {
		t.Fatalf("round trip of %#v gave %#v", v, got)
	}
	b2, _ := c.Encode(v)
	if string(b) != string(b2) {
		t.Fatalf("encoding of %#v is not deterministic", v)
	}
}

func TestAvroRoundTrip(t *testing.T) {
	avroRoundTrip(t, int32(-7))
	avroRoundTrip(t, int64(1)<<60)
	avroRoundTrip(t, -3)
	avroRoundTrip(t, float32(1.25))
	avroRoundTrip(t, 2.5)
	avroRoundTrip(t, "héllo")
	avroRoundTrip(t, []byte{0, 1, 255})
	avroRoundTrip(t, true)
	n := int64(9)
	avroRoundTrip(t, &n)
	avroRoundTrip(t, []int32{1, 2, 3})
	avroRoundTrip(t, map[string]string{"a": "b"})
	avroRoundTrip(t, session{
		User: "ann", Clicks: 3, Score: 0.5, Ratio: 2, Active: true, Raw: []byte("r"),
		Pages: []string{"/", "/x"}, Counts: map[string]int32{"x": 1},
		Home: address{"Paris", 75002}, Work: &address{"Lyon", 69001},
		Past: []address{{"Nice", 6000}}, Tags: map[string]address{"t": {"Metz", 57000}}, N: -1,
	})
}

// A value written under an older schema decodes with DecoderFor into
// the new type: fields matched by name, the added one defaulted, the
// removed one dropped, int widened to long.
func TestAvroResolve(t *testing.T) {
	type v1 struct {
		ID     int32  `avro:"id"`
		Name   string `avro:"name"`
		Legacy string `avro:"legacy"`
	}
	type v2 struct {
		Name  string  `avro:"name"`
		ID    int64   `avro:"id"`
		Email string  `avro:"email" avrodefault:"none@example"`
		Home  address `avro:"home"`
	}
	old, cur := state.Avro[v1](), state.Avro[v2]()
	b, err := old.Encode(v1{ID: 7, Name: "ann", Legacy: "x"})
	if err != nil {
		t.Fatal(err)
	}
	dec, err := cur.(interface {
		DecoderFor(string) (func([]byte) (v2, error), error)
	}).DecoderFor(old.(state.SchemaCodec).Schema())
	if err != nil {
		t.Fatal(err)
	}
	for range 2 { // the resolved decoder and the plain one do not disturb each other
		got, err := dec(b)
		if want := (v2{Name: "ann", ID: 7, Email: "none@example", Home: address{Zip: 75001}}); err != nil || got != want {
			t.Fatalf("resolved %+v, %v; want %+v", got, err, want)
		}
		nb, _ := cur.Encode(v2{Name: "bob", ID: 1})
		if got, err := cur.Decode(nb); err != nil || got.Name != "bob" {
			t.Fatalf("plain decode %+v, %v", got, err)
		}
	}
}

func TestAvroUnsupported(t *testing.T) {
	type embedded struct{ address }
	type recursive struct {
		Next *recursive
	}
	type badName struct {
		X int32 `avro:"a-b"`
	}
	type dup struct {
		X int32 `avro:"x"`
		Y int32 `avro:"x"`
	}
	type badDefault struct {
		X int32 `avrodefault:"ten"`
	}
	type ptrDefault struct {
		X *int32 `avrodefault:"1"`
	}
	check := func(err error, frags ...string) {
		t.Helper()
		if err == nil {
			t.Fatalf("no error, want %q", frags)
		}
		for _, f := range frags {
			if !strings.Contains(err.Error(), f) {
				t.Fatalf("error %q does not mention %q", err, f)
			}
		}
	}
	schemaErr := func(c any) error {
		return c.(interface{ SchemaError() error }).SchemaError()
	}
	check(schemaErr(state.Avro[uint64]()), "uint64", "has no Avro schema")
	check(schemaErr(state.Avro[map[int]string]()), "string keys")
	check(schemaErr(state.Avro[embedded]()), "embedded")
	check(schemaErr(state.Avro[recursive]()), "recursive")
	check(schemaErr(state.Avro[badName]()), `"a-b" is not an Avro name`)
	check(schemaErr(state.Avro[dup]()), `both named "x"`)
	check(schemaErr(state.Avro[badDefault]()), `avrodefault "ten"`)
	check(schemaErr(state.Avro[ptrDefault]()), "always null")
	_, err := state.Avro[uint64]().Encode(1)
	check(err, "uint64")
}

// A string field larger than the Avro library's default limit (1 MiB)
// decodes.
func TestAvroLargeField(t *testing.T) {
	type big struct {
		S string `avro:"s"`
	}
	avroRoundTrip(t, big{S: strings.Repeat("x", 3<<20)})
}

// Stored bytes are decoded without panicking, whatever they are.
func FuzzAvroDecode(f *testing.F) {
	c := state.Avro[session]()
	b, err := c.Encode(session{User: "u", Pages: []string{"/"}, Counts: map[string]int32{"a": 1}, Work: &address{"x", 1}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte{})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := c.Decode(b)
		if err != nil {
			return
		}
		if _, err := c.Encode(v); err != nil {
			t.Fatalf("decoded %+v does not encode: %v", v, err)
		}
	})
}

func TestAvroTooManyElements(t *testing.T) {
	type big struct {
		L []int32 `avro:"l"`
	}
	c := state.Avro[big]()
	if _, err := c.Encode(big{L: make([]int32, 1<<20+1)}); err == nil || !strings.Contains(err.Error(), "root.L: 1048577 elements") {
		t.Fatalf("Encode of too many elements: %v", err)
	}
	avroRoundTrip(t, big{L: make([]int32, 1<<20)})
}

// A stored value cut short anywhere, or followed by stray bytes, is a
// decode error naming the type, never a value with zero fields (hamba's
// Unmarshal reports a value cut inside a number as success).
func TestAvroTruncatedOrTrailing(t *testing.T) {
	c := state.Avro[address]()
	b, err := c.Encode(address{City: "Paris", Zip: 75002})
	if err != nil {
		t.Fatal(err)
	}
	for n := 0; n < len(b); n++ {
		if v, err := c.Decode(b[:n]); err == nil || !strings.Contains(err.Error(), "truncated") || !strings.Contains(err.Error(), "address") {
			t.Errorf("Decode of %d of %d bytes: %+v, %v; want a truncation error naming the type", n, len(b), v, err)
		}
	}
	if v, err := c.Decode(append(b[:len(b):len(b)], 1)); err == nil || !strings.Contains(err.Error(), "left over") {
		t.Errorf("Decode with a trailing byte: %+v, %v; want an error", v, err)
	}
	if v, err := c.Decode(b); err != nil || v != (address{City: "Paris", Zip: 75002}) {
		t.Errorf("Decode of the whole value: %+v, %v", v, err)
	}
	// A schema without fields encodes to nothing and decodes from nothing.
	type empty struct{}
	e := state.Avro[empty]()
	eb, err := e.Encode(empty{})
	if err != nil || len(eb) != 0 {
		t.Fatalf("Encode(empty{}) = %v, %v", eb, err)
	}
	if _, err := e.Decode(eb); err != nil {
		t.Errorf("Decode of an empty record: %v", err)
	}
}
