package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kstate/kstate/internal/kafkabroker"
	"github.com/kstate/kstate/internal/testprocs"
)

// The soak of issue #28 (make soak DURATION=1h): one three-broker cluster,
// the eos application (two instances, a third one coming and going) under
// steady input with dead letters, and every minute or two one random fault
// of the chaos cases' kinds, for KSTATE_SOAK's duration. Then the input
// stops, the application drains, and the exact check runs: every key's
// outputs 1..n exactly once (read_committed), the dead-letter topic
// exact, the changelog's state and the local shards equal to the model.
// The test logs a summary table (SOAK lines). KSTATE_CRASH_SEED replays the
// input and the choice of faults; the moments the brokers and instances
// reach are the machine's.

// Kinds of fault of the soak.
const (
	soakBrokerKill    = "broker SIGKILL + restart"
	soakBrokerRestart = "broker controlled restart"
	soakBlackhole     = "broker blackholed for the app"
	soakElection      = "preferred-leader election"
	soakAppKill       = "app instance SIGKILL + restart"
	soakRebalance     = "instance added/removed"
)

var soakKinds = []string{soakBrokerKill, soakBrokerRestart, soakBlackhole, soakElection, soakAppKill, soakRebalance}

// soakDuration returns KSTATE_SOAK's duration, or skips t without it.
func soakDuration(t *testing.T) time.Duration {
	t.Helper()
	s := os.Getenv("KSTATE_SOAK")
	if s == "" {
		t.Skip("soak: run with KSTATE_SOAK=<duration> (make soak DURATION=1h)")
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		t.Fatalf("KSTATE_SOAK=%q: want a positive duration such as 1h or 5m", s)
	}
	// Faults end, the application drains and the check reads everything:
	// that needs time after the duration.
	if dl, ok := t.Deadline(); ok && time.Until(dl) < d+20*time.Minute {
		t.Fatalf("KSTATE_SOAK=%v: go test's -timeout leaves %v; give it at least the duration plus 20 min", d, time.Until(dl).Round(time.Second))
	}
	return d
}

// soakPause returns the mean pause between faults: KSTATE_SOAK_PAUSE, or
// 90 s. Each pause is drawn from [pause/2, 3·pause/2].
func soakPause(t *testing.T) time.Duration {
	t.Helper()
	s := os.Getenv("KSTATE_SOAK_PAUSE")
	if s == "" {
		return 90 * time.Second
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 2*time.Second {
		t.Fatalf("KSTATE_SOAK_PAUSE=%q: want a duration of at least 2s", s)
	}
	return d
}

// soakInstance is one instance name of the soak and its incarnations.
type soakInstance struct {
	args  eosChildArgs
	all   []*eosChild // every incarnation, for the counts at the end
	cur   *eosChild   // the running one; nil when removed
	kills int
}

type soakRun struct {
	t     *testing.T
	c     *kafkabroker.Cluster
	a     *chaosApp
	rng   *rand.Rand // the faults' choices; the input has a.rng
	insts []*soakInstance

	faults  map[string]int
	gaps    map[string]time.Duration // longest gap after a fault of the kind
	worst   string                   // the fault of the longest gap
	worstAt time.Duration
	log     []string // one line per fault
}

func (s *soakRun) running() []*soakInstance {
	var out []*soakInstance
	for _, in := range s.insts {
		if in.cur != nil {
			out = append(out, in)
		}
	}
	return out
}

func (s *soakRun) children() []*eosChild {
	var out []*eosChild
	for _, in := range s.running() {
		out = append(out, in.cur)
	}
	return out
}

func (s *soakRun) failIfErrored() {
	for _, ch := range s.children() {
		ch.failIfErrored(s.t)
	}
}

// sleep waits d, failing the test if an instance fails meanwhile.
func (s *soakRun) sleep(d time.Duration) {
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		s.failIfErrored()
		time.Sleep(min(200*time.Millisecond, time.Until(end)))
	}
}

// randomNode picks a node at random among those with a role for the
// application (a leader of its partitions, a coordinator of it): a
// broker that lost every leadership in an earlier fault and has not had
// them back yet would make a fault without effect.
func (s *soakRun) randomNode() *kafkabroker.Node {
	var with []*kafkabroker.Node
	for _, n := range s.c.Nodes {
		if s.a.roles(s.t, n.ID) != "no role" {
			with = append(with, n)
		}
	}
	if len(with) == 0 {
		with = s.c.Nodes
	}
	return with[s.rng.IntN(len(with))]
}

func (s *soakRun) ctx(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

// restartAfter starts the stopped or killed node n again after down and
// waits until every partition is fully replicated again.
func (s *soakRun) restartAfter(n *kafkabroker.Node, down time.Duration) {
	s.sleep(down)
	ctx, cancel := s.ctx(3 * time.Minute)
	defer cancel()
	if err := n.Start(ctx); err != nil {
		s.t.Fatal(err)
	}
	waitReplicated(s.t, s.c)
}

// fault injects one fault of kind and returns what it did.
func (s *soakRun) fault(kind string) string {
	t := s.t
	switch kind {
	case soakBrokerKill:
		n := s.randomNode()
		down := time.Duration(10+s.rng.IntN(16)) * time.Second
		what := fmt.Sprintf("node %d (%s) SIGKILLed, down %v", n.ID, s.a.roles(t, n.ID), down)
		n.Kill()
		s.restartAfter(n, down)
		return what
	case soakBrokerRestart:
		n := s.randomNode()
		what := fmt.Sprintf("node %d (%s) stopped (controlled shutdown), 5 s down", n.ID, s.a.roles(t, n.ID))
		n.Stop()
		s.restartAfter(n, 5*time.Second)
		return what
	case soakBlackhole:
		n := s.randomNode()
		d := time.Duration(10+s.rng.IntN(21)) * time.Second
		what := fmt.Sprintf("node %d (%s) blackholed for the app for %v", n.ID, s.a.roles(t, n.ID), d)
		n.Proxy.Blackhole()
		s.sleep(d)
		n.Proxy.Pass()
		return what
	case soakElection:
		ctx, cancel := s.ctx(3 * time.Minute)
		defer cancel()
		before := s.leaders(ctx)
		for _, topic := range []string{s.a.e.in, s.a.e.out, s.a.e.app + "-changelog", s.a.e.app + "-dlq", "__consumer_offsets", "__transaction_state"} {
			if err := s.c.ElectPreferredLeaders(ctx, topic); err != nil {
				t.Fatal(err)
			}
		}
		after := s.leaders(ctx)
		moved := 0
		for k, v := range after {
			if before[k] != v {
				moved++
			}
		}
		return fmt.Sprintf("preferred-leader election of the app's topics and the internal ones: %d of the app's %d partition leaders moved", moved, len(after))
	case soakAppKill:
		r := s.running()
		in := r[s.rng.IntN(len(r))]
		down := time.Duration(s.rng.IntN(21)) * time.Second
		in.cur.failIfErrored(t)
		in.cur.kill()
		in.kills++
		s.sleep(down)
		in.cur = startEOSChild(t, in.args)
		in.all = append(in.all, in.cur)
		return fmt.Sprintf("instance %s SIGKILLed, restarted %v later", in.args.instance, down)
	case soakRebalance:
		r := s.running()
		if len(r) < len(s.insts) { // one is out: add it back
			for _, in := range s.insts {
				if in.cur == nil {
					in.cur = startEOSChild(t, in.args)
					in.all = append(in.all, in.cur)
					return fmt.Sprintf("instance %s added (%d running)", in.args.instance, len(r)+1)
				}
			}
		}
		in := r[s.rng.IntN(len(r))]
		in.cur.stop(t, 90*time.Second)
		in.cur = nil
		return fmt.Sprintf("instance %s removed (SIGTERM, leaves the group; %d running)", in.args.instance, len(r)-1)
	}
	t.Fatalf("unknown fault %q", kind)
	return ""
}

// leaders maps the application's partitions to their leaders now.
func (s *soakRun) leaders(ctx context.Context) map[string]int32 {
	out := map[string]int32{}
	for _, topic := range []string{s.a.e.in, s.a.e.out, s.a.e.app + "-changelog"} {
		for p := range int32(s.a.parts) {
			if l, err := s.c.Leader(ctx, topic, p); err == nil {
				out[fmt.Sprintf("%s/%d", topic, p)] = l
			}
		}
	}
	return out
}

// soakMetricsRe reads an instance's transactions committed and aborted
// from its metrics line (the engine's Metrics().Total).
var soakMetricsRe = regexp.MustCompile(`^metrics .* commits=(\d+) aborts=(\d+) `)

// TestSoakCluster is the soak (make soak DURATION=...; KSTATE_SOAK).
func TestSoakCluster(t *testing.T) {
	d := soakDuration(t)
	pause := soakPause(t)
	c := ownCluster(t)
	a := newChaosAppWith(t, c, "soak", chaosOpts{deadLetter: true, poisonRate: 0.005, failRate: 0.005, leaveGroup: true})
	s := &soakRun{t: t, c: c, a: a, rng: rand.New(rand.NewPCG(a.seed, 17)),
		faults: map[string]int{}, gaps: map[string]time.Duration{}}
	for i, args := range a.args {
		s.insts = append(s.insts, &soakInstance{args: args, all: []*eosChild{a.children[i]}, cur: a.children[i]})
	}
	// The third instance: added and removed by the rebalance faults, it
	// starts out of the group.
	third := a.args[0]
	third.instance, third.stateDir = "i3", t.TempDir()
	s.insts = append(s.insts, &soakInstance{args: third})

	// ~50 rows/s: three brokers and two or three instances share two cores.
	a.gaps = watchGaps(t, a.direct)
	a.steady(5, 100*time.Millisecond)
	start := time.Now()
	end := start.Add(d)
	// Faults from a shuffled cycle of every kind (each kind about as often),
	// one every pause/2 to 3·pause/2 (45-135 s) after the previous one
	// settled.
	var plan []string
	for i := 0; time.Until(end) > 0; i++ {
		s.sleep(pause/2 + time.Duration(s.rng.Int64N(int64(pause))))
		if time.Until(end) < 30*time.Second {
			break
		}
		if len(plan) == 0 {
			plan = slices.Clone(soakKinds)
			s.rng.Shuffle(len(plan), func(i, j int) { plan[i], plan[j] = plan[j], plan[i] })
		}
		kind := plan[0]
		plan = plan[1:]
		s.a.gaps.takeMax() // the calm before the fault is not its gap
		at := time.Since(start)
		what := s.fault(kind)
		s.sleep(30 * time.Second) // the fault's aftermath
		gap := s.a.gaps.takeMax()
		s.faults[kind]++
		s.gaps[kind] = max(s.gaps[kind], gap)
		if gap > s.worstAt {
			s.worst, s.worstAt = fmt.Sprintf("#%d %s", i+1, what), gap
		}
		line := fmt.Sprintf("fault #%d at %v: %s: %s; longest gap %v", i+1, at.Round(time.Second), kind, what, gap.Round(time.Millisecond))
		s.log = append(s.log, line)
		t.Log(line)
	}
	s.sleep(time.Until(end))
	calm := s.a.gaps.takeMax()

	// Stop the input, drain, check.
	if err := a.stopInput(); err != nil {
		t.Fatalf("steady input: %v", err)
	}
	m := a.in.model()
	got := waitEOSOutputs(t, a.direct, m, a.seed, 10*time.Minute, s.children()...)
	dl := waitDeadLetters(t, a.direct, m, a.seed, 5*time.Minute, s.children()...)
	longest, _, watched := a.gaps.stop()
	lost, dup := soakCompare(m.outputs, got)
	var dirs []string
	for _, in := range s.insts {
		if in.cur != nil {
			in.cur.stop(t, 2*time.Minute)
		}
		if len(in.all) > 0 {
			dirs = append(dirs, in.args.stateDir)
		}
	}
	m.checkDeadLetters(t, a.direct, dl, a.seed)
	checkEOS(t, a.direct, m, a.seed, dirs...)
	m.checkDeadLetters(t, a.direct, readDeadLetters(t, a.direct), a.seed)

	// The counts, over every incarnation.
	rejoins, restores, kills, incarnations := 0, 0, 0, 0
	var restored, aborts, commits int64
	for _, in := range s.insts {
		kills += in.kills
		for _, ch := range in.all {
			incarnations++
			rejoins += len(ch.findAll(reconnectRe))
			if m := lastStdout(ch, soakMetricsRe); m != nil {
				c, _ := strconv.ParseInt(m[1], 10, 64)
				a, _ := strconv.ParseInt(m[2], 10, 64)
				commits, aborts = commits+c, aborts+a
			}
			for _, r := range ch.restores() {
				if r.records > 0 {
					restores++
					restored += r.records
				}
			}
		}
	}
	total := 0
	for _, n := range s.faults {
		total += n
	}
	rows := []string{
		"| fault | injected | longest output gap after it |",
		"|---|---|---|",
	}
	for _, k := range soakKinds {
		rows = append(rows, fmt.Sprintf("| %s | %d | %v |", k, s.faults[k], s.gaps[k].Round(time.Millisecond)))
	}
	rows = append(rows,
		fmt.Sprintf("| **all** | **%d** | **%v** (overall; %v in the last calm stretch) |", total, longest.Round(time.Millisecond), calm.Round(time.Millisecond)),
		"",
		"| measure | value |",
		"|---|---|",
		fmt.Sprintf("| duration under faults | %v (seed %d) |", d, a.seed),
		fmt.Sprintf("| longest gap | %v (after fault %s) |", longest.Round(time.Millisecond), s.worst),
		fmt.Sprintf("| transactions committed / aborted (the instances' engine metrics, every incarnation) | %d / %d |", commits, aborts),
		fmt.Sprintf("| rejoins (Kafka unreachable: new session) | %d |", rejoins),
		fmt.Sprintf("| restores (partitions made ready with changelog records) | %d (%d records) |", restores, restored),
		fmt.Sprintf("| instance incarnations / SIGKILLs | %d / %d |", incarnations, kills),
		fmt.Sprintf("| records in (input rows, of them dead letters) | %d (%d) |", len(a.in.rows), len(m.deadLetters)),
		fmt.Sprintf("| records out (output rows; of them after the warm-up, seen by the gap watcher) | %d (%d) |", m.total, watched),
		fmt.Sprintf("| lost / duplicated outputs | %d / %d |", lost, dup),
		"| dead letters, changelog state, local shards | exact |",
	)
	t.Logf("SOAK faults:\n%s", strings.Join(s.log, "\n"))
	t.Logf("SOAK summary (commit the binary was built from: see make soak's output):\n%s", strings.Join(rows, "\n"))
	t.Logf("SOAK warnings of the instances: %s", soakWarnings(s))
}

// soakCompare counts the model's outputs missing from got and got's
// duplicates (checkEOS fails on either; these are the table's numbers).
func soakCompare(want map[string][]string, got testprocs.Outputs) (lost, dup int) {
	for k, w := range want {
		seen := map[string]int{}
		for _, v := range got[k] {
			seen[v]++
			if seen[v] > 1 {
				dup++
			}
		}
		for _, v := range w {
			if seen[v] == 0 {
				lost++
			}
		}
	}
	return lost, dup
}

// soakWarnings is chaosApp.warnings over every incarnation.
func soakWarnings(s *soakRun) string {
	saved := s.a.children
	defer func() { s.a.children = saved }()
	s.a.children = nil
	for _, in := range s.insts {
		s.a.children = append(s.a.children, in.all...)
	}
	return s.a.warnings()
}

// lastStdout returns the submatches of the last stdout line of c matching re.
func lastStdout(c *eosChild, re *regexp.Regexp) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := len(c.mu.stdout) - 1; i >= 0; i-- {
		if m := re.FindStringSubmatch(c.mu.stdout[i]); m != nil {
			return m
		}
	}
	return nil
}
