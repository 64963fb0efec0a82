// Package serde holds Kafka record serdes: the conversion between Go values
// and the bytes of Kafka record keys and values, byte-for-byte compatible
// with the serializers that ship with Apache Kafka's Java client, so a
// kstate application can read topics written by Java producers and write
// topics read by Java consumers (Kafka Streams, ksqlDB, Connect).
//
// # Serdes are not state encodings
//
// Package state has its own codecs (state.Codec) for state variables. Those
// are order-preserving: state.Int64 flips the sign bit and state.Float64
// flips bits so that encoded keys sort like the numbers in the store. That
// is right on disk and in changelogs, which only kstate reads, and wrong on
// a Kafka topic, where a Java LongDeserializer would read state.Int64's
// encoding of 1 as -9223372036854775807. Use this package for records and
// package state for state; never the other way round.
//
// # Matching Java classes
//
// Each serde but JSON writes exactly the bytes its Java class (in
// org.apache.kafka.common.serialization) writes and reads what it reads:
//
//	Go serde    Java class                 bytes
//	String()    StringSerializer           UTF-8
//	Bytes()     ByteArraySerializer        raw
//	Int64()     LongSerializer             8, big-endian two's complement
//	Int32()     IntegerSerializer          4, big-endian two's complement
//	Int16()     ShortSerializer            2, big-endian two's complement
//	Float64()   DoubleSerializer           8, IEEE 754 raw bits, big-endian
//	Float32()   FloatSerializer            4, IEEE 754 raw bits, big-endian
//	Bool()      BooleanSerializer (3.5+)   1, 0x00 or 0x01
//	JSON[T]()   none in kafka-clients      UTF-8 JSON (Jackson reads it)
//
// # Null
//
// Java serdes map a null record key or value (a tombstone) to a null
// object. Go's value types have no null, so the fixed-size serdes (Int64,
// Int32, Int16, Float64, Float32, Bool) return an error wrapping ErrSize for
// nil or empty input: check for a tombstone before deserializing. String
// deserializes nil to "", and Bytes keeps nil as nil.
package serde
