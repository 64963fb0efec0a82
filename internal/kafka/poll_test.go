package kafka

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/kstate/kstate/kafka/embedded"

	"github.com/twmb/franz-go/pkg/kgo"
)

// freshSetup returns a session on topic "in" (1 partition) whose last poll
// returned record "a" and whose consumer now holds a buffered fetch with
// record "b" (the fetch franz-go sent when "a" was drained), and a producer.
func freshSetup(t *testing.T) (*Session, func(v string)) {
	t.Helper()
	e, err := embedded.Start(embedded.Options{Topics: map[string]int{"in": 1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	s, err := NewSession(SessionConfig{Brokers: e.Brokers(), GroupID: "g", Topics: []string{"in"}, FetchMaxWait: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	prod, err := kgo.NewClient(kgo.SeedBrokers(e.Brokers()...), kgo.DefaultProduceTopic("in"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prod.Close)
	ctx := context.Background()
	produce := func(v string) {
		t.Helper()
		if err := prod.ProduceSync(ctx, &kgo.Record{Value: []byte(v)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	produce("a")
	deadline := time.Now().Add(30 * time.Second)
	for {
		recs, err := s.Poll(ctx, 100)
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) > 0 {
			if got := values(recs); !slices.Equal(got, []string{"a"}) {
				t.Fatalf("first poll: %q, want [a]", got)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no record polled in 30s")
		}
	}
	produce("b")
	for s.gts.Client().BufferedFetchRecords() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the fetch sent after the first poll did not buffer record b")
		}
		time.Sleep(time.Millisecond)
	}
	return s, produce
}

func values(recs []Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = string(r.Value)
	}
	return out
}

func fetchValues(fs kgo.Fetches) []string {
	var out []string
	fs.EachRecord(func(r *kgo.Record) { out = append(out, string(r.Value)) })
	return out
}

// A poll that finds a stale buffered fetch also returns what arrived after
// it: record "c", produced after "b" was buffered, comes in the same poll
// (a plain poll returns only "b", and "c" one loop iteration later).
func TestPollFreshTopsUpAStaleFetch(t *testing.T) {
	s, produce := freshSetup(t)
	produce("c")
	// A generous wait: "c" is on the broker, so the top-up fetch returns at
	// once; the bound only guards a slow test machine.
	if got := fetchValues(s.pollFresh(context.Background(), 100, 10*time.Second)); !slices.Equal(got, []string{"b", "c"}) {
		t.Fatalf("pollFresh returned %q, want [b c]", got)
	}
}

// With nothing new on the broker, the top-up gives up after its wait and
// returns the buffered records alone; the fetch it sent stays in flight and
// the next poll returns what arrives.
func TestPollFreshWaitIsBounded(t *testing.T) {
	s, produce := freshSetup(t)
	start := time.Now()
	got := fetchValues(s.pollFresh(context.Background(), 100, freshPollWait))
	took := time.Since(start)
	if !slices.Equal(got, []string{"b"}) {
		t.Fatalf("pollFresh returned %q, want [b]", got)
	}
	if took > s.cfg.FetchMaxWait/2 {
		t.Fatalf("pollFresh took %v with nothing new: its wait (%v) is not bounding it", took, freshPollWait)
	}
	produce("c")
	if got := fetchValues(s.pollFresh(context.Background(), 100, freshPollWait)); !slices.Equal(got, []string{"c"}) {
		t.Fatalf("next pollFresh returned %q, want [c]", got)
	}
}

// A full poll (a backlog) does not wait for more.
func TestPollFreshFullPollDoesNotWait(t *testing.T) {
	s, produce := freshSetup(t)
	produce("c")
	if got := fetchValues(s.pollFresh(context.Background(), 1, 10*time.Second)); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("pollFresh(max 1) returned %q, want [b]", got)
	}
	if got := fetchValues(s.pollFresh(context.Background(), 100, freshPollWait)); !slices.Equal(got, []string{"c"}) {
		t.Fatalf("next pollFresh returned %q, want [c]", got)
	}
}
