package kafka

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/kstate/kstate/kafka/embedded"
)

// TestAdminReadersShareItsClient: readers opened on an Admin read their
// partitions concurrently over its one client, exactly, and closing them
// leaves the Admin working.
func TestAdminReadersShareItsClient(t *testing.T) {
	e, err := embedded.Start(embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	adm, err := NewAdmin(e.Brokers())
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	const parts, perPart = 4, 300
	if err := adm.EnsureTopic(ctx, TopicSpec{Name: "cl", Partitions: parts}); err != nil {
		t.Fatal(err)
	}
	for p := range int32(parts) {
		recs := make([]Record, perPart)
		for i := range recs {
			recs[i] = Record{Topic: "cl", Partition: p, Key: []byte(fmt.Sprint(i)), Value: []byte(fmt.Sprintf("%d-%d", p, i))}
		}
		// Two transactions per partition: a commit marker sits between the records.
		if _, err := WriteTransaction(ctx, e.Brokers(), fmt.Sprintf("w-%d", p), 0, recs[:1]); err != nil {
			t.Fatal(err)
		}
		if _, err := WriteTransaction(ctx, e.Brokers(), fmt.Sprintf("w-%d", p), 0, recs[1:]); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, parts)
	for p := range int32(parts) {
		wg.Go(func() {
			r, err := adm.NewPartitionReader(ctx, "cl", p, 0)
			if err != nil {
				errs <- err
				return
			}
			defer r.Close()
			n := 0
			for {
				recs, err := r.Next(ctx)
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					errs <- err
					return
				}
				for _, rec := range recs {
					if want := fmt.Sprintf("%d-%d", p, n); string(rec.Value) != want {
						errs <- fmt.Errorf("partition %d record %d: %q, want %q", p, n, rec.Value, want)
						return
					}
					n++
				}
			}
			if n != perPart || r.Position() != r.End() {
				errs <- fmt.Errorf("partition %d: read %d records to %d (end %d), want %d", p, n, r.Position(), r.End(), perPart)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n, err := adm.Partitions(ctx, "cl"); err != nil || n != parts {
		t.Fatalf("the Admin after its readers closed: Partitions = %d, %v", n, err)
	}
}
