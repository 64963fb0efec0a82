package main

import (
	"bytes"
	"context"
	"testing"
	"time"
)

func TestSchemaRegistry(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, nil, "", t.TempDir(), &out); err != nil {
		t.Fatalf("run: %v\noutput so far:\n%s", err, out.String())
	}
	if got := out.String(); got != want {
		t.Fatalf("output:\n%s\nwant:\n%s", got, want)
	}
}

const want = `in   v1 (schema id 1): alice 300, bob 150, alice 200
out  alice=500 (2) bob=150 (1)
     bob's output record: 00 00 00 00 03 02 ac 02 (magic byte, schema id 3, Avro)
in   v2 (schema id 4): bob 50 (coupon SPRING), carol 999
out  alice=500 (2) bob=200 (2) carol=999 (1)
     bob's output record: 00 00 00 00 03 04 90 03 (magic byte, schema id 3, Avro)
`
