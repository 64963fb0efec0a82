package integration

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kstate/kstate/integration/testapp/cli"
)

// Child processes of the exactly-once tests. The test binary re-executes
// itself as integration/testapp (cli.Main) when eosChildEnv is set: no
// separate build, and the child has the test binary's build flags, so
// `go test -race` runs the children with the race detector too.

const eosChildEnv = "KSTATE_EOS_CHILD"

func init() {
	if os.Getenv(eosChildEnv) == "1" {
		os.Exit(cli.Main(os.Args[1:]))
	}
}

// eosChild is one running (or finished) application instance.
type eosChild struct {
	name string
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited and been reaped

	mu struct {
		sync.Mutex
		stderr []string
		stdout []string
	}
	state *os.ProcessState // set before done is closed
}

// eosChildArgs are the testapp flags of one instance.
type eosChildArgs struct {
	brokers        []string
	app, instance  string
	stateDir       string
	in, out        string
	in2            string // -in2: a second input topic (rows as JSON); "": none
	maxBatch       int
	sessionTimeout time.Duration
	txnTimeout     time.Duration // -txn-timeout: Kafka.TransactionTimeout; 0: default
	killPoint      string        // cli.KillPointEnv value; "" for none
	deadLetter     bool          // -dead-letter: poison values and fail rows are dead-lettered
	pad            int           // bytes of the eos processor's pad variable per key; 0: none
	proc           string        // -proc; "" for eos
	toEnd          bool          // -to-end: App.RunToEnd, the child exits 0 at the end
	sinkDB         string        // -sink-db: rows to a SQLite foreachBatch sink; "": none
	pipelines      int           // -pipelines: Options.Batching.Pipelines; 0: default
	slow           time.Duration // -slow: eos sleeps this long for about one row in seven; 0: never
	packed         bool          // -packed: eos declares its list and map with state.Packed
	noCache        bool          // -no-cache: no committed-state cache (batches are read ahead)
	writeBehind    int64         // -write-behind: Options.State.WriteBehindBytes; 0: default
	standbys       int           // -standbys: Options.Group.Standbys; 0: none
	probing        time.Duration // -probing-interval: Options.Group.ProbingInterval; 0: default
	acceptableLag  int64         // -acceptable-lag: Options.Group.AcceptableLag; 0: default
	leaveGroup     bool          // -leave-group: Options.Kafka.LeaveGroupOnShutdown
}

// startEOSChild starts an instance of the eos application. The child dies
// with the test process (Pdeathsig) and is killed when the test ends.
func startEOSChild(t *testing.T, a eosChildArgs) *eosChild {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	proc := a.proc
	if proc == "" {
		proc = "eos"
	}
	args := []string{"-brokers", strings.Join(a.brokers, ","), "-app", a.app, "-instance", a.instance,
		"-state", a.stateDir, "-in", a.in, "-out", a.out, "-proc", proc, "-metrics", "100ms"}
	if a.toEnd {
		args = append(args, "-to-end")
	}
	if a.sinkDB != "" {
		args = append(args, "-sink-db", a.sinkDB)
	}
	if a.maxBatch > 0 {
		args = append(args, "-max-batch", strconv.Itoa(a.maxBatch))
	}
	if a.sessionTimeout > 0 {
		args = append(args, "-session-timeout", a.sessionTimeout.String())
	}
	if a.txnTimeout > 0 {
		args = append(args, "-txn-timeout", a.txnTimeout.String())
	}
	if a.deadLetter {
		args = append(args, "-dead-letter")
	}
	if a.in2 != "" {
		args = append(args, "-in2", a.in2)
	}
	if a.pad > 0 {
		args = append(args, "-pad", strconv.Itoa(a.pad))
	}
	if a.pipelines > 0 {
		args = append(args, "-pipelines", strconv.Itoa(a.pipelines))
	}
	if a.slow > 0 {
		args = append(args, "-slow", a.slow.String())
	}
	if a.packed {
		args = append(args, "-packed")
	}
	if a.noCache {
		args = append(args, "-no-cache")
	}
	if a.writeBehind != 0 {
		args = append(args, "-write-behind", strconv.FormatInt(a.writeBehind, 10))
	}
	if a.standbys > 0 {
		args = append(args, "-standbys", strconv.Itoa(a.standbys))
	}
	if a.probing > 0 {
		args = append(args, "-probing-interval", a.probing.String())
	}
	if a.acceptableLag > 0 {
		args = append(args, "-acceptable-lag", strconv.FormatInt(a.acceptableLag, 10))
	}
	if a.leaveGroup {
		args = append(args, "-leave-group")
	}
	c := &eosChild{name: a.instance, cmd: exec.Command(exe, args...), done: make(chan struct{})}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, cli.KillPointEnv+"=") && !strings.HasPrefix(kv, eosChildEnv+"=") {
			env = append(env, kv)
		}
	}
	env = append(env, eosChildEnv+"=1")
	if a.killPoint != "" {
		env = append(env, cli.KillPointEnv+"="+a.killPoint)
	}
	c.cmd.Env = env
	// The child must not outlive the test binary, even if it crashes.
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr, err := c.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var readers sync.WaitGroup
	readers.Go(func() { c.collect(stderr, &c.mu.stderr) })
	readers.Go(func() { c.collect(stdout, &c.mu.stdout) })
	go func() {
		readers.Wait() // Wait closes the pipes: read them to the end first
		c.cmd.Wait()
		c.state = c.cmd.ProcessState
		close(c.done)
	}()
	t.Cleanup(c.kill)
	return c
}

func (c *eosChild) collect(r io.Reader, into *[]string) {
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		c.mu.Lock()
		*into = append(*into, sc.Text())
		c.mu.Unlock()
	}
	io.Copy(io.Discard, r)
}

// kill SIGKILLs the child (if it still runs) and waits for it.
func (c *eosChild) kill() {
	select {
	case <-c.done:
		return
	default:
	}
	c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.done
}

// wait waits up to d for the child to exit by itself; false if it still runs.
func (c *eosChild) wait(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-c.done:
		return true
	case <-t.C:
		return false
	}
}

// exited reports whether the child has exited.
func (c *eosChild) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// killedBySIGKILL reports whether the (exited) child died of SIGKILL.
func (c *eosChild) killedBySIGKILL() bool {
	ws, ok := c.state.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// stop stops the child gracefully (SIGTERM) and requires exit status 0
// within d.
func (c *eosChild) stop(t *testing.T, d time.Duration) {
	t.Helper()
	if c.exited() {
		c.dump(t)
		t.Fatalf("instance %s exited before it was stopped: %v", c.name, c.state)
	}
	c.sigterm(t)
	if !c.wait(d) {
		c.dump(t)
		t.Fatalf("instance %s did not stop within %v of SIGTERM", c.name, d)
	}
	if !c.state.Success() {
		c.dump(t)
		t.Fatalf("instance %s: graceful stop: %v", c.name, c.state)
	}
}

// failIfErrored fails the test if the child exited on its own for any
// other reason than a kill point: an error of Run (exit 1), a race report
// (exit 66), a panic.
func (c *eosChild) failIfErrored(t *testing.T) {
	t.Helper()
	if !c.exited() || c.killedBySIGKILL() {
		return
	}
	c.dump(t)
	t.Fatalf("instance %s failed: %v", c.name, c.state)
}

// find returns the submatches of the first stderr line matching re.
func (c *eosChild) find(re *regexp.Regexp) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, l := range c.mu.stderr {
		if m := re.FindStringSubmatch(l); m != nil {
			return m
		}
	}
	return nil
}

// findAll returns the submatches of every stderr line matching re.
func (c *eosChild) findAll(re *regexp.Regexp) [][]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out [][]string
	for _, l := range c.mu.stderr {
		if m := re.FindStringSubmatch(l); m != nil {
			out = append(out, m)
		}
	}
	return out
}

// findAfter reports whether a stderr line matching then follows one
// matching first.
func (c *eosChild) findAfter(first, then *regexp.Regexp) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	after := false
	for _, l := range c.mu.stderr {
		if after && then.MatchString(l) {
			return true
		}
		after = after || first.MatchString(l)
	}
	return false
}

// childMetrics is the last metrics line of a child (see cli).
type childMetrics struct {
	ok                  bool
	assigned, restoring []int32
	restored, late      int64
}

var metricsRe = regexp.MustCompile(`^metrics assigned=\[([\d ]*)\] restoring=\[([\d ]*)\] .* restored=(\d+) late=(\d+)`)

func (c *eosChild) metrics() childMetrics {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := len(c.mu.stdout) - 1; i >= 0; i-- {
		m := metricsRe.FindStringSubmatch(c.mu.stdout[i])
		if m == nil {
			continue
		}
		r, _ := strconv.ParseInt(m[3], 10, 64)
		l, _ := strconv.ParseInt(m[4], 10, 64)
		return childMetrics{ok: true, assigned: parseInts(m[1]), restoring: parseInts(m[2]), restored: r, late: l}
	}
	return childMetrics{}
}

func parseInts(s string) []int32 {
	var out []int32
	for _, f := range strings.Fields(s) {
		n, _ := strconv.ParseInt(f, 10, 32)
		out = append(out, int32(n))
	}
	return out
}

func (c *eosChild) dump(t *testing.T) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, l := range c.mu.stderr {
		t.Logf("%s: %s", c.name, l)
	}
	for _, l := range c.mu.stdout {
		if !strings.HasPrefix(l, "metrics ") {
			t.Logf("%s stdout: %s", c.name, l)
		}
	}
}

// firstCommit is the child's own measure of start → first committed batch.
func (c *eosChild) firstCommit() (time.Duration, bool) {
	m := c.find(firstCommitRe)
	if m == nil {
		return 0, false
	}
	d, err := time.ParseDuration(m[1])
	return d, err == nil
}

var killPointRe = regexp.MustCompile(`testapp: kill point (\S+) #(\d+) reached`)

// killPointReached returns the kill point the child reported before
// killing itself.
func (c *eosChild) killPointReached() (string, bool) {
	m := c.find(killPointRe)
	if m == nil {
		return "", false
	}
	return m[1], true
}

// restoreEvent is one partition an instance made ready, with the number
// of changelog records it restored for it.
type restoreEvent struct {
	part    int32
	records int64
}

// readyRe matches the engine's slog record (text handler) of a restored partition.
var readyRe = regexp.MustCompile(`msg="partition ready" .*partition=(\d+) .*restored_records=(\d+)`)

// restores returns the child's restore events in order (from its log).
func (c *eosChild) restores() []restoreEvent {
	var out []restoreEvent
	for _, m := range c.findAll(readyRe) {
		p, _ := strconv.ParseInt(m[1], 10, 32)
		n, _ := strconv.ParseInt(m[2], 10, 64)
		out = append(out, restoreEvent{int32(p), n})
	}
	return out
}

// waitFor polls cond every 20ms until it holds, failing the test after d;
// a child in children that fails meanwhile fails the test at once.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool, children ...*eosChild) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		for _, c := range children {
			if c != nil {
				c.failIfErrored(t)
			}
		}
		if time.Now().After(deadline) {
			for _, c := range children {
				if c != nil {
					c.dump(t)
				}
			}
			t.Fatalf("waited %v for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func describeExit(c *eosChild) string {
	if c.state == nil {
		return "running"
	}
	if ws, ok := c.state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return fmt.Sprintf("killed by %v", ws.Signal())
	}
	return c.state.String()
}

// sigterm sends SIGTERM once the child's signal handler is in place (its
// cli.SignalsReady line): before that the signal would kill it, not stop
// it gracefully.
func (c *eosChild) sigterm(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !c.signalsReady() {
		if c.exited() || time.Now().After(deadline) {
			break // the caller sees how it ended
		}
		time.Sleep(5 * time.Millisecond)
	}
	c.cmd.Process.Signal(syscall.SIGTERM)
}

func (c *eosChild) signalsReady() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Contains(c.mu.stderr, cli.SignalsReady)
}
