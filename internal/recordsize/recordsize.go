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

// Header is a record header.
type Header struct {
	Key   string
	Value []byte
}

// Of is the size of a record batch holding only this record,
// uncompressed, as Kafka measures it against a topic's max.message.bytes. It
// is the size MaxRecordBytes bounds.
func Of(key, value []byte, headers []Header) int {
	n := 1 + 1 + 1 // attributes, timestamp delta 0, offset delta 0
	n += bytesLen(key) + bytesLen(value)
	n += varintLen(int64(len(headers)))
	for _, h := range headers {
		n += varintLen(int64(len(h.Key))) + len(h.Key) + bytesLen(h.Value)
	}
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
