// Package recordsize computes the size of a Kafka record the way the broker
// counts it against a topic's max.message.bytes, so that the engine (at
// Emit, per key) and the producer (per record) apply one limit,
// Options.Kafka.MaxRecordBytes, without the engine importing the Kafka client.
package recordsize

import "encoding/binary"

// recordBatchOverhead is the size of a record batch (magic v2) without its
// records, including the 12-byte offset and length prefix that Kafka counts
// against max.message.bytes.
const recordBatchOverhead = 61

// Headers is the encoded size of a record's headers, counted with Add;
// the zero value is no headers. Callers count their own header type (the
// engine's and the producer's processor.Header, which this leaf package
// cannot import) without converting it.
type Headers struct{ n, size int }

// Add counts one header.
func (h *Headers) Add(key string, value []byte) {
	h.n++
	h.size += varintLen(int64(len(key))) + len(key) + bytesLen(value)
}

// Of is the size of a record batch holding only this record,
// uncompressed, as Kafka measures it against a topic's max.message.bytes. It
// is the size MaxRecordBytes bounds.
func Of(key, value []byte, headers Headers) int {
	n := 1 + 1 + 1 // attributes, timestamp delta 0, offset delta 0
	n += bytesLen(key) + bytesLen(value)
	n += varintLen(int64(headers.n)) + headers.size
	return recordBatchOverhead + varintLen(int64(n)) + n
}

// bytesLen is the encoded size of a nullable byte field (length -1: null).
func bytesLen(b []byte) int {
	if b == nil {
		return varintLen(-1)
	}
	return varintLen(int64(len(b))) + len(b)
}

func varintLen(v int64) int {
	var buf [binary.MaxVarintLen64]byte
	return binary.PutVarint(buf[:], v)
}
