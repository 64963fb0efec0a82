package schemaregistry_test

import (
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/kstate/kstate/serde/schemaregistry"
)

// TestAgainstSrfake runs the serdes against franz-go's own fake registry
// (pkg/sr/srfake), a second implementation of the REST API written by
// others than internal/srtest: registration, lookup with AutoRegister off,
// evolution across two clients, unknown ids. (srfake checks no
// compatibility either; the testcontainers test covers a real registry.)
func TestAgainstSrfake(t *testing.T) {
	reg := srfake.New()
	defer reg.Close()
	newClient := func() *schemaregistry.Client {
		c, err := schemaregistry.NewClient(schemaregistry.Config{URLs: []string{reg.URL()}})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	c := newClient()
	if _, err := schemaregistry.Avro[OrderV1](ctx, c, orderV1, schemaregistry.Options{Topic: "orders"}); !errors.Is(err, schemaregistry.ErrSchemaNotFound) {
		t.Fatalf("lookup before registration: %v, want ErrSchemaNotFound", err)
	}
	w1, err := schemaregistry.Avro[OrderV1](ctx, c, orderV1, schemaregistry.Options{Topic: "orders", AutoRegister: true})
	if err != nil {
		t.Fatal(err)
	}
	again, err := schemaregistry.Avro[OrderV1](ctx, newClient(), orderV1, schemaregistry.Options{Topic: "orders"})
	if err != nil || again.SchemaID() != w1.SchemaID() {
		t.Fatalf("lookup: %v, want id %d", err, w1.SchemaID())
	}
	r2, err := schemaregistry.Avro[OrderV2](ctx, newClient(), orderV2, schemaregistry.Options{Topic: "orders", AutoRegister: true})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := w1.Serialize(OrderV1{ID: 7, Item: "tea", Cents: 1250})
	if got, err := r2.Deserialize(b); err != nil || got != (OrderV2{ID: 7, Cents: 1250, Currency: "EUR"}) {
		t.Fatalf("v1 read as v2: %+v, %v", got, err)
	}
	if _, err := r2.Deserialize(append([]byte{0, 0, 0, 0x03, 0xe7}, b[5:]...)); !errors.Is(err, schemaregistry.ErrSchemaNotFound) {
		t.Fatalf("unknown id: %v, want ErrSchemaNotFound", err)
	}
	js, err := schemaregistry.JSONSchema[OrderV1](ctx, c, orderJSONSchema, schemaregistry.Options{Topic: "j", AutoRegister: true})
	if err != nil {
		t.Fatal(err)
	}
	jb, _ := js.Serialize(OrderV1{ID: 1, Item: "pen"})
	js2, err := schemaregistry.JSONSchema[OrderV1](ctx, newClient(), orderJSONSchema, schemaregistry.Options{Topic: "j"})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := js2.Deserialize(jb); err != nil || got != (OrderV1{ID: 1, Item: "pen"}) {
		t.Fatalf("JSON Schema: %+v, %v", got, err)
	}
	if _, err := r2.Deserialize(jb); !errors.Is(err, schemaregistry.ErrIncompatible) {
		t.Fatalf("JSON id read by the Avro serde: %v, want ErrIncompatible", err)
	}
}
