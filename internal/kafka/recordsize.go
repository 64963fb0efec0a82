package kafka

import "encoding/binary"

// DefaultMaxRecordBytes is the default of SessionConfig.MaxRecordBytes:
// 1 MiB, Kafka's default max.request.size, which fits Kafka's default
// max.message.bytes (1 MiB + 12).
const DefaultMaxRecordBytes = 1 << 20

// recordBatchOverhead is the size of a record batch (magic v2) without its
// records, including the 12-byte offset and length prefix that Kafka counts
// against max.message.bytes.
const recordBatchOverhead = 61

// kgoBatchExtra is what franz-go counts on top of Kafka's batch size when it
// checks ProducerBatchMaxBytes (the 4-byte array length of the request).
const kgoBatchExtra = 4

// RecordBatchBytes is the size of a record batch holding only this record,
// uncompressed, as Kafka measures it against a topic's max.message.bytes. It
// is the size MaxRecordBytes bounds.
func RecordBatchBytes(key, value []byte, headers []Header) int {
	n := 1 + 1 + 1 // attributes, timestamp delta 0, offset delta 0
	n += bytesLen(key) + bytesLen(value)
	n += varintLen(int64(len(headers)))
	for _, h := range headers {
		n += varintLen(int64(len(h.Key))) + len(h.Key) + bytesLen(h.Value)
	}
	return recordBatchOverhead + varintLen(int64(n)) + n
}

// CheckRecordSize returns a *RecordTooLargeError when the record does not
// fit limit bytes (see RecordBatchBytes). The producer calls it for every
// record; callers that want to attribute the failure to a key earlier (at
// emit time) can call it themselves with the same limit.
func CheckRecordSize(topic string, partition int32, key, value []byte, headers []Header, limit int) error {
	if size := RecordBatchBytes(key, value, headers); size > limit {
		return &RecordTooLargeError{Topic: topic, Partition: partition, Key: key, Size: size, Limit: limit}
	}
	return nil
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
