package kafka

import "github.com/kstate/kstate/internal/recordsize"

// DefaultMaxRecordBytes is the default of SessionConfig.MaxRecordBytes:
// 1 MiB, Kafka's default max.request.size, which fits Kafka's default
// max.message.bytes (1 MiB + 12).
const DefaultMaxRecordBytes = 1 << 20

// kgoBatchExtra is what franz-go counts on top of Kafka's batch size when it
// checks ProducerBatchMaxBytes (the 4-byte array length of the request).
const kgoBatchExtra = 4

// RecordBatchBytes is the size of a record batch holding only this record,
// uncompressed, as Kafka measures it against a topic's max.message.bytes
// (recordsize.Of). It is the size MaxRecordBytes bounds.
func RecordBatchBytes(key, value []byte, headers []Header) int {
	var hs recordsize.Headers
	for _, h := range headers {
		hs.Add(h.Key, h.Value)
	}
	return recordsize.Of(key, value, hs)
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
