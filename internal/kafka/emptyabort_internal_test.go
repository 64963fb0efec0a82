package kafka

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kstate/kstate/internal/testlog"
)

// emptyAbortWatch sees franz-go's line for a commit turned abort for its
// own transactional id only, passes warnings and errors on to the log and
// drops franz-go's other Info lines. The end-to-end check is kafkatest's
// ReadAllCommitted on kfake under load (-count=300): it missed the
// committed record of p0 before the watch (franz-go had aborted it); a
// franz-go upgrade that rewords the line makes it fail again.
func TestEmptyAbortWatch(t *testing.T) {
	var buf bytes.Buffer
	w := &emptyAbortWatch{log: slog.New(slog.NewTextHandler(&buf, nil)), txnID: "app-i1"}
	if w.Level() != kgo.LogLevelInfo {
		t.Fatalf("level %v: franz-go logs the abort at Info", w.Level())
	}
	w.Log(kgo.LogLevelInfo, "ending transaction", "transactional_id", "app-i1", "commit", true)
	w.Log(kgo.LogLevelInfo, emptyAbortMsg, "transactional_id", "app-other")
	if w.seen.Load() {
		t.Fatal("seen without the line for its own transactional id")
	}
	w.Log(kgo.LogLevelWarn, "a warning", "k", "v")
	w.Log(kgo.LogLevelError, "an error")
	if got := buf.String(); !strings.Contains(got, "franz-go: a warning") || !strings.Contains(got, "franz-go: an error") || strings.Contains(got, "ending transaction") {
		t.Fatalf("log:\n%s", got)
	}
	w.Log(kgo.LogLevelInfo, emptyAbortMsg, "transactional_id", "app-i1")
	if !w.seen.Load() {
		t.Fatal("the abort line of its own transactional id was not seen")
	}
	(&emptyAbortWatch{txnID: "x"}).Log(kgo.LogLevelWarn, "no log: dropped") // no panic
}

// TestEmptyAbortRedone: a commit franz-go turns into an abort because none
// of the transaction's produces succeeded (here the broker refuses the
// only one) comes back from End as aborted with no error, the topic is
// purged from the producer, and the transaction redone on the same
// session commits exactly once.
func TestEmptyAbortRedone(t *testing.T) {
	c, err := kfake.NewCluster(kfake.SeedTopics(1, "in", "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	log, warned := testlog.Warnings(t)
	s, err := NewSession(SessionConfig{Brokers: c.ListenAddrs(), GroupID: "g", Topics: []string{"in"}, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// commit produces values in one transaction and commits it, again if
	// a rebalance (the member joining) aborted it.
	commit := func(values ...string) {
		t.Helper()
		for attempt := 1; ; attempt++ {
			if err := s.Begin(); err != nil {
				t.Fatal(err)
			}
			recs := make([]Record, len(values))
			for i, v := range values {
				recs[i] = Record{Topic: "out", Value: []byte(v)}
			}
			if _, err := s.Produce(ctx, recs); err != nil {
				t.Fatal(err)
			}
			committed, err := s.End(ctx, true)
			if err != nil {
				t.Fatal(err)
			}
			if committed {
				return
			}
			if attempt == 5 {
				t.Fatalf("the commit of %v was aborted 5 times", values)
			}
		}
	}
	commit("a", "b")

	// The broker refuses the next transaction's only produce.
	c.ControlKey(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		req := kreq.(*kmsg.ProduceRequest)
		resp := req.ResponseKind().(*kmsg.ProduceResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewProduceResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewProduceResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = kerr.InvalidRecord.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	if err := s.Begin(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Produce(ctx, []Record{{Topic: "out", Value: []byte("refused")}}); !errors.Is(err, kerr.InvalidRecord) {
		t.Fatalf("produce: %v, want the broker's INVALID_RECORD", err)
	}
	committed, err := s.End(ctx, true)
	if committed || err != nil {
		t.Fatalf("End(commit) after the refused produce = %v, %v; want aborted, no error", committed, err)
	}
	if got := warned.String(); !strings.Contains(got, "produced topics reloaded") || !strings.Contains(got, "topics=[out]") {
		t.Fatalf("no warning of the abort and the purge of out:\n%s", got)
	}

	commit("c")
	got, err := ReadAll(ctx, c.ListenAddrs(), "out")
	if err != nil {
		t.Fatal(err)
	}
	var values []string
	for _, r := range got {
		values = append(values, string(r.Value))
	}
	if !slices.Equal(values, []string{"a", "b", "c"}) {
		t.Fatalf("committed %v, want [a b c]", values)
	}
}
