package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/examples/heartbeat/heartbeat"
	"github.com/kstate/kstate/kafka/kafkatest"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/serde"
	"github.com/kstate/kstate/statereader"
)

// cli runs the kstate command in-process.
func cli(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	code = runCLI(ctx, args, &out, &errb)
	return out.String(), errb.String(), code
}

func lines[T any](t *testing.T, s string) []T {
	t.Helper()
	var out []T
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		if l == "" {
			continue
		}
		var v T
		if err := json.Unmarshal([]byte(l), &v); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		out = append(out, v)
	}
	return out
}

var hbStart = time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)

// TestStateCLI runs the heartbeat monitor on a real broker, then `kstate
// state` against its changelog (while it runs) and its state directory
// (after it stopped), checking stdout and exit codes.
func TestStateCLI(t *testing.T) {
	cluster := kafkatest.Start(t, kafkatest.RequireReal())
	in := cluster.CreateTopic(t, "cli-in", 2)
	out := cluster.CreateTopic(t, "cli-out", 2)
	appID := kafkatest.Name(t, "cli-app")
	dir := t.TempDir()
	app, err := kstate.New(kstate.Topology[string, string, heartbeat.Event]{
		Inputs:       kstate.Topics(serde.String(), in),
		KeySerde:     serde.String(),
		NewProcessor: heartbeat.NewMonitor(heartbeat.Timeout, heartbeat.Retention),
		TimeMode:     processor.ProcessingTime,
		Output: kstate.Output[string, heartbeat.Event]{
			Topic: out,
			Serde: serde.JSON[heartbeat.Event](),
		},
	}, kstate.Options{
		ApplicationID: appID,
		Kafka: kstate.KafkaOptions{
			Brokers: cluster.Brokers(),
		},
		State: kstate.StateOptions{
			Dir: dir,
		},
		Batching: kstate.BatchingOptions{
			TriggerInterval: time.Second,
			MaxWait:         50 * time.Millisecond,
		},
		Observability: kstate.ObservabilityOptions{
			Clock: func() time.Time { return hbStart },
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx) }()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		}
	}
	defer stop()
	cluster.Produce(t, in,
		kafkatest.Record{Key: []byte("s1"), Value: []byte("beat")},
		kafkatest.Record{Key: []byte("s2"), Value: []byte("beat")},
		kafkatest.Record{Key: []byte("s3"), Value: []byte("beat")})
	cluster.ReadCommitted(t, out, 3, time.Minute)

	brokers := strings.Join(cluster.Brokers(), ",")
	sources := [][]string{{"--brokers", brokers, "--app", appID}}
	check := func(src []string) {
		arg := func(a ...string) []string { return append(append([]string{"state"}, a...), src...) }

		so, se, code := cli(t, arg("metadata", "--json")...)
		if code != exitOK {
			t.Fatalf("metadata: code %d, stderr %s", code, se)
		}
		var md statereader.Metadata
		if err := json.Unmarshal([]byte(so), &md); err != nil {
			t.Fatalf("metadata JSON: %v\n%s", err, so)
		}
		if len(md.Variables) != 2 || md.Variables[0].Name != "lastSeen" || md.Variables[0].Schema != "int64" ||
			md.Variables[1].Name != "silent" || md.Variables[1].Schema != "bool" || len(md.Partitions) != 2 {
			t.Errorf("metadata: %s", so)
		}
		if !strings.Contains(so, `"ttlMs": 3600000`) {
			t.Errorf("metadata without the TTL: %s", so)
		}
		so, _, code = cli(t, arg("metadata")...)
		if code != exitOK || !strings.Contains(so, "lastSeen") || !strings.Contains(so, "ProcessingTime") {
			t.Errorf("metadata table (code %d):\n%s", code, so)
		}

		so, se, code = cli(t, arg("read", "--var", "lastSeen")...)
		if code != exitOK {
			t.Fatalf("read: code %d, stderr %s", code, se)
		}
		ents := lines[statereader.Entry](t, so)
		var keys []string
		for _, e := range ents {
			keys = append(keys, e.Key)
			if string(e.Value) != "1735732800000" || e.ExpiryMs == nil || *e.ExpiryMs != 1735736400000 {
				t.Errorf("entry %+v", e)
			}
		}
		slices.Sort(keys)
		if !slices.Equal(keys, []string{"s1", "s2", "s3"}) {
			t.Errorf("read keys %v", keys)
		}
		partitionReads = 0
		so, _, code = cli(t, arg("read", "--var", "lastSeen", "--key", "s2")...)
		if e := lines[statereader.Entry](t, so); code != exitOK || len(e) != 1 || e[0].Key != "s2" {
			t.Errorf("read --key s2: code %d\n%s", code, so)
		}
		if src[0] == "--brokers" && partitionReads != 1 {
			t.Errorf("read --key s2 read %d changelog partitions, want the key's only", partitionReads)
		}
		partitionReads = 0
		so, _, code = cli(t, arg("read", "--var", "lastSeen", "--partition", "1")...)
		for _, e := range lines[statereader.Entry](t, so) {
			if e.Partition != 1 {
				t.Errorf("read --partition 1: %+v", e)
			}
		}
		if code != exitOK || (src[0] == "--brokers" && partitionReads != 1) {
			t.Errorf("read --partition 1: code %d, %d changelog partitions read", code, partitionReads)
		}
		if _, se, code := cli(t, arg("read", "--var", "lastSeen", "--partition", "2")...); src[0] == "--brokers" && code != exitUsage {
			t.Errorf("read --partition 2 of 2: code %d, %s", code, se)
		}
		so, _, code = cli(t, arg("read", "--var", "lastSeen", "--key-base64", "czM=")...) // "s3"
		if e := lines[statereader.Entry](t, so); code != exitOK || len(e) != 1 || e[0].Key != "s3" {
			t.Errorf("read --key-base64 czM=: code %d\n%s", code, so)
		}
		if _, _, code = cli(t, arg("read", "--var", "lastSeen", "--key-base64", "!!")...); code != exitUsage {
			t.Errorf("read --key-base64 !!: code %d", code)
		}
		so, _, code = cli(t, arg("read", "--var", "lastSeen", "--limit", "2")...)
		if n := len(lines[statereader.Entry](t, so)); code != exitOK || n != 2 {
			t.Errorf("read --limit 2: code %d, %d lines", code, n)
		}
		if _, se, code = cli(t, arg("read", "--var", "lastSeen", "--key", "nobody")...); code != exitNotFound {
			t.Errorf("read --key nobody: code %d, stderr %s", code, se)
		}
		if _, se, code = cli(t, arg("read", "--var", "nope")...); code != exitNotFound || !strings.Contains(se, "variable not found") {
			t.Errorf("read --var nope: code %d, stderr %s", code, se)
		}
		if _, _, code = cli(t, arg("read")...); code != exitUsage {
			t.Errorf("read without --var: code %d", code)
		}

		so, se, code = cli(t, arg("timers", "--key", "s1")...)
		tms := lines[statereader.Timer](t, so)
		if code != exitOK || len(tms) != 1 || tms[0].Key != "s1" || tms[0].Expiry != "2025-01-01T12:00:10.000Z" {
			t.Errorf("timers --key s1: code %d, %s %s", code, so, se)
		}

		file := filepath.Join(t.TempDir(), "state.jsonl")
		if _, se, code = cli(t, arg("export", "--out", file)...); code != exitOK {
			t.Fatalf("export: code %d, %s", code, se)
		}
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var nEntries, nTimers int
		for _, e := range lines[statereader.Entry](t, string(b)) {
			if e.Kind == "timer" {
				nTimers++
				if e.Variable != "" || string(e.Value) != "1735732810000" {
					t.Errorf("export: timer line %+v", e)
				}
			} else {
				nEntries++
			}
		}
		if nEntries != 3 || nTimers != 3 {
			t.Errorf("export: %d entries and %d timers, want 3 and 3:\n%s", nEntries, nTimers, b)
		}
	}
	check(sources[0]) // the changelog, while the application runs
	stop()
	check(sources[0])
	check([]string{"--state-dir", dir, "--app", appID})

	if _, se, code := cli(t, "state", "metadata", "--app", "no-such-app-x", "--brokers", brokers); code != exitNotFound {
		t.Errorf("unknown app: code %d, stderr %s", code, se)
	}
	if _, _, code := cli(t, "state", "metadata", "--app", appID); code != exitUsage {
		t.Errorf("no source: code %d", code)
	}
	if _, _, code := cli(t, "state", "metadata", "--bogus"); code != exitUsage {
		t.Errorf("unknown flag: code %d", code)
	}
}

func TestMain(m *testing.M) { os.Exit(kafkatest.Main(m)) }
