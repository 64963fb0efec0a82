package kafka

import (
	"context"
	"errors"
	"io"
	"maps"
	"testing"
	"time"

	"github.com/kstate/kstate/kafka/embedded"
)

// TestReaderAfterCompaction: a restore of a compacted changelog, with
// aborted and committed transactions compacted together, reads the latest
// committed value of each key and ends exactly at the end.
func TestReaderAfterCompaction(t *testing.T) {
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
	if err := adm.EnsureTopic(ctx, TopicSpec{Name: "cl", Partitions: 1, Compacted: true}); err != nil {
		t.Fatal(err)
	}
	s, err := NewSession(SessionConfig{Brokers: e.Brokers(), GroupID: "g", Topics: []string{"unused"}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	write := func(commit bool, kv ...string) {
		t.Helper()
		var recs []Record
		for i := 0; i < len(kv); i += 2 {
			var v []byte
			if kv[i+1] != "" {
				v = []byte(kv[i+1])
			}
			recs = append(recs, Record{Topic: "cl", Partition: 0, Key: []byte(kv[i]), Value: v})
		}
		if err := s.Begin(); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Produce(ctx, recs); err != nil {
			t.Fatal(err)
		}
		if c, err := s.End(ctx, commit); err != nil || c != commit {
			t.Fatalf("End(%v) = %v, %v", commit, c, err)
		}
	}
	write(true, "a", "1", "b", "1", "c", "1")
	write(true, "a", "2", "b", "") // b deleted (tombstone)
	write(false, "a", "aborted", "c", "aborted")
	write(true, "c", "3")
	write(false, "d", "aborted")
	e.Compact()

	r, err := NewPartitionReader(ctx, e.Brokers(), "cl", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got := map[string]string{}
	for {
		recs, err := r.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, rec := range recs {
			if rec.Value == nil {
				delete(got, string(rec.Key))
			} else {
				got[string(rec.Key)] = string(rec.Value)
			}
		}
	}
	if want := map[string]string{"a": "2", "c": "3"}; !maps.Equal(got, want) {
		t.Fatalf("restored %v, want %v", got, want)
	}
	high, err := adm.EndOffsets(ctx, "cl")
	if err != nil {
		t.Fatal(err)
	}
	if r.Position() != high[0] || r.End() != high[0] {
		t.Fatalf("position %d end %d, want the high watermark %d", r.Position(), r.End(), high[0])
	}
}
