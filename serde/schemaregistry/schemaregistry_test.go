package schemaregistry_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/hamba/avro/v2"

	"github.com/kstate/kstate/internal/srtest"
	"github.com/kstate/kstate/serde"
	"github.com/kstate/kstate/serde/schemaregistry"
)

const orderV1 = `{"type":"record","name":"Order","namespace":"shop","fields":[
	{"name":"id","type":"int"},
	{"name":"item","type":"string"},
	{"name":"cents","type":"long"}]}`

// orderV2 adds currency with a default, widens id to long and drops item.
const orderV2 = `{"type":"record","name":"Order","namespace":"shop","fields":[
	{"name":"id","type":"long"},
	{"name":"cents","type":"long"},
	{"name":"currency","type":"string","default":"EUR"}]}`

type OrderV1 struct {
	ID    int32  `avro:"id" json:"id"`
	Item  string `avro:"item" json:"item"`
	Cents int64  `avro:"cents" json:"cents"`
}

type OrderV2 struct {
	ID       int64  `avro:"id"`
	Cents    int64  `avro:"cents"`
	Currency string `avro:"currency"`
}

const orderJSONSchema = `{"title":"Order","type":"object","properties":{"id":{"type":"integer"},"item":{"type":"string"},"cents":{"type":"integer"}}}`

func client(t testing.TB, srv *srtest.Server, cfg schemaregistry.Config) *schemaregistry.Client {
	t.Helper()
	cfg.URLs = []string{srv.URL}
	c, err := schemaregistry.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

var ctx = context.Background()

func TestAvroRoundTripAndWireBytes(t *testing.T) {
	srv := srtest.Start(t, srtest.Options{})
	srv.Register("other-value", `"string"`, "AVRO") // so the serde's id is not 1
	c := client(t, srv, schemaregistry.Config{})
	s, err := schemaregistry.Avro[OrderV1](ctx, c, orderV1, schemaregistry.Options{Topic: "orders", AutoRegister: true})
	if err != nil {
		t.Fatal(err)
	}
	if s.Subject() != "orders-value" || s.SchemaID() != 2 {
		t.Fatalf("subject %q id %d, want orders-value 2", s.Subject(), s.SchemaID())
	}
	if text, typ, ok := srv.Schema(2); !ok || text != orderV1 || typ != "AVRO" {
		t.Fatalf("registered %q %q %v", text, typ, ok)
	}
	in := OrderV1{ID: 7, Item: "tea", Cents: 1250}
	b, err := s.Serialize(in)
	if err != nil {
		t.Fatal(err)
	}
	// Byte level: magic byte, big-endian id, hamba's Avro encoding.
	if b[0] != 0 {
		t.Fatalf("magic byte %#x", b[0])
	}
	if id := binary.BigEndian.Uint32(b[1:5]); id != 2 {
		t.Fatalf("id bytes % x = %d, want 2", b[1:5], id)
	}
	want, err := avro.Marshal(avro.MustParse(orderV1), in)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b[5:], want) {
		t.Fatalf("payload % x, want % x", b[5:], want)
	}
	// Avro zig-zag varints: id 7 -> 0x0e, "tea" -> len 3 (0x06) + bytes, 1250 -> 0xc4 0x13.
	if wantLit := []byte{0x0e, 0x06, 't', 'e', 'a', 0xc4, 0x13}; !bytes.Equal(b[5:], wantLit) {
		t.Fatalf("payload % x, want % x", b[5:], wantLit)
	}
	out, err := s.Deserialize(b)
	if err != nil {
		t.Fatal(err)
	}
	if out != in {
		t.Fatalf("round trip %+v, want %+v", out, in)
	}
	var _ serde.Serde[OrderV1] = s
}

func TestAvroEvolution(t *testing.T) {
	srv := srtest.Start(t, srtest.Options{})
	c := client(t, srv, schemaregistry.Config{})
	o := schemaregistry.Options{Topic: "orders", AutoRegister: true}
	w1, err := schemaregistry.Avro[OrderV1](ctx, c, orderV1, o)
	if err != nil {
		t.Fatal(err)
	}
	b1, err := w1.Serialize(OrderV1{ID: 7, Item: "tea", Cents: 1250})
	if err != nil {
		t.Fatal(err)
	}
	// A reader on v2, in another process: its own client, cold caches.
	r2, err := schemaregistry.Avro[OrderV2](ctx, client(t, srv, schemaregistry.Config{}), orderV2, o)
	if err != nil {
		t.Fatal(err)
	}
	if r2.SchemaID() == w1.SchemaID() {
		t.Fatalf("v1 and v2 share id %d", r2.SchemaID())
	}
	got, err := r2.Deserialize(b1)
	if err != nil {
		t.Fatal(err)
	}
	if want := (OrderV2{ID: 7, Cents: 1250, Currency: "EUR"}); got != want {
		t.Fatalf("v1 record read as v2: %+v, want %+v", got, want)
	}
	// And back: v2 bytes read by the v1 reader fail (item has no default).
	b2, err := r2.Serialize(OrderV2{ID: 8, Cents: 1, Currency: "USD"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = w1.Deserialize(b2)
	var e *schemaregistry.Error
	if !errors.Is(err, schemaregistry.ErrIncompatible) || !errors.As(err, &e) || e.ID != r2.SchemaID() || e.Subject != "orders-value" {
		t.Fatalf("v2 record read as v1: %v, want ErrIncompatible naming id %d", err, r2.SchemaID())
	}
}

func TestAutoRegisterOff(t *testing.T) {
	srv := srtest.Start(t, srtest.Options{})
	c := client(t, srv, schemaregistry.Config{})
	_, err := schemaregistry.Avro[OrderV1](ctx, c, orderV1, schemaregistry.Options{Topic: "orders"})
	var e *schemaregistry.Error
	if !errors.Is(err, schemaregistry.ErrSchemaNotFound) || !errors.As(err, &e) || e.Subject != "orders-value" {
		t.Fatalf("absent subject: %v, want ErrSchemaNotFound for orders-value", err)
	}
	for _, w := range []string{`"orders-value"`, `record "shop.Order"`, "AutoRegister"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not contain %s", err, w)
		}
	}
	// The subject exists with another schema: still not found.
	srv.Register("orders-value", orderV2, "AVRO")
	if _, err := schemaregistry.Avro[OrderV1](ctx, c, orderV1, schemaregistry.Options{Topic: "orders"}); !errors.Is(err, schemaregistry.ErrSchemaNotFound) {
		t.Fatalf("absent schema: %v, want ErrSchemaNotFound", err)
	}
	id := srv.Register("orders-value", orderV1, "AVRO")
	s, err := schemaregistry.Avro[OrderV1](ctx, c, orderV1, schemaregistry.Options{Topic: "orders"})
	if err != nil {
		t.Fatal(err)
	}
	if s.SchemaID() != id {
		t.Fatalf("looked-up id %d, registered %d", s.SchemaID(), id)
	}
	// Lookup registers nothing.
	if _, _, ok := srv.Schema(id + 1); ok {
		t.Fatal("a lookup registered a schema")
	}
}

func TestSubjectNaming(t *testing.T) {
	srv := srtest.Start(t, srtest.Options{})
	c := client(t, srv, schemaregistry.Config{})
	for _, tc := range []struct {
		o    schemaregistry.Options
		want string
	}{
		{schemaregistry.Options{Topic: "t"}, "t-value"},
		{schemaregistry.Options{Topic: "t", Key: true}, "t-key"},
		{schemaregistry.Options{Topic: "t", Subject: "shop.Order"}, "shop.Order"},
	} {
		tc.o.AutoRegister = true
		s, err := schemaregistry.JSONSchema[OrderV1](ctx, c, orderJSONSchema, tc.o)
		if err != nil {
			t.Fatal(err)
		}
		if s.Subject() != tc.want {
			t.Errorf("%+v: subject %q, want %q", tc.o, s.Subject(), tc.want)
		}
	}
	if _, err := schemaregistry.JSONSchema[OrderV1](ctx, c, orderJSONSchema, schemaregistry.Options{}); err == nil {
		t.Error("no topic and no subject: no error")
	}
}

func TestAuth(t *testing.T) {
	srv := srtest.Start(t, srtest.Options{Username: "app", Password: "secret", Token: "tok"})
	o := schemaregistry.Options{Topic: "orders", AutoRegister: true}
	for _, tc := range []struct {
		name string
		cfg  schemaregistry.Config
		ok   bool
	}{
		{"none", schemaregistry.Config{}, false},
		{"wrong password", schemaregistry.Config{Username: "app", Password: "nope"}, false},
		{"wrong token", schemaregistry.Config{BearerToken: "nope"}, false},
		{"basic", schemaregistry.Config{Username: "app", Password: "secret"}, true},
		{"bearer", schemaregistry.Config{BearerToken: "tok"}, true},
	} {
		_, err := schemaregistry.Avro[OrderV1](ctx, client(t, srv, tc.cfg), orderV1, o)
		if tc.ok && err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
		if !tc.ok {
			var e *schemaregistry.Error
			if !errors.Is(err, schemaregistry.ErrUnauthorized) || !errors.As(err, &e) || e.Subject != "orders-value" || !strings.Contains(err.Error(), "401") {
				t.Errorf("%s: %v, want ErrUnauthorized naming the subject and HTTP 401", tc.name, err)
			}
		}
	}
	if _, err := schemaregistry.NewClient(schemaregistry.Config{URLs: []string{srv.URL}, Username: "a", BearerToken: "b"}); err == nil {
		t.Error("basic auth and token together: no error")
	}
	if _, err := schemaregistry.NewClient(schemaregistry.Config{}); err == nil {
		t.Error("no URLs: no error")
	}
}

func TestTLS(t *testing.T) {
	srv := srtest.Start(t, srtest.Options{TLS: true})
	pool := x509.NewCertPool()
	pool.AddCert(srv.HTTPServer().Certificate())
	o := schemaregistry.Options{Topic: "orders", AutoRegister: true}
	if _, err := schemaregistry.Avro[OrderV1](ctx, client(t, srv, schemaregistry.Config{TLS: &tls.Config{RootCAs: pool}}), orderV1, o); err != nil {
		t.Fatalf("with the server's CA: %v", err)
	}
	_, err := schemaregistry.Avro[OrderV1](ctx, client(t, srv, schemaregistry.Config{}), orderV1, o)
	if !errors.Is(err, schemaregistry.ErrUnavailable) || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("without the CA: %v, want ErrUnavailable about the certificate", err)
	}
}

func TestDecodeErrors(t *testing.T) {
	srv := srtest.Start(t, srtest.Options{})
	c := client(t, srv, schemaregistry.Config{})
	s, err := schemaregistry.Avro[OrderV1](ctx, c, orderV1, schemaregistry.Options{Topic: "orders", AutoRegister: true})
	if err != nil {
		t.Fatal(err)
	}
	jsonID := srv.Register("orders-json-value", orderJSONSchema, "JSON")
	good, _ := s.Serialize(OrderV1{ID: 1})
	for _, tc := range []struct {
		name  string
		in    []byte
		kind  error
		id    int
		words string
	}{
		{"nil", nil, schemaregistry.ErrWireFormat, 0, "tombstone"},
		{"plain JSON", []byte(`{"id":1}`), schemaregistry.ErrWireFormat, 0, "0x7b"},
		{"short", []byte{0, 0, 1}, schemaregistry.ErrWireFormat, 0, "3 bytes"},
		{"unknown id", append([]byte{0, 0, 0, 0x03, 0xe7}, good[5:]...), schemaregistry.ErrSchemaNotFound, 999, "404"},
		{"JSON schema id", append([]byte{0, 0, 0, 0, byte(jsonID)}, good[5:]...), schemaregistry.ErrIncompatible, jsonID, "JSON"},
		{"truncated payload", good[:6], nil, s.SchemaID(), "ends too soon"},
	} {
		_, err := s.Deserialize(tc.in)
		var se *serde.Error
		var e *schemaregistry.Error
		if !errors.As(err, &se) || se.Op != "deserialize" || se.Serde != "Avro[schemaregistry_test.OrderV1]" || !errors.As(err, &e) {
			t.Errorf("%s: %v, want a *serde.Error wrapping a *schemaregistry.Error", tc.name, err)
			continue
		}
		if tc.kind != nil && !errors.Is(err, tc.kind) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.kind)
		}
		if e.ID != tc.id || e.Subject != "orders-value" {
			t.Errorf("%s: id %d subject %q, want %d orders-value", tc.name, e.ID, e.Subject, tc.id)
		}
		if !strings.Contains(err.Error(), tc.words) {
			t.Errorf("%s: %q does not contain %q", tc.name, err, tc.words)
		}
	}
}

func TestUnavailable(t *testing.T) {
	srv := srtest.Start(t, srtest.Options{})
	c := client(t, srv, schemaregistry.Config{})
	s, err := schemaregistry.Avro[OrderV1](ctx, c, orderV1, schemaregistry.Options{Topic: "orders", AutoRegister: true})
	if err != nil {
		t.Fatal(err)
	}
	v2id := srv.Register("orders-value", `{"type":"record","name":"Order","namespace":"shop","fields":[{"name":"id","type":"int"},{"name":"item","type":"string"},{"name":"cents","type":"long"},{"name":"note","type":"string","default":""}]}`, "AVRO")
	good, _ := s.Serialize(OrderV1{ID: 1, Item: "x", Cents: 2})
	srv.HTTPServer().Close()
	// Its own id is known without the registry.
	if _, err := s.Deserialize(good); err != nil {
		t.Fatalf("own id with the registry down: %v", err)
	}
	other := append([]byte{0, 0, 0, 0, byte(v2id)}, good[5:]...)
	_, err = s.Deserialize(other)
	var e *schemaregistry.Error
	if !errors.Is(err, schemaregistry.ErrUnavailable) || !errors.As(err, &e) || e.ID != v2id {
		t.Fatalf("new id with the registry down: %v, want ErrUnavailable naming id %d", err, v2id)
	}
	_, err = schemaregistry.Avro[OrderV1](ctx, client(t, srv, schemaregistry.Config{}), orderV1, schemaregistry.Options{Topic: "orders"})
	if !errors.Is(err, schemaregistry.ErrUnavailable) || !strings.Contains(err.Error(), "orders-value") {
		t.Fatalf("constructor with the registry down: %v, want ErrUnavailable naming the subject", err)
	}
}

func TestCacheNoCallPerRecord(t *testing.T) {
	srv := srtest.Start(t, srtest.Options{})
	c := client(t, srv, schemaregistry.Config{})
	o := schemaregistry.Options{Topic: "orders", AutoRegister: true}
	w1, _ := schemaregistry.Avro[OrderV1](ctx, c, orderV1, o)
	r2, err := schemaregistry.Avro[OrderV2](ctx, client(t, srv, schemaregistry.Config{}), orderV2, o)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := w1.Serialize(OrderV1{ID: 1, Item: "a", Cents: 3})
	before := srv.Requests()
	for range 1000 {
		if _, err := r2.Deserialize(b); err != nil {
			t.Fatal(err)
		}
		if _, err := w1.Serialize(OrderV1{ID: 2}); err != nil {
			t.Fatal(err)
		}
	}
	if n := srv.Requests() - before; n != 1 {
		t.Fatalf("%d registry requests for 1000 records of one new id, want 1", n)
	}
}

func TestJSONSchema(t *testing.T) {
	srv := srtest.Start(t, srtest.Options{})
	c := client(t, srv, schemaregistry.Config{})
	s, err := schemaregistry.JSONSchema[OrderV1](ctx, c, orderJSONSchema, schemaregistry.Options{Topic: "orders", AutoRegister: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, typ, _ := srv.Schema(s.SchemaID()); typ != "JSON" {
		t.Fatalf("registered as %q, want JSON", typ)
	}
	in := OrderV1{ID: 3, Item: "pen", Cents: 99}
	b, err := s.Serialize(in)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := json.Marshal(in)
	if b[0] != 0 || binary.BigEndian.Uint32(b[1:5]) != uint32(s.SchemaID()) || !bytes.Equal(b[5:], want) {
		t.Fatalf("wire bytes % x, want 00, id %d, %s", b, s.SchemaID(), want)
	}
	out, err := s.Deserialize(b)
	if err != nil || out != in {
		t.Fatalf("round trip %+v %v", out, err)
	}
	avroID := srv.Register("x-value", orderV1, "AVRO")
	if _, err := s.Deserialize(append([]byte{0, 0, 0, 0, byte(avroID)}, b[5:]...)); !errors.Is(err, schemaregistry.ErrIncompatible) {
		t.Fatalf("Avro id read by the JSON serde: %v, want ErrIncompatible", err)
	}
	_, err = schemaregistry.JSONSchema[OrderV1](ctx, c, orderJSONSchema, schemaregistry.Options{Topic: "absent"})
	if !errors.Is(err, schemaregistry.ErrSchemaNotFound) || !strings.Contains(err.Error(), `"Order"`) {
		t.Fatalf("absent JSON schema: %v, want ErrSchemaNotFound naming its title", err)
	}
}

func benchSerde(b *testing.B) (*schemaregistry.Serde[OrderV1], *schemaregistry.Serde[OrderV2], *schemaregistry.Serde[OrderV1]) {
	srv := srtest.Start(b, srtest.Options{})
	c := client(b, srv, schemaregistry.Config{})
	o := schemaregistry.Options{Topic: "orders", AutoRegister: true}
	w1, err := schemaregistry.Avro[OrderV1](ctx, c, orderV1, o)
	if err != nil {
		b.Fatal(err)
	}
	r2, err := schemaregistry.Avro[OrderV2](ctx, c, orderV2, o)
	if err != nil {
		b.Fatal(err)
	}
	js, err := schemaregistry.JSONSchema[OrderV1](ctx, c, orderJSONSchema, schemaregistry.Options{Topic: "j", AutoRegister: true})
	if err != nil {
		b.Fatal(err)
	}
	return w1, r2, js
}

func BenchmarkAvroSerialize(b *testing.B) {
	w1, _, _ := benchSerde(b)
	v := OrderV1{ID: 7, Item: "tea", Cents: 1250}
	for b.Loop() {
		if _, err := w1.Serialize(v); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAvroDeserialize(b *testing.B) {
	w1, _, _ := benchSerde(b)
	rec, _ := w1.Serialize(OrderV1{ID: 7, Item: "tea", Cents: 1250})
	for b.Loop() {
		if _, err := w1.Deserialize(rec); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAvroDeserializeResolved reads v1 records with the v2 schema.
func BenchmarkAvroDeserializeResolved(b *testing.B) {
	w1, r2, _ := benchSerde(b)
	rec, _ := w1.Serialize(OrderV1{ID: 7, Item: "tea", Cents: 1250})
	for b.Loop() {
		if _, err := r2.Deserialize(rec); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkJSONSchemaSerialize(b *testing.B) {
	_, _, js := benchSerde(b)
	v := OrderV1{ID: 7, Item: "tea", Cents: 1250}
	for b.Loop() {
		if _, err := js.Serialize(v); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkJSONSchemaDeserialize(b *testing.B) {
	_, _, js := benchSerde(b)
	rec, _ := js.Serialize(OrderV1{ID: 7, Item: "tea", Cents: 1250})
	for b.Loop() {
		if _, err := js.Deserialize(rec); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzAvroDeserialize feeds arbitrary record bytes to an Avro serde whose
// ids are all known (no registry call): it must return an error or a
// value, never panic or hang.
func FuzzAvroDeserialize(f *testing.F) {
	srv := srtest.Start(f, srtest.Options{})
	c := client(f, srv, schemaregistry.Config{})
	s, err := schemaregistry.Avro[OrderV1](ctx, c, orderV1, schemaregistry.Options{Topic: "orders", AutoRegister: true})
	if err != nil {
		f.Fatal(err)
	}
	good, _ := s.Serialize(OrderV1{ID: 7, Item: "tea", Cents: 1250})
	f.Add(good)
	f.Add([]byte{0, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Add([]byte{1})
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) >= 5 {
			b[1], b[2], b[3], b[4] = 0, 0, 0, byte(s.SchemaID()) // keep the fuzzer off the network
		}
		_, _ = s.Deserialize(b)
	})
}

// TestKeySerdeOwnIDOnly: a key serde reads only its own schema id, since
// the same key under another id has other bytes (and state is kept under
// the bytes); a value serde reads both.
func TestKeySerdeOwnIDOnly(t *testing.T) {
	srv := srtest.Start(t, srtest.Options{})
	c := client(t, srv, schemaregistry.Config{})
	const keyV1 = `{"type":"record","name":"Key","fields":[{"name":"id","type":"long"}]}`
	const keyV2 = `{"type":"record","name":"Key","fields":[{"name":"id","type":"long"},{"name":"region","type":"string","default":""}]}`
	type K struct {
		ID int64 `avro:"id"`
	}
	o := schemaregistry.Options{Topic: "orders", Key: true, AutoRegister: true}
	k1, err := schemaregistry.Avro[K](ctx, c, keyV1, o)
	if err != nil {
		t.Fatal(err)
	}
	k2, err := schemaregistry.Avro[K](ctx, c, keyV2, o)
	if err != nil {
		t.Fatal(err)
	}
	b1, _ := k1.Serialize(K{ID: 1})
	if got, err := k1.Deserialize(b1); err != nil || got.ID != 1 {
		t.Fatalf("own id: %+v, %v", got, err)
	}
	if b2, _ := k2.Serialize(K{ID: 1}); bytes.Equal(b1, b2) {
		t.Fatal("the same key under two ids has the same bytes")
	}
	_, err = k2.Deserialize(b1)
	if !errors.Is(err, schemaregistry.ErrIncompatible) || !strings.Contains(err.Error(), "split") {
		t.Fatalf("key of another id: %v, want ErrIncompatible explaining the split", err)
	}
	o.Key = false
	o.Subject = "orders-key"
	v2, err := schemaregistry.Avro[K](ctx, c, keyV2, o)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := v2.Deserialize(b1); err != nil || got.ID != 1 {
		t.Fatalf("value serde, other id: %+v, %v", got, err)
	}
}
