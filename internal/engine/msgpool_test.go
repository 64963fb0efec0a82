package engine

import "testing"

// A pooled array comes back empty and zeroed (no record's bytes kept
// alive), is handed out once, and the pool stays bounded.
func TestMsgPool(t *testing.T) {
	var p msgPool
	a := p.get(3)
	if len(a) != 0 || cap(a) < 3 {
		t.Fatalf("get(3): len %d cap %d", len(a), cap(a))
	}
	a = append(a, Message{Key: []byte("k"), Value: []byte("v")}, Message{Topic: "t"})
	p.put(a)
	b := p.get(2)
	if cap(b) != cap(a) || &b[:1][0] != &a[0] {
		t.Fatal("get did not reuse the pooled array")
	}
	for i, m := range b[:cap(b)] {
		if m.Key != nil || m.Value != nil || m.Topic != "" {
			t.Fatalf("pooled array not zeroed at %d: %+v", i, m)
		}
	}
	if c := p.get(2); cap(c) > 0 && &c[:1][0] == &b[:1][0] {
		t.Fatal("one array handed out twice")
	}
	if c := p.get(100); cap(c) < 100 {
		t.Fatalf("get(100): cap %d", cap(c))
	}
	p.put(make([]Message, 0, maxPooledRecords)) // over the bound with what is pooled: dropped
	for range 100 {
		p.put(make([]Message, 0, maxPooledRecords/64))
	}
	total := 0
	for _, b := range p.free {
		total += cap(b)
	}
	if total > maxPooledRecords || total != p.total {
		t.Fatalf("%d records pooled (counted %d), bound %d", total, p.total, maxPooledRecords)
	}
	// Best fit: the smallest array that holds n.
	var q msgPool
	q.put(make([]Message, 0, 1000))
	q.put(make([]Message, 0, 10))
	if c := q.get(5); cap(c) != 10 {
		t.Fatalf("get(5) from arrays of 1000 and 10: cap %d", cap(c))
	}
}
