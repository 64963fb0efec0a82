package recordsize

import (
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestOfMatchesWireRecord checks Of against franz-go's encoding of the
// record (kmsg.Record, in a batch of one: the batch adds its fixed
// overhead), with and without headers, nil and empty fields.
func TestOfMatchesWireRecord(t *testing.T) {
	long := []byte(strings.Repeat("v", 300)) // two-byte varint lengths
	cases := []struct {
		name       string
		key, value []byte
		headers    []kmsg.Header
	}{
		{"no headers", []byte("k"), []byte("v"), nil},
		{"tombstone, nil key", nil, nil, nil},
		{"headers", []byte("key"), long, []kmsg.Header{{Key: "trace", Value: []byte("0123456789abcdef")}, {Key: "nil", Value: nil}, {Key: "", Value: []byte{}}}},
		{"long header", []byte("key"), []byte("v"), []kmsg.Header{{Key: strings.Repeat("h", 200), Value: long}}},
	}
	for _, c := range cases {
		var hs Headers
		for _, h := range c.headers {
			hs.Add(h.Key, h.Value)
		}
		r := kmsg.Record{Key: c.key, Value: c.value, Headers: c.headers}
		body := len(r.AppendTo(nil)) - 1 // without the Length varint, which is 1 byte as 0
		r.Length = int32(body)
		want := recordBatchOverhead + len(r.AppendTo(nil))
		if got := Of(c.key, c.value, hs); got != want {
			t.Errorf("%s: Of = %d, want %d (the encoded record in a batch of one)", c.name, got, want)
		}
	}
}
