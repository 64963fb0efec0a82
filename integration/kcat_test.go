package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/internal/testlog"
	"github.com/kstate/kstate/internal/testprocs"
)

// TestKcatInterop checks the broker and our client against a client nobody
// here wrote: kcat (librdkafka) produces what Go reads, and reads back only
// the committed part of what Go produced transactionally.
func TestKcatInterop(t *testing.T) {
	t.Parallel()
	brokers := realKafka(t).Brokers()
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		t.Fatalf("kcat not installed (make deps installs it): %v", err)
	}
	adm := newAdmin(t, brokers)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// kcat -> Go
	in := uniqueName(t, "from-kcat")
	createTopic(t, adm, in, 1, nil)
	cmd := exec.CommandContext(ctx, kcat, "-b", strings.Join(brokers, ","), "-P", "-t", in, "-K", ":")
	cmd.Stdin = strings.NewReader("k1:hello\nk2:from\nk3:kcat\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kcat produce: %v\n%s", err, out)
	}
	got := consumeAll(t, brokers, in, kgo.ReadCommitted(), 3, 15*time.Second)
	if want := []string{"hello", "from", "kcat"}; !slices.Equal(got, want) {
		t.Fatalf("Go read %v from kcat, want %v", got, want)
	}

	// Go (transactional) -> kcat (read_committed by default)
	out := uniqueName(t, "to-kcat")
	createTopic(t, adm, out, 1, nil)
	produceTxn(t, brokers, out+"-tx", out, true, "one", "two")
	produceTxn(t, brokers, out+"-tx", out, false, "aborted")
	produceTxn(t, brokers, out+"-tx", out, true, "three")
	read := exec.CommandContext(ctx, kcat, "-b", strings.Join(brokers, ","), "-C", "-t", out,
		"-o", "beginning", "-e", "-q", "-f", "%k=%s\n")
	var stdout, stderr bytes.Buffer
	read.Stdout, read.Stderr = &stdout, &stderr
	if err := read.Run(); err != nil {
		t.Fatalf("kcat consume: %v\n%s", err, stderr.String())
	}
	lines := strings.Fields(stdout.String())
	if want := []string{"k=one", "k=two", "k=three"}; !slices.Equal(lines, want) {
		t.Fatalf("kcat read %v, want %v (read_committed must hide the aborted record)", lines, want)
	}
	t.Logf("kcat interop ok: kcat->go %v, go->kcat %v", got, lines)
}

// TestKcatKeysAndLiveQuery: kcat's default partitioner (librdkafka's
// consistent_random, crc32) puts keys on other partitions than Kafka's
// murmur2. kstate processes them where they land (KeyPartitionAllow),
// counts them, warns naming the key and the producer fix, and a live query
// answers with the state where it is rather than an empty 200. With the
// README's -X topic.partitioner=murmur2_random every key lands on its
// murmur2 partition: no mismatch.
func TestKcatKeysAndLiveQuery(t *testing.T) {
	t.Parallel()
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		t.Fatalf("kcat not installed (make deps installs it): %v", err)
	}
	e := newSpecEnv(t, 4)
	cfg := e.config(t, testprocs.NewCounter)
	var logs testlog.Buffer
	cfg.Observability.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	app, err := kstate.New(cfg.Topology, cfg.Options)
	if err != nil {
		t.Fatal(err)
	}
	stop := testprocs.Start(t, app)
	ctx, cancel := context.WithTimeout(context.Background(), 2*waitOut)
	defer cancel()
	produce := func(extra []string, keys []string) {
		t.Helper()
		var in strings.Builder
		for _, k := range keys {
			fmt.Fprintf(&in, "%s:x\n", k)
		}
		args := append([]string{"-b", strings.Join(e.brokers, ","), "-P", "-t", e.in, "-K", ":"}, extra...)
		cmd := exec.CommandContext(ctx, kcat, args...)
		cmd.Stdin = strings.NewReader(in.String())
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("kcat produce: %v\n%s", err, out)
		}
	}
	var crcKeys, mmKeys []string
	for i := range 20 {
		crcKeys = append(crcKeys, fmt.Sprintf("crc-%d", i))
		mmKeys = append(mmKeys, fmt.Sprintf("mm-%d", i))
	}
	produce(nil, crcKeys)
	testprocs.WaitOutputs(t, e.brokers, e.out, len(crcKeys), waitOut)
	mismatches := app.Metrics().Total.KeyPartitionMismatches
	if mismatches == 0 {
		t.Fatal("no key-partition mismatch counted for 20 keys produced by kcat's default partitioner")
	}
	for _, k := range crcKeys {
		var res kstate.QueryResult
		testprocs.Eventually(t, waitOut, "count of "+k, func() bool {
			res, err = app.Query(ctx, "count", k)
			// Not yet: the outputs are visible before the committed store
			// has the batch (ErrUnknownVariable on a partition's first
			// batch), and a partition can still move to the other
			// pipeline in the first seconds (the test broker has no
			// initial rebalance delay) and restore there (ErrNotOwner,
			// "key not owned", seen under make test's load).
			if errors.Is(err, kstate.ErrNotOwner) || errors.Is(err, kstate.ErrUnknownVariable) {
				return false
			}
			if err != nil {
				t.Fatalf("Query(count, %q): %v", k, err)
			}
			return len(res.Entries) == 1 && string(res.Entries[0].Value) == "1"
		})
	}
	if l := logs.String(); !strings.Contains(l, "-X topic.partitioner=murmur2_random") || !strings.Contains(l, `input record key \"crc-`) {
		t.Fatalf("no mismatch warning naming a key and the producer setting:\n%s", l)
	}

	produce([]string{"-X", "topic.partitioner=murmur2_random"}, mmKeys)
	testprocs.WaitOutputs(t, e.brokers, e.out, len(crcKeys)+len(mmKeys), waitOut)
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if m := app.Metrics().Total.KeyPartitionMismatches; m != mismatches {
		t.Fatalf("keys produced with murmur2_random counted %d more mismatches", m-mismatches)
	}
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "level=INFO") && strings.Contains(line, "COORDINATOR_NOT_AVAILABLE") {
			t.Errorf("an expected start-up retry logged at Info as an error: %s", line)
		}
	}
	t.Logf("kcat's default partitioner: %d of %d keys on another partition than murmur2's, all queried where they are; murmur2_random: none", mismatches, len(crcKeys))
}
