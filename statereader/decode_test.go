package statereader

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/kstate/kstate/changelog"
	"github.com/kstate/kstate/internal/changelogfmt"
	"github.com/kstate/kstate/state"
)

func enc[T any](t *testing.T, c state.Codec[T], v T) []byte {
	t.Helper()
	b, err := c.Encode(v)
	if err != nil {
		t.Fatal(err)
	}
	return changelogfmt.EncodeValue(changelog.Header{Expiry: changelog.NoExpiry}, b)
}

// A list, a map with an int32 key, a custom codec and a non-UTF-8 key: the
// decoding rules and fallbacks of the package doc.
func TestDecoding(t *testing.T) {
	list := uint32(1)
	mp := uint32(2)
	custom := uint32(3)
	raw := map[string][]byte{
		string(changelogfmt.MetaKey("var/events")): []byte(`{"id":1,"kind":"list","schema":"string"}`),
		string(changelogfmt.MetaKey("var/scores")): []byte(`{"id":2,"kind":"map","schema":"float64","keySchema":"int32"}`),
		string(changelogfmt.MetaKey("var/blob")):   []byte(`{"id":3,"kind":"value","schema":"myproto"}`),
		// The stored next batch id 7: the last committed batch is 6.
		string(changelogfmt.MetaKey("engine/batch_id")):  binary.BigEndian.AppendUint64(nil, 7),
		string(changelogfmt.MetaKey("engine/time_mode")): []byte("EventTime"),
		// list elements of key "k": sequence numbers 5 and 9 are positions 0 and 1
		string(changelogfmt.StateKey(list, []byte("k"), binary.BigEndian.AppendUint64(nil, 9))): enc(t, state.String(), "second"),
		string(changelogfmt.StateKey(list, []byte("k"), binary.BigEndian.AppendUint64(nil, 5))): enc(t, state.String(), "first"),
		string(changelogfmt.StateKey(list, []byte("m"), binary.BigEndian.AppendUint64(nil, 1))): enc(t, state.String(), "other"),
		string(changelogfmt.StateKey(mp, []byte{0xff, 0x00}, mustEnc(t, state.Int32(), -3))):    enc(t, state.Float64(), 1.5),
		string(changelogfmt.StateKey(custom, []byte("k"), nil)):                                 changelogfmt.EncodeValue(changelog.Header{Expiry: 1000}, []byte{1, 2, 3}),
		string(changelogfmt.TimerKey(1735732810000, []byte("k"))):                               {},
		// Key "kk" fires first but lists after "k" (by key, then expiry).
		string(changelogfmt.TimerKey(1735732805000, []byte("kk"))): {},
		// An entry of the per-key index from an older changelog, whose
		// timer is gone: the reader lists timers from their own entries.
		string(changelogfmt.TimerByKey([]byte("gone"), 1735732800000)): {},
	}
	r, err := newReader("app", "test", options{}, map[int32]map[string][]byte{0: raw})
	if err != nil {
		t.Fatal(err)
	}
	lines := func(name string, q Query) string {
		t.Helper()
		es, err := r.Read(name, q)
		if err != nil {
			t.Fatal(err)
		}
		var s string
		for _, e := range es {
			b, _ := json.Marshal(e)
			s += string(b) + "\n"
		}
		return s
	}
	want := `{"partition":0,"key":"k","variable":"events","kind":"list","index":0,"value":"first"}
{"partition":0,"key":"k","variable":"events","kind":"list","index":1,"value":"second"}
{"partition":0,"key":"m","variable":"events","kind":"list","index":0,"value":"other"}
`
	if got := lines("events", Query{}); got != want {
		t.Errorf("list:\n%s\nwant\n%s", got, want)
	}
	if got := lines("events", Query{Key: []byte("m"), Limit: 5}); got != `{"partition":0,"key":"m","variable":"events","kind":"list","index":0,"value":"other"}`+"\n" {
		t.Errorf("list of m: %s", got)
	}
	if got := lines("events", Query{Limit: 1}); got != `{"partition":0,"key":"k","variable":"events","kind":"list","index":0,"value":"first"}`+"\n" {
		t.Errorf("limit 1: %s", got)
	}
	want = `{"partition":0,"key":"/wA=","keyEncoding":"base64","variable":"scores","kind":"map","mapKey":-3,"value":1.5}` + "\n"
	if got := lines("scores", Query{}); got != want {
		t.Errorf("map:\n%s\nwant\n%s", got, want)
	}
	want = `{"partition":0,"key":"k","variable":"blob","kind":"value","value":"AQID","valueEncoding":"base64","expiryMs":1000}` + "\n"
	if got := lines("blob", Query{}); got != want {
		t.Errorf("custom codec:\n%s\nwant\n%s", got, want)
	}
	// The Avro seam: a decoder for the custom schema.
	r.o.decoders = func(schema string) Decoder {
		if schema != "myproto" {
			return nil
		}
		return func(b []byte) (json.RawMessage, error) { return json.Marshal(len(b)) }
	}
	if got := lines("blob", Query{}); got != `{"partition":0,"key":"k","variable":"blob","kind":"value","value":3,"expiryMs":1000}`+"\n" {
		t.Errorf("custom decoder: %s", got)
	}
	tm, err := r.Timers(Query{})
	if err != nil || len(tm) != 2 || tm[0].Key != "k" || tm[0].Expiry != "2025-01-01T12:00:10.000Z" ||
		tm[1].Key != "kk" || tm[1].Expiry != "2025-01-01T12:00:05.000Z" {
		t.Errorf("timers %+v %v", tm, err)
	}
	if tm, err := r.Timers(Query{Key: []byte("kk")}); err != nil || len(tm) != 1 || tm[0].Key != "kk" {
		t.Errorf("timers of kk %+v %v", tm, err)
	}
	if tm, err := r.Timers(Query{Limit: 1}); err != nil || len(tm) != 1 || tm[0].Key != "k" {
		t.Errorf("timers, limit 1: %+v %v", tm, err)
	}
	md := r.Metadata()
	if len(md.Variables) != 3 || md.Partitions[0].BatchID == nil || *md.Partitions[0].BatchID != 6 || md.Partitions[0].TimeMode != "EventTime" {
		t.Errorf("metadata %+v", md)
	}
	if e := (Entry{Key: "/wA=", KeyEncoding: "base64"}); string(must(e.KeyBytes())) != "\xff\x00" {
		t.Errorf("KeyBytes")
	}
}

func mustEnc[T any](t *testing.T, c state.Codec[T], v T) []byte {
	b, err := c.Encode(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

// Values are decoded with the schema their header names in the variable's
// history: an int32 row and an int64 row of one widened count, and Avro
// rows of two record versions, each as it was written.
func TestDecodingSchemaHistory(t *testing.T) {
	type v1 struct {
		N int32 `avro:"n"`
	}
	type v2 struct {
		Name string `avro:"name"`
		N    int64  `avro:"n"`
	}
	a1, a2 := state.Avro[v1](), state.Avro[v2]()
	s1, s2 := a1.(state.SchemaCodec).Schema(), a2.(state.SchemaCodec).Schema()
	hist := func(id uint32, schemas ...string) []byte {
		b, _ := json.Marshal(map[string]any{"id": id, "kind": "value", "schema": schemas[len(schemas)-1],
			"schemas": schemas, "schemaId": len(schemas)})
		return b
	}
	at := func(version uint32, payload []byte) []byte {
		return changelogfmt.EncodeValue(changelog.Header{SchemaID: version, Expiry: changelog.NoExpiry}, payload)
	}
	raw := map[string][]byte{
		string(changelogfmt.MetaKey("var/count")):                   hist(1, "int32", "int64"),
		string(changelogfmt.MetaKey("var/rec")):                     hist(2, s1, s2),
		string(changelogfmt.StateKey(1, []byte("old"), nil)):        at(0, mustEnc(t, state.Int32(), 41)),
		string(changelogfmt.StateKey(1, []byte("new"), nil)):        at(2, mustEnc(t, state.Int64(), 1<<40)),
		string(changelogfmt.StateKey(2, []byte("old"), nil)):        at(1, mustEnc(t, a1, v1{N: 7})),
		string(changelogfmt.StateKey(2, []byte("new"), nil)):        at(2, mustEnc(t, a2, v2{Name: "ann", N: 8})),
		string(changelogfmt.StateKey(2, []byte("unknown-id"), nil)): at(9, []byte{0xff}),
	}
	r, err := newReader("app", "test", options{}, map[int32]map[string][]byte{0: raw})
	if err != nil {
		t.Fatal(err)
	}
	var got string
	for _, v := range []string{"count", "rec"} {
		es, err := r.Read(v, Query{})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range es {
			got += e.Key + "=" + string(e.Value) + e.ValueEncoding + "\n"
		}
	}
	want := "new=1099511627776\nold=41\nnew={\"n\":8,\"name\":\"ann\"}\nold={\"n\":7}\nunknown-id=\"/w==\"base64\n"
	if got != want {
		t.Fatalf("got\n%swant\n%s", got, want)
	}
}

// A packed list and a packed map (state.Packed): one stored value per key,
// read as one Entry per element or map entry, like the unpacked layout.
func TestDecodingPacked(t *testing.T) {
	item := func(dst, b []byte) []byte { return append(binary.AppendUvarint(dst, uint64(len(b))), b...) }
	var list, mp []byte
	list = item(item(list, []byte("first")), []byte("second"))
	mp = item(item(mp, mustEnc(t, state.Int32(), -3)), mustEnc(t, state.Float64(), 1.5))
	mp = item(item(mp, mustEnc(t, state.Int32(), 4)), mustEnc(t, state.Float64(), 2))
	raw := map[string][]byte{
		string(changelogfmt.MetaKey("var/events")):         []byte(`{"id":1,"kind":"packed list","schema":"string"}`),
		string(changelogfmt.MetaKey("var/scores")):         []byte(`{"id":2,"kind":"packed map","schema":"float64","keySchema":"int32"}`),
		string(changelogfmt.StateKey(1, []byte("k"), nil)): changelogfmt.EncodeValue(changelog.Header{Expiry: changelog.NoExpiry}, list),
		string(changelogfmt.StateKey(2, []byte("k"), nil)): changelogfmt.EncodeValue(changelog.Header{Expiry: changelog.NoExpiry}, mp),
		string(changelogfmt.StateKey(1, []byte("z"), nil)): changelogfmt.EncodeValue(changelog.Header{Expiry: changelog.NoExpiry}, []byte{9, 'x'}),
	}
	r, err := newReader("app", "test", options{}, map[int32]map[string][]byte{0: raw})
	if err != nil {
		t.Fatal(err)
	}
	read := func(name string, q Query) (string, error) {
		es, err := r.Read(name, q)
		var s string
		for _, e := range es {
			b, _ := json.Marshal(e)
			s += string(b) + "\n"
		}
		return s, err
	}
	got, err := read("events", Query{Key: []byte("k")})
	want := `{"partition":0,"key":"k","variable":"events","kind":"packed list","index":0,"value":"first"}
{"partition":0,"key":"k","variable":"events","kind":"packed list","index":1,"value":"second"}
`
	if err != nil || got != want {
		t.Fatalf("packed list: got %s (%v), want %s", got, err, want)
	}
	got, err = read("scores", Query{})
	want = `{"partition":0,"key":"k","variable":"scores","kind":"packed map","mapKey":-3,"value":1.5}
{"partition":0,"key":"k","variable":"scores","kind":"packed map","mapKey":4,"value":2}
`
	if err != nil || got != want {
		t.Fatalf("packed map: got %s (%v), want %s", got, err, want)
	}
	if got, err = read("events", Query{Limit: 1}); err != nil || got != `{"partition":0,"key":"k","variable":"events","kind":"packed list","index":0,"value":"first"}`+"\n" {
		t.Fatalf("packed list, Limit 1: got %s (%v)", got, err)
	}
	// Key "z"'s value claims a 9-byte element in 1 byte.
	if _, err := read("events", Query{Key: []byte("z")}); err == nil || !strings.Contains(err.Error(), `variable "events" key "z"`) {
		t.Fatalf("a damaged packed value: got %v, want an error naming the variable and key", err)
	}
}

// A partition that records a newer changelog layout than this build's is
// refused, naming both; the current one is read.
func TestNewerLayoutRefused(t *testing.T) {
	raw := func(layout string) map[int32]map[string][]byte {
		return map[int32]map[string][]byte{3: {string(changelogfmt.MetaKey(changelog.LayoutMeta)): []byte(layout)}}
	}
	if _, err := newReader("app", "test", options{}, raw("2")); err != nil {
		t.Fatalf("layout 2: %v", err)
	}
	_, err := newReader("app", "test", options{}, raw("3"))
	if !errors.Is(err, changelog.ErrLayout) || !strings.Contains(err.Error(), `partition 3 records changelog layout "3"`) || !strings.Contains(err.Error(), "up to 2") {
		t.Fatalf("layout 3: %v, want changelog.ErrLayout naming both layouts", err)
	}
}
