package integration

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/kstate/kstate/internal/engine"
	"github.com/kstate/kstate/internal/testprocs"
)

// Crash tests: an instance of the eos application (integration/testapp/eos)
// runs as a child process over one input stream and is SIGKILLed again and
// again — after a random delay, between produce and commit, between the
// Kafka commit and the local commit, and during restore — while the test
// keeps producing. A clean final run then consumes everything, and the
// read_committed output topic must equal the exact expected output and the
// state restored from the changelog (and the local shards) the model.
//
// KSTATE_CRASH_SEED reproduces a run's random choices (the seed is logged);
// KSTATE_CRASH_KILLS sets the number of kills (`make crash` runs 200).

// Kinds of kill.
const (
	killDelay = "delay" // the test SIGKILLs the child after a random delay
	// killShutdown: SIGTERM after a random delay, SIGKILL a moment later
	// (during the graceful shutdown, unless it finished already).
	killShutdown = "shutdown"
	// killFreeze (two instances only) SIGSTOPs the child with a produced,
	// uncommitted transaction, lets the survivor take its partitions over
	// and SIGCONTs it: a zombie that must not commit.
	killFreeze = "freeze"
)

var killKinds = []string{killDelay, killShutdown, string(engine.AfterProduce), string(engine.BeforeLocalCommit), string(engine.DuringRestore)}

// crashSeed returns the seed of the test's random choices:
// KSTATE_CRASH_SEED, or a new one, logged.
func crashSeed(t *testing.T) uint64 {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("KSTATE_CRASH_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("KSTATE_CRASH_SEED=%q: %v", s, err)
		}
		seed = v
	}
	t.Logf("seed %d (reproduce the test's random choices with KSTATE_CRASH_SEED=%d)", seed, seed)
	return seed
}

// crashParams returns the seed and the number of kills: KSTATE_CRASH_KILLS,
// or defaultKills.
func crashParams(t *testing.T, defaultKills int) (uint64, int) {
	t.Helper()
	seed := crashSeed(t)
	kills := defaultKills
	if s := os.Getenv("KSTATE_CRASH_KILLS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			t.Fatalf("KSTATE_CRASH_KILLS=%q: want a positive number", s)
		}
		kills = v
	}
	t.Logf("%d kills (KSTATE_CRASH_KILLS)", kills)
	return seed, kills
}

// killSchedule returns kills kinds of kill: the first is a delay (nothing
// to restore yet), then shuffled cycles through every kind, so that every
// kind is exercised about as often.
func killSchedule(rng *rand.Rand, kills int, kinds []string) []string {
	out := []string{killDelay}
	for len(out) < kills {
		c := slices.Clone(kinds)
		rng.Shuffle(len(c), func(i, j int) { c[i], c[j] = c[j], c[i] })
		out = append(out, c...)
	}
	return out[:kills]
}

// crashStats collects what the kills did.
type crashStats struct {
	planned      map[string]int
	reached      map[string]int // kill points the child reported before dying
	notReached   int            // kill point not reached in time: killed by the test
	firstCommits []time.Duration
}

func newCrashStats() *crashStats {
	return &crashStats{planned: map[string]int{}, reached: map[string]int{}}
}

func (s *crashStats) String() string {
	fc := slices.Clone(s.firstCommits)
	slices.Sort(fc)
	q := func(f float64) time.Duration {
		if len(fc) == 0 {
			return 0
		}
		return fc[int(f*float64(len(fc)-1))]
	}
	return fmt.Sprintf("planned %v; kill points reached %v; not reached (killed by the test) %d; restart → first commit (%d restarts that got there): min %v, median %v, max %v",
		s.planned, s.reached, s.notReached, len(fc), q(0), q(0.5), q(1))
}

// killPlan tunes killRound to the number of instances.
type killPlan struct {
	maxNth  int  // after-produce and before-local-commit kill at occurrence 1..maxNth
	wipeAll bool // during-restore wipes every shard and kills at the first occurrence
	// waves multiplies the rows produced a round (0: 1): larger batches,
	// with more keys each.
	waves int
}

// killRound starts an instance for one kill of the given kind, produces a
// wave of input and waits until the instance is dead.
func killRound(t *testing.T, rng *rand.Rand, in *eosInput, args eosChildArgs, parts int, kind string, plan killPlan, st *crashStats) {
	t.Helper()
	if kind == string(engine.DuringRestore) && len(st.firstCommits) == 0 {
		kind = killDelay // nothing committed yet, so nothing to restore
	}
	st.planned[kind]++
	// Batch sizes change the shape of the transactions; kill points count
	// transactions, so they get small batches.
	args.maxBatch = []int{5, 25, 100, 1000}[rng.IntN(4)]
	switch kind {
	case string(engine.AfterProduce), string(engine.BeforeLocalCommit),
		string(engine.AfterTaskProduce), string(engine.AfterLocalCommit):
		args.maxBatch = min(args.maxBatch, 25)
		args.killPoint = fmt.Sprintf("%s@%d", kind, 1+rng.IntN(plan.maxNth))
		if args.deadLetter {
			args.killPoint += "/dlq" // only batches that hold dead letters count
		}
	case string(engine.DuringRestore):
		// Make restore work: wipe shards; each wiped shard of a partition
		// the instance gets restores its whole changelog, reaching the
		// kill point at least once.
		wipe := rng.Perm(parts)[:1+rng.IntN(parts)]
		nth := 1 + rng.IntN(len(wipe))
		if plan.wipeAll {
			wipe, nth = rng.Perm(parts), 1
		}
		for _, p := range wipe {
			if err := os.RemoveAll(filepath.Join(args.stateDir, args.app, strconv.Itoa(p))); err != nil {
				t.Fatal(err)
			}
		}
		args.killPoint = fmt.Sprintf("%s@%d", kind, nth)
		args.maxBatch = min(args.maxBatch, 25)
	}
	delay := time.Duration(50+rng.IntN(1450)) * time.Millisecond
	wave := (60 + rng.IntN(120)) * max(plan.waves, 1)
	start := time.Now()
	c := startEOSChild(t, args)
	in.produce(t, rng, wave)
	switch {
	case kind == killDelay:
		time.Sleep(time.Until(start.Add(delay))) // the kill's random moment, not a wait for a condition
		c.failIfErrored(t)
		c.kill()
	case kind == killShutdown:
		time.Sleep(time.Until(start.Add(delay))) // random moments, as above
		c.failIfErrored(t)
		c.sigterm(t)
		if c.wait(time.Duration(rng.IntN(150)) * time.Millisecond) { // a graceful stop takes ~100-300ms
			if !c.state.Success() {
				c.dump(t)
				t.Fatalf("%s: graceful stop: %s", args.instance, describeExit(c))
			}
			st.reached[killShutdown+" (stopped first)"]++
		} else {
			c.kill()
			st.reached[killShutdown+" (killed)"]++
		}
	case !c.wait(10 * time.Second):
		st.notReached++
		c.kill()
		c.dump(t)
		t.Logf("%s: kill point %s not reached in 10s: killed it (log above)", args.instance, args.killPoint)
	default:
		c.failIfErrored(t)
		p, ok := c.killPointReached()
		if !ok || p != kind {
			c.dump(t)
			t.Fatalf("%s died (%s) without reporting kill point %s", args.instance, describeExit(c), args.killPoint)
		}
		st.reached[p]++
		if n, ok := c.killPointDeadLetters(); ok && n > 0 {
			st.reached[p+withDeadLetters]++
		}
	}
	if fc, ok := c.firstCommit(); ok {
		st.firstCommits = append(st.firstCommits, fc)
	}
}

// TestCrashExactlyOnce kills one instance many times over one input stream.
func TestCrashExactlyOnce(t *testing.T) {
	// Not parallel (main_test.go): the final restart must commit within 5 s.
	seed, kills := crashParams(t, 40)
	rng := rand.New(rand.NewPCG(seed, 1))
	const parts = 3
	e := newSpecEnv(t, parts)
	in := newEOSInput(t, e, parts, 50)
	args := eosChildArgs{brokers: e.brokers, app: e.app, instance: "i1", stateDir: t.TempDir(),
		in: e.in, out: e.out, maxBatch: 25}
	st := newCrashStats()
	start := time.Now()
	for _, kind := range killSchedule(rng, kills, killKinds) {
		killRound(t, rng, in, args, parts, kind, killPlan{maxNth: 3}, st)
	}
	t.Logf("%d kills in %v: %s", kills, time.Since(start).Round(time.Millisecond), st)
	for _, k := range killKinds[2:] {
		if kills >= 2*len(killKinds) && st.reached[k] == 0 {
			t.Errorf("kill point %s was never reached", k)
		}
	}

	// A clean run catches up: the outputs so far must already be exact.
	catchUp := startEOSChild(t, args)
	in.model().checkOutputs(t, waitEOSOutputs(t, e, in.model(), seed, time.Minute, catchUp), seed)
	catchUp.stop(t, 30*time.Second)

	// Tail: one last row per partition, far ahead in event time: the batch
	// that processes them commits a watermark that makes every pending
	// timer due, and the instance dies producing the next transaction, the
	// one firing them. The final run gets no new input: it must still fire
	// them.
	tail := args
	tail.killPoint = string(engine.AfterProduce) + "@2"
	in.produceEveryPartition(t, rng, 1000)
	c := startEOSChild(t, tail)
	if !c.wait(10 * time.Second) {
		t.Log("tail: kill point not reached in 10s: killing it")
		c.kill()
	}
	c.failIfErrored(t)
	_, tailKilled := c.killPointReached()

	// A clean final run consumes everything.
	m := in.model()
	final := startEOSChild(t, args)
	waitEOSOutputs(t, e, m, seed, time.Minute, final)
	fc, _ := final.firstCommit()
	waitFinalReady(t, final, parts)
	final.stop(t, 30*time.Second)
	t.Logf("tail kill point reached: %v; final run: first commit %v after start; %d input rows, %d output rows (%d timer rows) expected; last metrics %+v",
		tailKilled, fc, len(in.rows), m.total, m.total-len(in.rows), final.metrics())
	if fc > 5*time.Second {
		// Half the transaction timeout: the restart waited for the broker
		// to abort a dead instance's transaction instead of fencing it.
		t.Errorf("final run: %v from start to the first committed batch", fc)
	}
	checkEOS(t, e, m, seed, args.stateDir)
}

// waitFinalReady waits until the final run holds every one of parts
// partitions, none of them restoring. Its outputs can be complete before
// that (the last kill round's run caught up), and a stop during a restore
// leaves that partition's local shard behind the changelog, which
// checkLocalShards would report as lost state (a CI run stopped the final
// run before its first metrics line, with partition 0's shard empty; another
// stopped TestCrashDeadLetterExactlyOnce's final run while it restored the
// shards a last during-restore round had wiped). Every crash test that
// checks the local shards after a final run waits for it.
func waitFinalReady(t *testing.T, final *eosChild, parts int) {
	t.Helper()
	waitFor(t, time.Minute, "the final run holds every partition, restored", func() bool {
		m := final.metrics()
		return m.ok && len(m.assigned) == parts && len(m.restoring) == 0
	}, final)
}

// finalCleanRun ends a crash test: a clean run of args consumes all of
// in's rows, holds every one of parts partitions restored (waitFinalReady)
// and stops; then the outputs, the changelog's state and the local shard
// are checked against the model (checkEOS).
func finalCleanRun(t *testing.T, e specEnv, in *eosInput, args eosChildArgs, seed uint64, parts int) {
	t.Helper()
	m := in.model()
	final := startEOSChild(t, args)
	waitEOSOutputs(t, e, m, seed, time.Minute, final)
	waitFinalReady(t, final, parts)
	final.stop(t, 30*time.Second)
	t.Logf("final run: %d input rows, %d output rows (%d timer rows) expected; last metrics %+v",
		len(in.rows), m.total, m.total-len(in.rows), final.metrics())
	checkEOS(t, e, m, seed, args.stateDir)
}

// checkEOS reads the output topic after every instance stopped and checks
// it, the changelog's state and the local shards against the model.
func checkEOS(t *testing.T, e specEnv, m *eosModel, seed uint64, dirs ...string) {
	t.Helper()
	got := testprocs.WaitOutputs(t, e.brokers, e.out, m.total, 30*time.Second)
	m.checkOutputs(t, got, seed)
	dumps := m.checkChangelogState(t, e, seed)
	checkLocalShards(t, e.app, len(m.parts), dirs, dumps)
}

// TestCrashTwoInstancesFailover runs two instances; in every round one of
// them (the victim) is killed while the other keeps running: its running
// incarnation at once, then a new incarnation by the round's kind of kill.
// After every other kill the victim stays down until the survivor has
// taken its partitions over (session timeout, rebalance, restore on the
// survivor; the victim's return then moves some back and it restores the
// tail it missed); otherwise it is back at once (static membership: it
// keeps its partitions without a rebalance). The freeze kind makes the
// victim a zombie with an open transaction.
func TestCrashTwoInstancesFailover(t *testing.T) {
	t.Parallel()
	crashTwoInstancesFailover(t, false)
}

// crashTwoInstancesFailover is TestCrashTwoInstancesFailover; with
// secondInput, half the keys come from a second input topic
// (TestCrashTwoInputsFailover).
func crashTwoInstancesFailover(t *testing.T, secondInput bool) {
	// 7 failovers with one input (make test), 4 with two (make test-long:
	// the variant's code paths beyond the input are the same; `make crash`
	// runs more).
	seed, kills := crashParams(t, map[bool]int{false: 7, true: 4}[secondInput])
	if env := os.Getenv("KSTATE_CRASH_KILLS"); env != "" {
		kills = max(2, kills/4)
	}
	rng := rand.New(rand.NewPCG(seed, 2))
	const parts = 4
	e := newSpecEnv(t, parts)
	in := newEOSInput(t, e, parts, 50)
	// One pipeline per instance: freezeRound expects the zombie to end one
	// way, aborted or fenced; with several pipelines (the automatic
	// default) one can abort while another is fenced and stops the
	// process. TestCrashExactlyOncePipelines kills with two pipelines.
	base := eosChildArgs{brokers: e.brokers, app: e.app, in: e.in, out: e.out, maxBatch: 25, sessionTimeout: 6 * time.Second, pipelines: 1}
	if secondInput {
		base.in2 = e.app + "-in2"
		newTopic(t, e.brokers, base.in2, parts)
		in.withSecondInput(base.in2)
	}
	argsOf := map[string]eosChildArgs{}
	for _, name := range []string{"a", "b"} {
		a := base
		a.instance, a.stateDir = name, t.TempDir()
		argsOf[name] = a
	}
	running := map[string]*eosChild{"a": startEOSChild(t, argsOf["a"]), "b": startEOSChild(t, argsOf["b"])}
	in.produce(t, rng, 200)
	waitFor(t, time.Minute, "both instances own partitions", func() bool {
		ma, mb := running["a"].metrics(), running["b"].metrics()
		return len(ma.assigned) > 0 && len(mb.assigned) > 0 && len(ma.restoring)+len(mb.restoring) == 0
	}, running["a"], running["b"])

	st := newCrashStats()
	failovers, extraKills := 0, 0
	var failoverRestored int64
	start := time.Now()
	for i, kind := range killSchedule(rng, kills, append(slices.Clone(killKinds), killFreeze)) {
		victim, survivor := "a", "b"
		if rng.IntN(2) == 1 {
			victim, survivor = survivor, victim
		}
		sv := running[survivor]
		restoresBefore := len(sv.restores())
		// The victim's current incarnation dies at a random moment of its
		// processing; killRound then starts it with this round's kill.
		running[victim].failIfErrored(t)
		running[victim].kill()
		extraKills++
		if kind == killFreeze {
			running[victim] = freezeRound(t, rng, in, argsOf[victim], sv, parts, st)
			in.produce(t, rng, 60+rng.IntN(120))
			continue
		}
		killRound(t, rng, in, argsOf[victim], parts, kind, killPlan{maxNth: 2, wipeAll: true}, st)
		if i%2 == 0 || i == kills-1 { // fail over at least every other kill
			failovers++
			failoverRestored += awaitFailover(t, sv, survivor, parts, restoresBefore, fmt.Sprintf("kill %d (%s of %s)", i, kind, victim))
		}
		running[victim] = startEOSChild(t, argsOf[victim]) // back, without a kill point
		in.produce(t, rng, 60+rng.IntN(120))
	}
	t.Logf("%d kills (+%d of running instances), %d failovers in %v: %s", kills, extraKills, failovers, time.Since(start).Round(time.Millisecond), st)
	if failoverRestored == 0 {
		t.Error("no survivor restored anything when it took partitions over")
	}

	m := in.model()
	waitEOSOutputs(t, e, m, seed, time.Minute, running["a"], running["b"])
	for _, name := range []string{"a", "b"} {
		running[name].stop(t, 30*time.Second)
	}
	checkEOS(t, e, m, seed, argsOf["a"].stateDir, argsOf["b"].stateDir)
}

var (
	stopPointRe = regexp.MustCompile(`testapp: stop point (\S+) #(\d+) reached`)
	continuedRe = regexp.MustCompile(`testapp: stop point \S+ #\d+: continued`)
	zombieRe    = regexp.MustCompile(`aborted by a rebalance|transaction aborted instead of committed`)
	fencedRe    = regexp.MustCompile(`fenced`)
)

// freezeRound starts the victim with a stop point after its produce, waits
// until the survivor sv has taken every partition over and lets the
// frozen victim continue: a zombie with an open transaction, which must
// abort it (or stop, fenced). It returns the victim's running instance.
func freezeRound(t *testing.T, rng *rand.Rand, in *eosInput, args eosChildArgs, sv *eosChild, parts int, st *crashStats) *eosChild {
	t.Helper()
	st.planned[killFreeze]++
	args.killPoint = fmt.Sprintf("%s@%d/stop", engine.AfterProduce, 1+rng.IntN(2))
	v := startEOSChild(t, args)
	in.produce(t, rng, 60+rng.IntN(120))
	// The stop point needs batches on the victim's partitions, and the
	// wave may have none left for it: under load the survivor can process
	// it all while the victim starts, or the victim's partitions get too
	// few records for a second batch. A row on every partition every
	// second keeps the point reachable (their keys from an rng of their
	// own: the seed's draws stay the same whatever the timing).
	more := rand.New(rand.NewPCG(rng.Uint64(), 3))
	lastMore := time.Now()
	waitFor(t, time.Minute, args.instance+" reaches its stop point", func() bool {
		if v.find(stopPointRe) != nil {
			return true
		}
		if time.Since(lastMore) > time.Second {
			in.produceEveryPartition(t, more, 0)
			lastMore = time.Now()
		}
		return false
	}, v, sv)
	t0 := time.Now()
	waitFor(t, time.Minute, sv.name+" owns every partition", func() bool {
		m := sv.metrics()
		return len(m.assigned) == parts && len(m.restoring) == 0
	}, sv)
	took := time.Since(t0)
	v.cmd.Process.Signal(syscall.SIGCONT)
	waitFor(t, time.Minute, "the zombie "+args.instance+" aborts its transaction or stops", func() bool {
		return v.exited() || v.findAfter(continuedRe, zombieRe)
	}, sv)
	if v.exited() {
		if v.state.ExitCode() != 1 || v.find(fencedRe) == nil {
			v.dump(t)
			t.Fatalf("zombie %s exited (%s) without being fenced", args.instance, describeExit(v))
		}
		t.Logf("freeze of %s: %s took over every partition in %v; the zombie was fenced and stopped", args.instance, sv.name, took.Round(time.Millisecond))
		st.reached[killFreeze+" (fenced)"]++
		args.killPoint = ""
		return startEOSChild(t, args)
	}
	t.Logf("freeze of %s: %s took over every partition in %v; the zombie aborted its transaction", args.instance, sv.name, took.Round(time.Millisecond))
	st.reached[killFreeze+" (aborted)"]++
	return v
}

// awaitFailover waits until survivor sv owns every partition, restored,
// and returns the changelog records its restores since restoresBefore
// applied; what names the kill in the log line.
func awaitFailover(t *testing.T, sv *eosChild, survivor string, parts, restoresBefore int, what string) int64 {
	t.Helper()
	t0 := time.Now()
	waitFor(t, time.Minute, survivor+" owns every partition", func() bool {
		m := sv.metrics()
		return len(m.assigned) == parts && len(m.restoring) == 0
	}, sv)
	var n int64
	for _, r := range sv.restores()[restoresBefore:] {
		n += r.records
	}
	t.Logf("%s: %s took over every partition in %v, restoring %d changelog records",
		what, survivor, time.Since(t0).Round(time.Millisecond), n)
	return n
}
