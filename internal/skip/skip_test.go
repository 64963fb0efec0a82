package skip

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstate/kstate/internal/engine"
	"github.com/kstate/kstate/internal/kafka"
)

// TestRun on an in-memory cluster: the refusals write nothing, a valid
// request writes one skip record to the changelog partition of the input
// partition, and a group with members is refused (or waited for).
func TestRun(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "in", "app-changelog", "other-changelog"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	brokers := c.ListenAddrs()
	cc := kafka.ClientConfig{Brokers: brokers}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	p, err := cc.NewProducer()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var recs []kafka.Record
	for range 5 {
		recs = append(recs, kafka.Record{Topic: "in", Partition: 1, Key: []byte("k"), Value: []byte("v")})
	}
	if err := p.Produce(ctx, recs...); err != nil {
		t.Fatal(err)
	}
	adm, err := cc.NewAdmin()
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	if err := adm.CommitGroupOffsets(ctx, "app", "in", map[int32]int64{1: 2}); err != nil {
		t.Fatal(err)
	}

	req := Request{Client: cc, App: "app", Inputs: []string{"in"}, Topic: "in", Partition: 1}
	for _, tc := range []struct {
		name string
		edit func(*Request)
		want string
	}{
		{"processed", func(r *Request) { r.Offset = 1 }, "processed already: the group \"app\" committed offset 2"},
		{"past the end", func(r *Request) { r.Offset = 5 }, "has no record at offset 5: its records are at offsets 0..4"},
		{"no partition", func(r *Request) { r.Partition, r.Offset = 3, 2 }, "has partitions 0..2, not 3"},
		{"not an input", func(r *Request) { r.Topic = "out" }, `topic "out" is not an input topic`},
		{"no changelog", func(r *Request) { r.App, r.Offset = "typo", 2 }, `application "typo" has no changelog topic "typo-changelog"`},
	} {
		r := req
		tc.edit(&r)
		_, err := Run(ctx, r)
		if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want a refusal containing %q", tc.name, err, tc.want)
		}
	}
	if got := skips(t, ctx, brokers); len(got) != 0 {
		t.Fatalf("refusals wrote %v", got)
	}

	r := req
	r.Offset = 3
	res, err := Run(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	if res.Committed != 2 || res.Start != 0 || res.End != 5 {
		t.Fatalf("result %+v", res)
	}
	if got := skips(t, ctx, brokers); len(got) != 1 || got[0] != "p1 in@3" {
		t.Fatalf("skip records %v, want [p1 in@3]", got)
	}

	// A member in the group: refused at once, or waited for until ctx.
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumerGroup("app"), kgo.ConsumeTopics("in"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
	cl.PollFetches(pctx) // joins the group
	pcancel()
	if _, err := Run(ctx, r); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "member(s)") {
		t.Fatalf("Run with a member: %v, want a refusal naming the members", err)
	}
	r.Wait = true
	wctx, wcancel := context.WithTimeout(ctx, time.Second)
	defer wcancel()
	if _, err := Run(wctx, r); !errors.Is(err, ErrRefused) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Run waiting for a member: %v, want a refusal after ctx ended", err)
	}
}

// skips lists the skip records of app-changelog as "pP topic@offset".
func skips(t *testing.T, ctx context.Context, brokers []string) []string {
	t.Helper()
	recs, err := kafka.ReadAll(ctx, brokers, "app-changelog")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range recs {
		if topic, off, ok := engine.SkipOffset(r.Key, r.Value); ok {
			out = append(out, fmt.Sprintf("p%d %s@%d", r.Partition, topic, off))
		}
	}
	return out
}
