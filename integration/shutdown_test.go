package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/internal/testlog"
	"github.com/kstate/kstate/internal/testprocs"
)

// Graceful shutdown the way deployments stop an application: what is left
// of the instance in its consumer group afterwards, with and without
// LeaveGroupOnShutdown, and the examples' handling of SIGTERM.

// groupMembers describes the group and returns its members' instance ids.
func groupMembers(t *testing.T, adm *kadm.Client, group string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	groups, err := adm.DescribeGroups(ctx, group)
	if err != nil {
		t.Fatal(err)
	}
	g, ok := groups[group]
	if !ok || g.Err != nil {
		t.Fatalf("describe group %q: %v (%v)", group, g.Err, groups)
	}
	var ids []string
	for _, m := range g.Members {
		id := "<dynamic " + m.MemberID + ">"
		if m.InstanceID != nil {
			id = *m.InstanceID
		}
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// staticMembers returns the static member ids of app's pipelines that own
// partitions (InstanceID "i1"; "i1-p1", … with several pipelines, as the
// automatic Options.Batching.Pipelines runs on two cores or more), sorted.
func staticMembers(app *kstate.App[string, string, string]) []string {
	var ids []string
	for _, p := range app.Status().Partitions {
		id := "i1"
		if p.Pipeline > 0 {
			id = fmt.Sprintf("i1-p%d", p.Pipeline)
		}
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

func deleteGroup(t *testing.T, adm *kadm.Client, group string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resps, err := adm.DeleteGroups(ctx, group)
	if err != nil {
		return err
	}
	return resps[group].Err
}

// With LeaveGroupOnShutdown a graceful stop leaves the group: it is empty
// at once and can be deleted (what kafka-consumer-groups --delete does),
// well within a SessionTimeout of 30s.
func TestShutdownLeavesGroup(t *testing.T) {
	// Not parallel (main_test.go): stop, describe and delete must take < 5 s.
	e := newSpecEnv(t, 2)
	adm := newAdmin(t, e.brokers)
	cfg := e.config(t, testprocs.NewCounter)
	cfg.Kafka.SessionTimeout = 30 * time.Second
	cfg.Kafka.LeaveGroupOnShutdown = true
	cfg.Batching.Pipelines = 2 // every pipeline leaves, under its own instance id
	app := newSpecApp(t, cfg)
	stop := testprocs.Start(t, app)
	testprocs.Produce(t, e.brokers, e.in, "a=x", "b=x", "a=y")
	wantOutputs(t, testprocs.WaitOutputs(t, e.brokers, e.out, 3, waitOut), "a=[1 2] b=[1]")
	// Every pipeline leaves (the second may get its partition after the
	// outputs came).
	var m []string
	testprocs.Eventually(t, waitOut, "one member per pipeline, i1 first", func() bool {
		m = groupMembers(t, adm, e.app)
		return len(m) > 0 && m[0] == "i1" && slices.Equal(m, staticMembers(app))
	})
	t.Logf("members while running: %v", m)

	stopped := time.Now()
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if m := groupMembers(t, adm, e.app); len(m) != 0 {
		t.Fatalf("members after a graceful stop with LeaveGroupOnShutdown: %v, want none", m)
	}
	if err := deleteGroup(t, adm, e.app); err != nil {
		t.Fatalf("delete group after the stop: %v", err)
	}
	if d := time.Since(stopped); d > 5*time.Second {
		t.Fatalf("stop, describe and delete took %v; the leave should make them immediate (SessionTimeout 30s)", d)
	}
}

// Without it (the default) the static member stays in the group after a
// graceful stop, so the group cannot be deleted; and a restart with the
// same InstanceID within SessionTimeout takes its place without waiting
// for the session to expire, and continues exactly.
func TestShutdownStaysStatic(t *testing.T) {
	// Not parallel (main_test.go): timed against SessionTimeout.
	e := newSpecEnv(t, 2)
	adm := newAdmin(t, e.brokers)
	cfg := e.config(t, testprocs.NewCounter)
	cfg.Kafka.SessionTimeout = 30 * time.Second
	first := newSpecApp(t, cfg)
	stop := testprocs.Start(t, first)
	testprocs.Produce(t, e.brokers, e.in, "a=x", "b=x", "a=y")
	wantOutputs(t, testprocs.WaitOutputs(t, e.brokers, e.out, 3, waitOut), "a=[1 2] b=[1]")
	// One static member per pipeline (the default; with several, the
	// second may get its partition after the outputs came).
	var want []string
	testprocs.Eventually(t, waitOut, "one member per pipeline, i1 first", func() bool {
		want = groupMembers(t, adm, e.app)
		return len(want) > 0 && want[0] == "i1" && slices.Equal(want, staticMembers(first))
	})
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	stopped := time.Now()
	if m := groupMembers(t, adm, e.app); !slices.Equal(m, want) || m[0] != "i1" {
		t.Fatalf("members after a graceful stop: %v, want the static members %v", m, want)
	}
	if err := deleteGroup(t, adm, e.app); !errors.Is(err, kerr.NonEmptyGroup) {
		t.Fatalf("delete group with a static member in it: %v, want NON_EMPTY_GROUP", err)
	}

	// Restart within SessionTimeout (the same state directory: a restarted
	// pod with its volume).
	app := newSpecApp(t, cfg)
	stop = testprocs.Start(t, app)
	testprocs.Produce(t, e.brokers, e.in, "a=z", "b=z", "c=z")
	wantOutputs(t, testprocs.WaitOutputs(t, e.brokers, e.out, 6, waitOut), "a=[1 2 3] b=[1 2] c=[1]")
	if d := time.Since(stopped); d >= cfg.Kafka.SessionTimeout {
		t.Fatalf("the restart processed after %v, not within SessionTimeout %v", d, cfg.Kafka.SessionTimeout)
	}
	if m := groupMembers(t, adm, e.app); !slices.Equal(m, want) {
		t.Fatalf("members after the restart: %v, want %v", m, want)
	}
	if err := stop(); err != nil {
		t.Fatalf("Run after the restart: %v", err)
	}
	if m := app.Metrics().Total; m.RowsIn != 3 || m.RowsOut != 3 {
		t.Fatalf("the restart processed %d rows, emitted %d; want 3 and 3 (nothing redone)", m.RowsIn, m.RowsOut)
	}
}

// The README's counter, built as a binary, stops gracefully on SIGTERM
// (what Kubernetes and systemd send): Run returns nil (the engine logs
// "stopped") and the process exits with status 0. The binary is
// examples/readme/main.go as the README shows it, built with a -overlay
// that only replaces its broker address, application id and topic names
// (so that it runs on the test broker with names of its own); its default
// StateDir is under TMPDIR, a temporary directory here.
func TestExampleStopsOnSIGTERM(t *testing.T) {
	t.Parallel()
	brokers := realKafka(t).Brokers()
	dir := t.TempDir()
	src, err := filepath.Abs("../examples/readme/main.go")
	if err != nil {
		t.Fatal(err)
	}
	main, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	id := uniqueName(t, "wordcount")
	patched := string(main)
	for old, repl := range map[string]string{
		`"localhost:9092"`: `"` + strings.Join(brokers, `", "`) + `"`,
		`"wordcount"`:      `"` + id + `"`,
		`"words"`:          `"` + id + `-words"`,
		`"counts"`:         `"` + id + `-counts"`,
	} {
		if n := strings.Count(patched, old); n != 1 {
			t.Fatalf("examples/readme/main.go has %s %d times, want once (update this test)", old, n)
		}
		patched = strings.Replace(patched, old, repl, 1)
	}
	newTopic(t, brokers, id+"-words", 2)
	newTopic(t, brokers, id+"-counts", 2)
	patchedPath := filepath.Join(dir, "main.go")
	if err := os.WriteFile(patchedPath, []byte(patched), 0o644); err != nil {
		t.Fatal(err)
	}
	overlay, _ := json.Marshal(map[string]map[string]string{"Replace": {src: patchedPath}})
	overlayPath := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(overlayPath, overlay, 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "readme")
	build := exec.Command("go", "build", "-overlay", overlayPath, "-o", bin, "../examples/readme")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}

	var stderr testlog.Buffer
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "TMPDIR="+t.TempDir())
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{}) // closed when waitErr is set
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		select {
		case <-exited:
		default:
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	// Running and committing: its outputs arrive. (The counter emits once
	// per key and batch, so the second a goes in after the first counted.)
	testprocs.Produce(t, brokers, id+"-words", "a=x")
	testprocs.WaitOutputs(t, brokers, id+"-counts", 1, waitOut)
	testprocs.Produce(t, brokers, id+"-words", "a=x", "b=x")
	wantOutputs(t, testprocs.WaitOutputs(t, brokers, id+"-counts", 3, waitOut), "a=[1 2] b=[1]")

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
		if waitErr != nil {
			t.Fatalf("after SIGTERM: %v (want exit status 0); output:\n%s", waitErr, stderr.String())
		}
	case <-time.After(time.Minute):
		t.Fatalf("still running a minute after SIGTERM; output:\n%s", stderr.String())
	}
	if out := stderr.String(); !strings.Contains(out, "INFO stopped") {
		t.Fatalf("no %q log line (Run returning after a graceful shutdown); output:\n%s", "INFO stopped", out)
	}
}
