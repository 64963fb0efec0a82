package integration

import (
	"bufio"
	"io"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kstate/kstate/internal/testprocs"
)

// child is a running integration/testapp process.
type child struct {
	cmd *exec.Cmd
	mu  sync.Mutex
	log []string // stderr lines
}

func buildTestApp(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "testapp")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/kstate/kstate/integration/testapp").CombinedOutput()
	if err != nil {
		t.Fatalf("build testapp: %v\n%s", err, out)
	}
	return bin
}

func startChild(t *testing.T, bin string, args ...string) *child {
	t.Helper()
	c := &child{cmd: exec.Command(bin, args...)}
	stderr, err := c.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			c.mu.Lock()
			c.log = append(c.log, sc.Text())
			c.mu.Unlock()
		}
		io.Copy(io.Discard, stderr)
	}()
	t.Cleanup(func() { c.kill() })
	return c
}

func (c *child) kill() {
	if c.cmd.ProcessState == nil {
		c.cmd.Process.Signal(syscall.SIGKILL)
		c.cmd.Wait()
	}
}

func (c *child) find(re *regexp.Regexp) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, l := range c.log {
		if m := re.FindStringSubmatch(l); m != nil {
			return m
		}
	}
	return nil
}

func (c *child) dump(t *testing.T) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, l := range c.log {
		t.Log("child: " + l)
	}
}

// firstCommitRe matches the engine's slog record (text handler) of the first commit.
var firstCommitRe = regexp.MustCompile(`msg="first batch committed" .*since_start=(\S+)`)

// A SIGKILLed instance restarted with the same instance id fences its
// predecessor's open transaction at once (stable transactional id, static
// membership): the time from restart to its first committed batch is
// measured and logged, and the outputs stay exact.
func TestEngineRestartAfterKill(t *testing.T) {
	// Not parallel (main_test.go): each restart must commit within 5 s.
	e := newSpecEnv(t, 3)
	bin := buildTestApp(t)
	dir := t.TempDir()
	args := []string{"-brokers", strings.Join(e.brokers, ","), "-app", e.app, "-instance", "i1",
		"-state", dir, "-in", e.in, "-out", e.out, "-proc", "counter", "-max-batch", "7"}

	c := startChild(t, bin, args...)
	const keys = 5
	in := &testprocs.KeyCycler{T: t, Brokers: e.brokers, Topic: e.in, Keys: keys}
	produce := in.Produce
	produce(50)
	testprocs.WaitOutputs(t, e.brokers, e.out, in.Sent, waitOut)

	var restarts []time.Duration
	for round := range 3 {
		produce(200)
		time.Sleep(time.Duration(20+round*30) * time.Millisecond) // kill while batches are in flight
		c.kill()
		start := time.Now()
		c = startChild(t, bin, args...)
		got := testprocs.WaitOutputs(t, e.brokers, e.out, in.Sent, waitOut)
		e2e := time.Since(start)
		var fc time.Duration
		testprocs.Eventually(t, waitOut, "first commit log line", func() bool {
			m := c.find(firstCommitRe)
			if m == nil {
				return false
			}
			fc, _ = time.ParseDuration(m[1])
			return true
		})
		restarts = append(restarts, fc)
		if fc > 5*time.Second {
			// Half the transaction timeout: the restart did not fence its
			// predecessor but waited for the broker to abort its transaction.
			c.dump(t)
			t.Fatalf("restart took %v to its first committed batch", fc)
		}
		t.Logf("round %d: restart → first committed batch %v (child's own measure); restart → all %d outputs visible %v", round, fc, in.Sent, e2e.Round(time.Millisecond))
		checkCounts(t, got, in.Sent, keys)
	}
	c.cmd.Process.Signal(syscall.SIGTERM)
	if err := c.cmd.Wait(); err != nil {
		c.dump(t)
		t.Fatalf("graceful stop: %v", err)
	}
	t.Logf("restart to first committed batch after SIGKILL: %v", restarts)
}

// checkCounts asserts the counter's outputs are exactly 1..n per key.
func checkCounts(t *testing.T, got testprocs.Outputs, sent, keys int) {
	t.Helper()
	if got.Count() != sent {
		t.Fatalf("%d outputs for %d inputs: %v", got.Count(), sent, got)
	}
	for k, vs := range got {
		for i, v := range vs {
			if v != strconv.Itoa(i+1) {
				t.Fatalf("key %s: outputs %v are not 1..%d", k, vs, len(vs))
			}
		}
	}
	if len(got) != keys {
		t.Fatalf("%d keys, want %d", len(got), keys)
	}
}
