// Package schemaregistry holds record serdes for topics whose records are
// in the Confluent wire format and whose schemas live in a schema registry
// (Confluent Schema Registry, or a compatible one: Apicurio's ccompat API,
// Redpanda, Karapace): Avro, JSON Schema and Protobuf. Kafka shops whose
// producers use Confluent's KafkaAvroSerializer, KafkaJsonSchemaSerializer
// or KafkaProtobufSerializer can feed a kstate application, and read its
// output, with them.
//
// # Wire format
//
//	byte 0      magic byte, always 0
//	bytes 1-4   schema id, big-endian
//	(Protobuf)  message indexes: the message's path in its .proto file,
//	            zig-zag varints (count, then indexes; [0] is the single byte 0)
//	then        payload: Avro binary encoding, JSON text, or Protobuf
//
// # Use
//
//	reg, err := schemaregistry.NewClient(schemaregistry.Config{URLs: []string{"http://registry:8081"}})
//	orders, err := schemaregistry.Avro[Order](ctx, reg, orderSchema, schemaregistry.Options{Topic: "orders"})
//	totals, err := schemaregistry.Avro[Total](ctx, reg, totalSchema, schemaregistry.Options{Topic: "totals"})
//	top := kstate.Topology[string, Order, Total]{
//		Inputs: kstate.Topics(orders, "orders"),
//		Output: kstate.Output[string, Total]{Topic: "totals", Serde: totals},
//		...
//	}
//
// A serde's constructor calls the registry once, to find (or, with
// Options.AutoRegister, register) its schema's id under the subject:
// "<topic>-value" by default (TopicNameStrategy), "<topic>-key" for keys.
// After that, Serialize never calls the registry, and Deserialize calls it
// once per schema id it has not seen (to fetch the writer schema), not per
// record.
//
// # Schema evolution
//
// An Avro record is decoded with the schema it was written with (its id)
// resolved to the serde's schema, by Avro's rules: a producer may move to a
// new version of the schema while the application still reads with the old
// one, and the other way round, as long as the registry's compatibility
// rules held when the new version was registered.
//
// # Keys
//
// kstate stores state under the record key's bytes and needs
// Serialize(Deserialize(key)) to give them back. A schema-registry serde
// writes its own schema id, so a key serde (Options.Key) reads only
// records of that id and fails the others with ErrIncompatible, rather
// than split a key's state between two byte forms: use one as
// kstate.Topology.KeySerde only when every producer writes keys with that schema
// id. Plain string keys (serde.String) avoid the question.
//
// # Errors
//
// Errors wrap an *Error (subject, schema id, operation) and one of
// ErrWireFormat, ErrSchemaNotFound, ErrIncompatible, ErrUnauthorized and
// ErrUnavailable; docs/OPERATIONS.md says what to do about each. As a
// ValueSerde or KeySerde, a failed Deserialize meets kstate.Topology.OnDecodeError.
package schemaregistry
