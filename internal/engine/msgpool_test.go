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
	for range 2 * maxPooled {
		p.put(make([]Message, 1))
	}
	if len(p.free) > maxPooled {
		t.Fatalf("%d arrays pooled, bound %d", len(p.free), maxPooled)
	}
}
