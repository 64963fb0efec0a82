// Package state holds what a processor's state is made of: the state
// variable types ValueState, ListState and MapState, the codecs that encode
// their values (Codec), and WithTTL.
//
// Declare state variables in the processor's Init with
// processor.NewValueState, NewListState and NewMapState. Every operation
// works on the grouping key of the call in progress: a processor only ever
// sees the current key's state. Reading absent state says so (ok == false,
// or an empty sequence), never a made-up default. Misuse (declaring outside
// Init, a duplicate name, a TTL outside ProcessingTime mode, a kind changed
// across restarts) is a *VarError naming the variable and the operation,
// wrapping one of the sentinels of this package.
//
// # Durability
//
// Changes of a micro-batch are staged in memory (reads see them at once)
// and written to the partition's local RocksDB shard only after the batch's
// Kafka transaction committed, together with the changelog records that
// carry the same changes; a lost disk costs a restore from the changelog,
// never data.
//
// # TTL
//
// In ProcessingTime mode, WithTTL(d) gives every entry an expiry of batch
// time + d; an expired entry is invisible to reads at once and deleted (with
// a changelog tombstone) by the end of the batch, without running user code.
// A ValueState has one expiry, reset by Update; every ListState element and
// MapState entry has its own.
//
// # Codecs
//
// A Codec encodes state values (and MapState user keys) for the shard. The
// built-in integer and float codecs preserve order, so MapState iterates
// numeric user keys in natural order; they are state encodings, not Kafka
// record formats: records use package serde.
//
// # Schema evolution
//
// A codec that implements SchemaCodec has its schema recorded in the
// variable's registry entry, with every earlier schema version, and every
// stored value carries the version it was written under. When Init
// declares a variable with another schema than the stored one, the change
// is checked against every version; a refused change fails the
// declaration with a *SchemaChangeError (so App.Run fails at start-up,
// before any batch), and an accepted one adds a version: values of older
// versions are then resolved to the new schema when read. What each codec
// allows:
//
//   - Avro (Avro[T]): Spark's rules — add a field (old values read its
//     default: the avrodefault tag, else the zero value), remove a field,
//     reorder fields, widen int32 → int64 and float32 → float64. Narrowing,
//     other type changes and a changed MapState key schema are refused.
//   - Int32, Int64, Int, Float32, Float64: widening only (int32 → int64 or
//     int, int64 ↔ int, float32 → float64), so Int32() → Int64() continues
//     a count. String, Bytes, Bool and Uint64 cannot change.
//   - JSON: any change is accepted and nothing is checked (encoding/json
//     ignores unknown fields and leaves missing ones zero).
//   - another codec with SchemaCodec: its schema string cannot change.
//   - a codec without SchemaCodec: nothing is checked and no history kept.
//
// A change of codec family (built-in, Avro, JSON) is refused. A variable
// holds at most 16 schema versions (DefaultMaxSchemaVersions, Spark's
// valueStateSchemaEvolutionThreshold), or WithMaxSchemaVersions(n).
package state
