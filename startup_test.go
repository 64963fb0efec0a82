package kstate_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/internal/testlog"
	"github.com/kstate/kstate/internal/testprocs"
)

// topicExists reports whether topic exists on brokers.
func topicExists(t *testing.T, brokers []string, topic string) bool {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	td, err := kadm.NewClient(cl).ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return td.Has(topic)
}

// A first start that fails leaves no changelog topic behind: a missing
// output topic is found before anything is created; a failure after the
// changelog was created (an output topic whose max.message.bytes is under
// MaxRecordBytes) deletes it again. A later start with the mistake fixed
// runs.
func TestFailedFirstStartLeavesNoChangelog(t *testing.T) {
	for name, mistake := range map[string]func(*testApp, []string){
		"output topic missing": func(c *testApp, _ []string) { c.Output.Topic = "missing" },
		"record limit": func(c *testApp, brokers []string) {
			setTopicConfig(t, brokers, "out", "max.message.bytes", "2048")
			c.Kafka.MaxRecordBytes = 4096
		},
	} {
		t.Run(name, func(t *testing.T) {
			brokers := startEmbedded(t, 2)
			cfg := config(brokers, t.TempDir(), testprocs.NewCounter)
			bad := cfg
			mistake(&bad, brokers)
			app := newApp(t, bad)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			err := app.Run(ctx)
			if err == nil {
				t.Fatal("Run succeeded")
			}
			t.Logf("Run: %v", err)
			if topicExists(t, brokers, "app-changelog") {
				t.Fatalf("the failed first start (%v) left the changelog topic behind", err)
			}
			if name == "record limit" {
				setTopicConfig(t, brokers, "out", "max.message.bytes", "1048588")
			}
			app = newApp(t, cfg)
			testprocs.Start(t, app)
			testprocs.Produce(t, brokers, "in", "a=1", "a=2")
			want(t, testprocs.WaitOutputs(t, brokers, "out", 2, 30*time.Second), "a=[1 2]")
			if !topicExists(t, brokers, "app-changelog") {
				t.Fatal("no changelog topic after a start that ran")
			}
		})
	}
}

// setTopicConfig sets one config of topic.
func setTopicConfig(t *testing.T, brokers []string, topic, key, value string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := kadm.NewClient(cl).AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: key, Value: &value}}, topic)
	if err == nil {
		_, err = resp.On(topic, nil)
	}
	if err != nil && !strings.Contains(err.Error(), "none") {
		t.Fatal(err)
	}
}

// A first start logs the changelog's creation calmly: the new group's
// committed-offsets error (GROUP_ID_NOT_FOUND here, COORDINATOR_NOT_AVAILABLE
// on a new Kafka cluster) is expected and goes to Debug, not Info.
func TestFirstStartLogsNoExpectedErrorAtInfo(t *testing.T) {
	brokers := startEmbedded(t, 2)
	cfg := config(brokers, t.TempDir(), testprocs.NewCounter)
	var logs testlog.Buffer
	cfg.Observability.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	app, err := kstate.New(cfg.Topology, cfg.Options)
	if err != nil {
		t.Fatal(err)
	}
	stop := testprocs.Start(t, app)
	testprocs.Produce(t, brokers, "in", "a=1")
	testprocs.WaitOutputs(t, brokers, "out", 1, 30*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	l := logs.String()
	for _, line := range strings.Split(l, "\n") {
		if strings.Contains(line, "GROUP_ID_NOT_FOUND") || strings.Contains(line, "COORDINATOR_NOT_AVAILABLE") {
			t.Errorf("an expected first-start error logged at Info or above: %s", line)
		}
	}
	if !strings.Contains(l, `msg="changelog topic created"`) || !strings.Contains(l, `changelog=app-changelog partitions=2`) {
		t.Errorf("no Info record of the changelog's creation:\n%s", l)
	}
}
