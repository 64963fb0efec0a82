package integration

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/internal/engine"
	"github.com/kstate/kstate/internal/testprocs"
)

// Skipping a poison record by hand (kstate.SkipRecord): a DecodeError at
// offset k > 0 of one partition, with the records before it in that
// partition not committed yet (they were in the failed batch). The skip
// must drop that record only: every other record is counted exactly once,
// through a restart, and on an empty state directory (the changelog
// agrees). Moving the committed offset past the record (SetInputOffsets
// offset+1, the documented way before SkipRecord) lost the uncommitted
// records before it.

// keysOf returns n keys "k0".. whose murmur2 partition among parts is p.
func keysOf(p int32, parts, n int) []string {
	var out []string
	for i := 0; len(out) < n; i++ {
		k := fmt.Sprintf("k%d", i)
		if engine.PartitionFor([]byte(k), parts) == p {
			out = append(out, k)
		}
	}
	return out
}

// skipCase runs the user's case up to the DecodeError: keys k0..k(keys-1)
// on 3 partitions, one round committed, then (application stopped) a
// round, a poison record of a key of partition 2, and another round. It
// returns the config, the DecodeError and the poison record's key.
func skipCase(t *testing.T, e specEnv, keys int) (testApp[string, string, string], *kstate.DecodeError, string) {
	t.Helper()
	cfg := e.config(t, testprocs.NewCounter)
	cfg.Inputs[0].ValueSerde = poisonSerde{} // fails on the value "poison"
	cfg.Kafka.LeaveGroupOnShutdown = true
	stop := testprocs.Start(t, newSpecApp(t, cfg))
	round(t, e, keys)
	testprocs.WaitOutputs(t, e.brokers, e.out, keys, waitOut)
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	before := committed(t, e, e.app)

	poisonKey := keysOf(2, 3, 1)[0]
	kvs := make([]string, 0, 2*keys+1)
	for i := range keys {
		kvs = append(kvs, fmt.Sprintf("k%d=x", i))
	}
	kvs = append(kvs, poisonKey+"=poison")
	for i := range keys {
		kvs = append(kvs, fmt.Sprintf("k%d=x", i))
	}
	testprocs.Produce(t, e.brokers, e.in, kvs...)

	_, done := testprocs.StartWatch(t, newSpecApp(t, cfg))
	var de *kstate.DecodeError
	select {
	case err := <-done:
		if !errors.As(err, &de) || de.Partition != 2 || de.Topic != e.in {
			t.Fatalf("Run returned %v; want a DecodeError of topic %s partition 2", err, e.in)
		}
		t.Logf("Run: %v", err)
	case <-time.After(waitOut):
		t.Fatal("Run did not stop on the poison record")
	}
	after := committed(t, e, e.app)
	if after[2] != before[2] || de.Offset <= after[2] {
		t.Fatalf("partition 2: committed %d before, %d after the failure, poison at %d: want records before the poison uncommitted", before[2], after[2], de.Offset)
	}
	t.Logf("partition 2: committed offset %d, poison record at %d: %d records before it not processed yet", after[2], de.Offset, de.Offset-after[2])
	return cfg, de, poisonKey
}

// TestSkipRecordKeepsRecordsBefore: after kstate.SkipRecord the restart
// counts every record but the poison one exactly once, the skip is
// consumed (a restart on an empty state directory continues the counts),
// and Counters.Skipped counts it.
func TestSkipRecordKeepsRecordsBefore(t *testing.T) {
	t.Parallel()
	const keys = 20
	e := newSpecEnv(t, 3)
	cfg, de, _ := skipCase(t, e, keys)

	ctx, cancel := context.WithTimeout(context.Background(), waitOut)
	defer cancel()
	// Refusals first: an offset already processed, one past the end.
	if err := kstate.SkipRecord(ctx, cfg.Topology, cfg.Options, de.Topic, de.Partition, 0); err == nil || !strings.Contains(err.Error(), "processed already") {
		t.Fatalf("SkipRecord of a committed offset: %v, want a refusal", err)
	}
	if err := kstate.SkipRecord(ctx, cfg.Topology, cfg.Options, de.Topic, de.Partition, 1<<40); err == nil || !strings.Contains(err.Error(), "no record at offset") {
		t.Fatalf("SkipRecord past the end: %v, want a refusal", err)
	}
	if err := kstate.SkipRecord(ctx, cfg.Topology, cfg.Options, de.Topic, de.Partition, de.Offset); err != nil {
		t.Fatal(err)
	}
	app := newSpecApp(t, cfg)
	stop := testprocs.Start(t, app)
	wantCounts(t, testprocs.WaitOutputs(t, e.brokers, e.out, 3*keys, waitOut), keys, 3)
	if m := app.Metrics(); m.Total.Skipped != 1 || m.Total.DecodeErrors != 0 {
		t.Fatalf("Metrics: Skipped %d, DecodeErrors %d; want 1 and 0", m.Total.Skipped, m.Total.DecodeErrors)
	}
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	// On an empty state directory: the changelog has the counts and the
	// consumed skip; one more round continues every count.
	restartOnEmptyDir(t, e, cfg, keys, 4)
}

// TestSkipRecordCLI: `kstate skip` does the same from the command line,
// and refuses while the application runs (exit code 4).
func TestSkipRecordCLI(t *testing.T) {
	longTest(t)
	const keys = 9
	e := newSpecEnv(t, 3)
	cfg, de, _ := skipCase(t, e, keys)
	bin := buildKstate(t)
	args := []string{"skip", "--brokers", strings.Join(e.brokers, ","), "--app", e.app, "--topic", de.Topic,
		"--partition", strconv.Itoa(int(de.Partition)), "--offset", strconv.FormatInt(de.Offset, 10)}
	// A Run that failed does not leave the group (with several pipelines
	// the failed one's siblings stay too): its static members stay until
	// SessionTimeout, and kstate skip refuses (exit 4) until they are gone.
	var out []byte
	testprocs.Eventually(t, waitOut, "kstate skip accepted once the failed run's members left", func() bool {
		var err error
		out, err = exec.Command(bin, args...).CombinedOutput()
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.ExitCode() == 4 && strings.Contains(string(out), "member") {
			time.Sleep(500 * time.Millisecond)
			return false
		}
		if err != nil {
			t.Fatalf("kstate skip: %v\n%s", err, out)
		}
		return true
	})
	t.Logf("kstate skip: %s", out)
	stop := testprocs.Start(t, newSpecApp(t, cfg))
	wantCounts(t, testprocs.WaitOutputs(t, e.brokers, e.out, 3*keys, waitOut), keys, 3)
	// Running: refused.
	out, err := exec.Command(bin, args...).CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 4 || !strings.Contains(string(out), "member") {
		t.Fatalf("kstate skip on a running application: %v\n%s; want exit code 4 naming the members", err, out)
	}
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

func buildKstate(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "kstate")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/kstate/kstate/cmd/kstate").CombinedOutput()
	if err != nil {
		t.Fatalf("build kstate: %v\n%s", err, out)
	}
	return bin
}
