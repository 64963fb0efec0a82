package kstate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"

	"github.com/kstate/kstate/internal/engine"
	"github.com/kstate/kstate/internal/kafka"
	"github.com/kstate/kstate/kafka/embedded"
)

// kafkaSession hands the engine's messages to the kafka session as they
// are (kafka.Record is engine.Message), and the engine may reuse its slice
// of messages once a call returned: while franz-go still holds the first
// call's records, the next calls overwrite the slice. Every record must
// reach the log with its own bytes and headers, in call order.
func TestKafkaSessionProducesBackToBackWithReusedBuffers(t *testing.T) {
	e, err := embedded.Start(embedded.Options{Topics: map[string]int{"t": 3, "in": 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ks, err := kafka.NewSession(kafka.SessionConfig{Brokers: e.Brokers(), GroupID: "g", Topics: []string{"in"}})
	if err != nil {
		t.Fatal(err)
	}
	defer ks.Close()
	k := &kafkaSession{s: ks}
	ctx := context.Background()
	if err := k.Begin(); err != nil {
		t.Fatal(err)
	}

	const per = 700
	buf := make([]engine.Message, per) // the caller's slice, reused by every call
	fill := func(batch string) {
		for i := range buf {
			buf[i] = engine.Message{Topic: "t", Partition: int32(i % 3),
				Key: fmt.Appendf(nil, "%s-k%d", batch, i), Value: fmt.Appendf(nil, "%s-v%d", batch, i)}
			if i%50 == 0 {
				buf[i].Headers = []engine.Header{{Key: "h", Value: []byte(batch)}}
			}
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for c, batch := range []string{"a", "b", "c"} {
		fill(batch)
		wg.Add(1)
		k.ProduceAsync(ctx, buf, func(offs []int64, err error) {
			if err == nil && len(offs) != per {
				err = fmt.Errorf("%d offsets for %d records", len(offs), per)
			}
			errs[c] = err
			wg.Done()
		})
	}
	fill("d") // a synchronous Produce after the asynchronous ones, same buffers
	if _, err := k.Produce(ctx, buf); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if ok, err := k.End(ctx, true); !ok || err != nil {
		t.Fatalf("End: %v, %v", ok, err)
	}

	admin, err := kafka.NewAdmin(e.Brokers())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	for p := range int32(3) {
		var want []string
		for _, batch := range []string{"a", "b", "c", "d"} {
			for i := int(p); i < per; i += 3 {
				h := ""
				if i%50 == 0 {
					h = batch
				}
				want = append(want, fmt.Sprintf("%s-k%d=%s-v%d[%s]", batch, i, batch, i, h))
			}
		}
		rd, err := admin.NewPartitionReader(ctx, "t", p, 0)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for {
			recs, err := rd.Next(ctx)
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range recs {
				h := ""
				for _, hd := range r.Headers {
					h += string(hd.Value)
				}
				got = append(got, fmt.Sprintf("%s=%s[%s]", r.Key, r.Value, h))
			}
		}
		rd.Close()
		if len(got) != len(want) {
			t.Fatalf("partition %d: %d records, want %d", p, len(got), len(want))
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("partition %d record %d: %q, want %q", p, i, got[i], want[i])
			}
		}
	}
}
