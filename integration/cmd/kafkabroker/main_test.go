package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstate/kstate/kafka/embedded"
)

// topic create, list and delete against a cluster: the partition count and
// the compaction flag reach the broker; bad usage is refused.
func TestTopicCommands(t *testing.T) {
	e, err := embedded.Start(embedded.Options{Partitions: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	run := func(args ...string) (string, error) {
		var out bytes.Buffer
		err := topicCmd(ctx, e.Brokers(), args, &out)
		return out.String(), err
	}
	if out, err := run("create", "events", "-partitions", "3"); err != nil || !strings.Contains(out, "created topic events (3 partitions)") {
		t.Fatalf("create events: %q, %v", out, err)
	}
	if out, err := run("create", "-compact", "--partitions=2", "snapshots"); err != nil || !strings.Contains(out, "compacted") {
		t.Fatalf("create snapshots: %q, %v", out, err)
	}
	if _, err := run("create", "events"); err == nil || !strings.Contains(err.Error(), "TOPIC_ALREADY_EXISTS") {
		t.Fatalf("create an existing topic: %v", err)
	}
	for _, bad := range [][]string{{"create"}, {"create", "x", "-partitions", "0"}, {"create", "a", "b"}, {"rename", "x"}, {}, {"create", "x", "-nope"}} {
		if _, err := run(bad...); !errors.Is(err, errUsage) {
			t.Fatalf("topic %q: %v, want a usage error", bad, err)
		}
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(e.Brokers()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	td, err := adm.ListTopics(ctx, "events", "snapshots")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(td["events"].Partitions); n != 3 {
		t.Fatalf("events has %d partitions, want 3", n)
	}
	if n := len(td["snapshots"].Partitions); n != 2 {
		t.Fatalf("snapshots has %d partitions, want 2", n)
	}
	rc, err := adm.DescribeTopicConfigs(ctx, "snapshots")
	if err != nil {
		t.Fatal(err)
	}
	c, err := rc.On("snapshots", nil)
	if err != nil {
		t.Fatal(err)
	}
	var policy string
	for _, kv := range c.Configs {
		if kv.Key == "cleanup.policy" {
			policy = kv.MaybeValue()
		}
	}
	if policy != "compact" {
		t.Fatalf("snapshots cleanup.policy = %q, want compact", policy)
	}

	out, err := run("list")
	if err != nil || !strings.Contains(out, "events\t3\n") || !strings.Contains(out, "snapshots\t2\n") {
		t.Fatalf("list: %q, %v", out, err)
	}
	if out, err := run("delete", "events"); err != nil || !strings.Contains(out, "deleted topic events") {
		t.Fatalf("delete: %q, %v", out, err)
	}
}
