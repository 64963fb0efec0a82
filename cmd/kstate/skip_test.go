package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/kstate/kstate/internal/kafka"
)

// TestSkipCLI on an in-memory cluster: a missing flag is a usage error,
// a refusal exits 4 naming why, a valid request prints what the next run
// does (internal/skip's test covers the checks; integration's
// TestSkipRecordCLI the whole case on a real broker).
func TestSkipCLI(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "in", "app-changelog"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	brokers := strings.Join(c.ListenAddrs(), ",")
	p, err := kafka.NewProducer(c.ListenAddrs())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.Produce(ctx, kafka.Record{Topic: "in", Partition: 1, Key: []byte("k"), Value: []byte("a")},
		kafka.Record{Topic: "in", Partition: 1, Key: []byte("k"), Value: []byte("b")}); err != nil {
		t.Fatal(err)
	}
	base := []string{"skip", "--brokers", brokers, "--app", "app", "--topic", "in", "--partition", "1"}
	if _, errb, code := cli(t, base...); code != exitUsage || !strings.Contains(errb, "--offset are required") {
		t.Fatalf("skip without --offset: exit %d, %q", code, errb)
	}
	if _, errb, code := cli(t, append(base, "--offset", "2")...); code != exitRefused || !strings.Contains(errb, "no record at offset 2") {
		t.Fatalf("skip past the end: exit %d, %q", code, errb)
	}
	out, errb, code := cli(t, append(base, "--offset", "1")...)
	if code != exitOK || !strings.Contains(out, `drops the record at offset 1`) {
		t.Fatalf("skip: exit %d, stdout %q, stderr %q", code, out, errb)
	}
}
