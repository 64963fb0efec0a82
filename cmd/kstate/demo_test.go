package main

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// demoWant are the demo's output lines that must appear, in this order;
// a line starting with "re:" is a regular expression (for addresses,
// directories, record counts and times).
var demoWant = []string{
	"kstate demo: stateful stream processing on Kafka, exactly once",
	`re:^      Kafka     embedded in-process Kafka \(kfake\) at 127\.0\.0\.1:\d+$`,
	"1. Counter: a ValueState per key                   (application demo-counter)",
	"  ok  input     a a a b b              → a=3 b=2",
	"2. Initial state, applied on the first run only     (application demo-initial)",
	"      initial   x=10",
	"  ok  input     x x                    → x=12",
	"3. Heartbeat monitor: processing-time timers       (application demo-heartbeat)",
	"  ok  12:00:00  heartbeat s1 s2 s3     → s1 ONLINE",
	"                                         s2 ONLINE",
	"                                         s3 ONLINE",
	"  ok  12:00:06  heartbeat s1 s2        → -",
	"  ok  12:00:10  (time passes)          → s3 SILENT (last heartbeat 12:00:00)",
	"4. Restart: stop the monitor, delete its local state, start it again",
	"  ok  stop      cancel Run's context   → Run returned nil",
	"      delete    demo-heartbeat/        → its local shards are gone",
	`re:^  ok  restore   from the changelog     → [1-9]\d* records into 3 shards in [\d.]+(ms|s)$`,
	`re:^      ready                            → [\d.]+(ms|s) after start \(group join, restore, Init\)$`,
	"  ok  12:00:13  heartbeat s3           → s3 BACK after 13s of silence",
	"  ok  12:00:16  (time passes)          → s1 SILENT (last heartbeat 12:00:06)",
	"                                         s2 SILENT (last heartbeat 12:00:06)",
	`re:^all 9 checks passed in [\d.]+(ms|s)$`,
	"      examples/             one program per feature: go run ./examples/heartbeat",
}

// checkDemoOutput checks that the want lines appear in out in order, and
// that no line says FAIL.
func checkDemoOutput(t *testing.T, out string, want []string) {
	t.Helper()
	lines := strings.Split(out, "\n")
	i := 0
	for _, w := range want {
		match := func(l string) bool { return l == w }
		if re, ok := strings.CutPrefix(w, "re:"); ok {
			match = regexp.MustCompile(re).MatchString
		}
		for i < len(lines) && !match(lines[i]) {
			i++
		}
		if i == len(lines) {
			t.Fatalf("demo output lacks (after the lines matched before it)\n%s\n--- output:\n%s", w, out)
		}
	}
	if strings.Contains(out, "FAIL") {
		t.Fatalf("demo output has a FAIL line:\n%s", out)
	}
}

// The demo through the cobra command, as `kstate demo` runs it.
func TestDemoCommand(t *testing.T) {
	start := time.Now()
	var out, errOut bytes.Buffer
	root := newRootCmd()
	root.SetArgs([]string{"demo"})
	root.SetOut(&out)
	root.SetErr(&errOut)
	if err := root.ExecuteContext(context.Background()); err != nil {
		t.Fatalf("kstate demo: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), errOut.String())
	}
	checkDemoOutput(t, out.String(), demoWant)
	if errOut.Len() > 0 {
		t.Errorf("stderr without --verbose:\n%s", errOut.String())
	}
	if d := time.Since(start); d > time.Minute {
		t.Errorf("the demo took %v; it should take seconds", d)
	}
}

// The demo fails, saying what differed, when an expected value is not
// what the engine produced.
func TestDemoFailsWhenAValueDiffers(t *testing.T) {
	story := defaultDemoStory()
	story.counterWant = "a=3 b=3"
	story.beats[2].want = "s3 SILENT (last heartbeat 11:59:59)"
	var out bytes.Buffer
	err := runDemo(context.Background(), &out, demoOptions{story: story})
	if err == nil {
		t.Fatalf("runDemo succeeded with wrong expectations:\n%s", out.String())
	}
	for _, want := range []string{
		`input a a a b b: got "a=3 b=2", want "a=3 b=3"`,
		`12:00:10 (time passes): got "s3 SILENT (last heartbeat 12:00:00)", want "s3 SILENT (last heartbeat 11:59:59)"`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	for _, want := range []string{
		"FAIL  input     a a a b b              → a=3 b=2",
		"                wanted                 → a=3 b=3",
		"FAIL  12:00:10  (time passes)          → s3 SILENT (last heartbeat 12:00:00)",
		"2 of 9 checks failed",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// The built binary: `kstate demo` exits 0 and prints the story, as `make
// demo` shows it.
func TestDemoBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the kstate binary")
	}
	bin := filepath.Join(t.TempDir(), "kstate")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(bin, "demo")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("kstate demo: %v (exit status %d)\nstdout:\n%s\nstderr:\n%s", err, cmd.ProcessState.ExitCode(), stdout.String(), stderr.String())
	}
	checkDemoOutput(t, stdout.String(), demoWant)
}

// Every command has --help; version prints a version.
func TestCLIHelpAndVersion(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"demo", "--help"}, {"version", "--help"}, {"help", "demo"}} {
		var out bytes.Buffer
		root := newRootCmd()
		root.SetArgs(args)
		root.SetOut(&out)
		if err := root.Execute(); err != nil {
			t.Fatalf("kstate %v: %v", args, err)
		}
		if !strings.Contains(out.String(), "Usage:") {
			t.Errorf("kstate %v prints no usage:\n%s", args, out.String())
		}
	}
	var out bytes.Buffer
	root := newRootCmd()
	root.SetArgs([]string{"version"})
	root.SetOut(&out)
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "kstate ") {
		t.Errorf("kstate version printed %q", out.String())
	}
	// An unknown command is an error, not a silent success.
	root = newRootCmd()
	root.SetArgs([]string{"no-such-command"})
	root.SetOut(&out)
	root.SetErr(&out)
	if err := root.Execute(); err == nil {
		t.Error("kstate no-such-command succeeded")
	}
}
