package schemaregistry_test

import (
	"context"
	"fmt"

	"github.com/kstate/kstate/internal/srtest"
	"github.com/kstate/kstate/serde/schemaregistry"
)

// Order is the Go side of the "orders" topic's Avro schema.
type Order struct {
	ID    int64  `avro:"id"`
	Item  string `avro:"item"`
	Cents int64  `avro:"cents"`
}

const orderSchema = `{"type":"record","name":"Order","namespace":"shop","fields":[
	{"name":"id","type":"long"},{"name":"item","type":"string"},{"name":"cents","type":"long"}]}`

// A producer's schema pipeline registered the schema under "orders-value";
// the application looks it up and writes and reads records in the
// Confluent wire format. In a kstate.Topology the serde is an input's ValueSerde
// (Topology.Inputs), or the Output.Serde.
func ExampleAvro() {
	registry := srtest.New(srtest.Options{}) // a stand-in; use your registry's URL
	defer registry.Close()
	id := registry.Register("orders-value", orderSchema, "AVRO")

	ctx := context.Background()
	reg, err := schemaregistry.NewClient(schemaregistry.Config{URLs: []string{registry.URL}})
	if err != nil {
		panic(err)
	}
	orders, err := schemaregistry.Avro[Order](ctx, reg, orderSchema, schemaregistry.Options{Topic: "orders"})
	if err != nil {
		panic(err)
	}
	b, err := orders.Serialize(Order{ID: 7, Item: "tea", Cents: 1250})
	if err != nil {
		panic(err)
	}
	fmt.Printf("subject %s, id %d (registered %d)\n", orders.Subject(), orders.SchemaID(), id)
	fmt.Printf("wire: % x\n", b)
	o, err := orders.Deserialize(b)
	fmt.Printf("%+v %v\n", o, err)
	// Output:
	// subject orders-value, id 1 (registered 1)
	// wire: 00 00 00 00 01 0e 06 74 65 61 c4 13
	// {ID:7 Item:tea Cents:1250} <nil>
}
