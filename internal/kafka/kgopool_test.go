package kafka

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// A pooled array comes back zeroed (no record's bytes kept alive, and
// setKgo's zero-record precondition holds), is handed out once, the
// smallest that fits first, and the pool stays bounded.
func TestKgoPool(t *testing.T) {
	var p kgoPool
	a := p.get(3)
	if len(a) != 3 || cap(a) != 64 {
		t.Fatalf("get(3): len %d cap %d, want 3 and 64 (the smallest class)", len(a), cap(a))
	}
	a[0] = kgo.Record{Key: []byte("k"), Value: []byte("v"), Topic: "t", Offset: 7}
	a[2].Headers = []kgo.RecordHeader{{Key: "h"}}
	p.put(a)
	b := p.get(5)
	if &b[0] != &a[0] {
		t.Fatal("get did not reuse the pooled array")
	}
	for i, r := range b[:cap(b)] {
		if r.Key != nil || r.Value != nil || r.Topic != "" || r.Offset != 0 || r.Headers != nil {
			t.Fatalf("pooled array not zeroed at %d: %+v", i, r)
		}
	}
	if c := p.get(5); &c[0] == &b[0] {
		t.Fatal("one array handed out twice")
	}
	if c := p.get(100); len(c) != 100 || cap(c) != 128 {
		t.Fatalf("get(100): len %d cap %d, want 100 and 128", len(c), cap(c))
	}
	for range 100 {
		p.put(make([]kgo.Record, 0, maxPooledKgo/64))
	}
	p.put(make([]kgo.Record, 0, maxPooledKgo)) // over the bound with what is pooled: dropped
	total := 0
	for _, b := range p.free {
		total += cap(b)
	}
	if total > maxPooledKgo || total != p.total {
		t.Fatalf("%d records pooled (counted %d), bound %d", total, p.total, maxPooledKgo)
	}
	var q kgoPool
	q.put(make([]kgo.Record, 0, 1024))
	q.put(make([]kgo.Record, 0, 64))
	if c := q.get(50); cap(c) != 64 {
		t.Fatalf("get(50) from arrays of 1024 and 64: cap %d", cap(c))
	}
}
