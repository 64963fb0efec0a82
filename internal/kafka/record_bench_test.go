package kafka

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// BenchmarkFromKgoHeaders is the poll's conversion of 2,000 fetched
// records with 3 headers each into the records the session returns (the
// engine's input, issue #26): the one copy of the headers on the input
// path, at the franz-go boundary (kgo.RecordHeader is franz-go's type).
// Run with -benchmem: allocs/op / 2000 is the allocations per record.
func BenchmarkFromKgoHeaders(b *testing.B) {
	const batch = 2000
	krecs := make([]*kgo.Record, batch)
	for i := range krecs {
		krecs[i] = &kgo.Record{
			Topic: "in", Partition: 3, Offset: int64(i), Key: []byte("key"), Value: make([]byte, 64), Timestamp: time.UnixMilli(int64(i)),
			Headers: []kgo.RecordHeader{{Key: "trace", Value: []byte("0123456789abcdef")}, {Key: "span", Value: []byte("01234567")}, {Key: "status", Value: []byte("good")}},
		}
	}
	recs := make([]Record, 0, batch)
	b.ReportAllocs()
	for b.Loop() {
		recs = recs[:0]
		for _, r := range krecs {
			recs = append(recs, fromKgo(r))
		}
		if len(recs[batch-1].Headers) != 3 || recs[batch-1].Headers[2].Key != "status" {
			b.Fatalf("headers %v", recs[batch-1].Headers)
		}
	}
}

// BenchmarkProduceConvertHeaders is the producer's per-record work on
// 2,000 engine messages with 3 headers each (Session.Produce and
// ProduceAsync before franz-go): the size check (CheckRecordSize) and the
// conversion into franz-go's records (toKgos), the one copy of the headers
// on the output path. allocs/op / 2000 is the allocations per record.
func BenchmarkProduceConvertHeaders(b *testing.B) {
	const batch = 2000
	recs := make([]Record, batch)
	for i := range recs {
		recs[i] = Record{Topic: "out", Partition: int32(i % 4), Key: []byte("key"), Value: make([]byte, 64),
			Headers: []Header{{Key: "trace", Value: []byte("0123456789abcdef")}, {Key: "span", Value: []byte("01234567")}, {Key: "status", Value: []byte("good")}}}
	}
	b.ReportAllocs()
	for b.Loop() {
		for i := range recs {
			r := &recs[i]
			if err := CheckRecordSize(r.Topic, r.Partition, r.Key, r.Value, r.Headers, DefaultMaxRecordBytes); err != nil {
				b.Fatal(err)
			}
		}
		if krs := toKgos(recs); len(krs[batch-1].Headers) != 3 {
			b.Fatalf("headers %v", krs[batch-1].Headers)
		}
	}
}
