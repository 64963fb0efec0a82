package integration

import (
	"fmt"
	"math/rand/v2"
	"os"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/kstate/kstate/internal/engine"
)

// Crash tests with standby replicas on (issue #27): the seeded SIGKILL
// tests of crash_test.go with Options.Group.Standbys 1, so that every kill
// also lands on shards kept by a standby reader, on warm-up copies of a
// joining instance, and on partitions the probing rebalances move. After
// the kills, the read_committed outputs must be every key's 1..n exactly,
// the state restored from the changelog the model's, and the local shards
// (active and standby copies alike: every shard at the newest changelog
// offset of its partition) equal to the changelog's state (checkEOS).

// The group settings of the standby crash tests: a probing rebalance every
// 2 s, and an acceptable lag far below a partition's changelog (thousands of
// records by the time an instance joins), so that a joining instance warms
// copies up before it takes partitions over. It must stay above what a
// current copy trails the end offsets by while input flows: the position a
// member reports as it joins is older than the end offsets the leader reads,
// and under TestCrashStandbyWarmupProbing's flow (about 125 changelog
// records/s a partition) a warm-up that kept up trailed by 64–161 records
// at every probe; with 20 it never counted as caught up.
const (
	standbyProbing       = 2 * time.Second
	standbyAcceptableLag = 300
)

// childGroup is the group part of a child's last metrics line (cli): its
// standby and warm-up partitions and the view's generation.
type childGroup struct {
	ok              bool
	standby, warmup []int32
	generation      int32
}

var groupMetricsRe = regexp.MustCompile(`standby=\[([\d ]*)\] warmup=\[([\d ]*)\] generation=(-?\d+)$`)

func (c *eosChild) group() childGroup {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := len(c.mu.stdout) - 1; i >= 0; i-- {
		m := groupMetricsRe.FindStringSubmatch(c.mu.stdout[i])
		if m == nil {
			continue
		}
		g, _ := strconv.ParseInt(m[3], 10, 32)
		return childGroup{ok: true, standby: parseInts(m[1]), warmup: parseInts(m[2]), generation: int32(g)}
	}
	return childGroup{}
}

// standbyArgs are the flags of an instance of the standby crash tests.
func standbyArgs(e specEnv, name, dir string) eosChildArgs {
	return eosChildArgs{brokers: e.brokers, app: e.app, instance: name, stateDir: dir, in: e.in, out: e.out,
		maxBatch: 25, sessionTimeout: 6 * time.Second, pipelines: 1,
		standbys: 1, probing: standbyProbing, acceptableLag: standbyAcceptableLag}
}

// TestCrashStandbyTwoInstances: two instances with Standbys 1, each
// keeping a standby copy of the other's partitions; seeded kills at every
// kill point of the two-instance failover test and at during-standby (the
// victim dies applying a chunk of its standby's changelog), failing over
// to the survivor (which restores only the tail its standby had not read)
// after every other kill. Long: `make test-long`, `make crash`;
// TestCrashStandbyTwoInstancesShort is its variant in `make test`.
func TestCrashStandbyTwoInstances(t *testing.T) {
	t.Parallel()
	longTest(t)
	kinds := append(slices.Clone(killKinds), killFreeze, string(engine.DuringStandby))
	crashStandbyTwoInstances(t, 8, kinds, true, 1) // the first delay, then every kind once
}

// TestCrashStandbyTwoPipelines is TestCrashStandbyTwoInstances with two
// pipelines per instance and four kills, each followed by a failover: the
// balancer gives a partition moving to the survivor to the pipeline whose
// standby reader holds its copy open, which hands the open shard to its
// own task (issue #27; a sibling pipeline closed and reopened it). Long.
func TestCrashStandbyTwoPipelines(t *testing.T) {
	t.Parallel()
	longTest(t)
	crashStandbyTwoInstances(t, 4, []string{string(engine.AfterProduce), string(engine.BeforeLocalCommit), string(engine.DuringStandby)}, true, 2)
}

// TestCrashStandbyTwoInstancesShort is TestCrashStandbyTwoInstances with
// two kills, during-standby and after-produce, and no failover (the victim
// is back at once: static membership, no rebalance): the standby's kill
// point and the restart of a standby copy on the real broker, in `make
// test`.
func TestCrashStandbyTwoInstancesShort(t *testing.T) {
	t.Parallel()
	crashStandbyTwoInstances(t, 2, []string{string(engine.DuringStandby), string(engine.AfterProduce)}, false, 1)
}

func crashStandbyTwoInstances(t *testing.T, defaultKills int, kinds []string, failover bool, pipelines int) {
	seed, kills := crashParams(t, defaultKills)
	if env := os.Getenv("KSTATE_CRASH_KILLS"); env != "" {
		kills = max(2, kills/4)
	}
	rng := rand.New(rand.NewPCG(seed, 5))
	const parts = 4
	e := newSpecEnv(t, parts)
	in := newEOSInput(t, e, parts, 50)
	argsOf := map[string]eosChildArgs{}
	for _, name := range []string{"a", "b"} {
		a := standbyArgs(e, name, t.TempDir())
		// The default AcceptableLag (10,000 records): a victim back from
		// a failover gets its partitions again at once (its copies are
		// within it), so its kill point is reached within killRound's
		// wait; warm-ups are TestCrashStandbyWarmupProbing's.
		a.acceptableLag = 0
		a.pipelines = pipelines
		argsOf[name] = a
	}
	running := map[string]*eosChild{"a": startEOSChild(t, argsOf["a"]), "b": startEOSChild(t, argsOf["b"])}
	in.produce(t, rng, 200)
	waitFor(t, time.Minute, "both instances own partitions and stand by for the other's", func() bool {
		ma, mb := running["a"].metrics(), running["b"].metrics()
		ga, gb := running["a"].group(), running["b"].group()
		return len(ma.assigned) > 0 && len(mb.assigned) > 0 && len(ma.restoring)+len(mb.restoring) == 0 &&
			len(ga.standby) > 0 && len(gb.standby) > 0
	}, running["a"], running["b"])

	st := newCrashStats()
	failovers, extraKills := 0, 0
	var failoverRestored int64
	start := time.Now()
	schedule := killSchedule(rng, kills, kinds)
	if !failover {
		schedule = kinds[:min(kills, len(kinds))] // each kind once, in order
	}
	for i, kind := range schedule {
		victim, survivor := "a", "b"
		if rng.IntN(2) == 1 {
			victim, survivor = survivor, victim
		}
		sv := running[survivor]
		// The survivor's own restores (of its start) are not the
		// failover's: wait for them.
		waitFor(t, time.Minute, survivor+" has restored its partitions", func() bool {
			m := sv.metrics()
			return m.ok && len(m.assigned) > 0 && len(m.restoring) == 0
		}, sv)
		restoresBefore := len(sv.restores())
		running[victim].failIfErrored(t)
		running[victim].kill()
		extraKills++
		if kind == killFreeze {
			running[victim] = freezeRound(t, rng, in, argsOf[victim], sv, parts, st)
			in.produce(t, rng, 60+rng.IntN(120))
			continue
		}
		args := argsOf[victim]
		if kind == string(engine.DuringStandby) {
			// killRound sets no kill point for this kind: the victim dies
			// at its first chunk of standby changelog records, which the
			// survivor writes while processing killRound's wave (one or
			// two chunks: a later one may never come).
			args.killPoint = fmt.Sprintf("%s@1", kind)
		}
		killRound(t, rng, in, args, parts, kind, killPlan{maxNth: 2, wipeAll: true}, st)
		if failover && (i%2 == 0 || i == kills-1) {
			failovers++
			failoverRestored += awaitFailover(t, sv, survivor, parts, restoresBefore, fmt.Sprintf("kill %d (%s of %s)", i, kind, victim))
		}
		running[victim] = startEOSChild(t, argsOf[victim]) // back, without a kill point
		in.produce(t, rng, 60+rng.IntN(120))
	}
	t.Logf("%d kills (+%d of running instances), %d failovers (%d changelog records restored by the survivors) in %v: %s",
		len(schedule), extraKills, failovers, failoverRestored, time.Since(start).Round(time.Millisecond), st)
	if slices.Contains(schedule, string(engine.DuringStandby)) && st.reached[string(engine.DuringStandby)] == 0 {
		t.Errorf("kill point %s was never reached", engine.DuringStandby)
	}

	m := in.model()
	waitEOSOutputs(t, e, m, seed, time.Minute, running["a"], running["b"])
	for _, name := range []string{"a", "b"} {
		running[name].stop(t, 30*time.Second)
	}
	checkEOS(t, e, m, seed, argsOf["a"].stateDir, argsOf["b"].stateDir)
}

// Kinds of kill of TestCrashStandbyWarmupProbing.
const (
	// killWarmupJoiner: the joining instance dies at its n-th chunk of
	// standby or warm-up changelog records (during-standby), while it
	// warms its copies up.
	killWarmupJoiner = "warmup-joiner"
	// killWarmupOwner: the owner of a partition the joining instance warms
	// up is SIGKILLed as soon as the joiner reports the warm-up, and comes
	// back at once.
	killWarmupOwner = "warmup-owner"
	// killProbeJoiner: the joining instance is SIGKILLed as soon as a
	// probing rebalance made a partition it warmed up its own.
	killProbeJoiner = "probe-joiner"
	// killProbeOwner: the partition's previous owner is SIGKILLed as soon
	// as a probing rebalance moved the partition to the joining instance,
	// and comes back at once.
	killProbeOwner = "probe-owner"
)

// TestCrashStandbyWarmupProbing: three instances, Standbys 1. Two (a, b)
// run; in every round the third (c) joins with an empty state directory
// while input flows, so the balancer keeps the partitions with their
// owners and gives c warm-up copies, which a probing rebalance (every 2 s)
// moves to c once they are within AcceptableLag. Each round kills, by a
// seeded choice, c during its warm-up (at the during-standby kill point),
// the owner of a partition c warms up, c right after a probing rebalance
// moved a partition to it, or that partition's previous owner. Long (each
// round waits for rebalances and, after c's kill, its session timeout):
// `make test-long`, `make crash`.
func TestCrashStandbyWarmupProbing(t *testing.T) {
	t.Parallel()
	longTest(t)
	seed, rounds := crashParams(t, 4)
	if env := os.Getenv("KSTATE_CRASH_KILLS"); env != "" {
		rounds = max(4, rounds/10)
	}
	rng := rand.New(rand.NewPCG(seed, 6))
	const parts = 4
	e := newSpecEnv(t, parts)
	in := newEOSInput(t, e, parts, 50)
	argsOf := map[string]eosChildArgs{}
	for _, name := range []string{"a", "b", "c"} {
		argsOf[name] = standbyArgs(e, name, t.TempDir())
	}
	// c leaves the group when stopped gracefully: its partitions go back
	// to a and b at once, and it joins again as a newcomer.
	cArgs := argsOf["c"]
	cArgs.leaveGroup = true
	argsOf["c"] = cArgs
	running := map[string]*eosChild{"a": startEOSChild(t, argsOf["a"]), "b": startEOSChild(t, argsOf["b"])}
	// A changelog of several hundred records per partition, far beyond
	// AcceptableLag: a copy from scratch is not caught up.
	for range 4 {
		in.produce(t, rng, 500)
	}
	abOwnAll := func() bool {
		ma, mb := running["a"].metrics(), running["b"].metrics()
		return len(ma.assigned)+len(mb.assigned) == parts && len(ma.restoring)+len(mb.restoring) == 0
	}
	waitFor(t, time.Minute, "a and b own every partition", abOwnAll, running["a"], running["b"])

	st := newCrashStats()
	kinds := []string{killWarmupJoiner, killWarmupOwner, killProbeJoiner, killProbeOwner}
	start := time.Now()
	for i, kind := range killSchedule(rng, rounds+1, kinds)[1:] { // [0] is killSchedule's first delay
		st.planned[kind]++
		// c joins again as a newcomer: stopped (leaving the group) or
		// dead, its partitions back with a and b, its directory empty.
		if c := running["c"]; c != nil {
			if c.exited() {
				c.failIfErrored(t)
			} else {
				c.stop(t, 30*time.Second)
			}
			delete(running, "c")
		}
		waitFor(t, time.Minute, "a and b own every partition", abOwnAll, running["a"], running["b"])
		if err := os.RemoveAll(argsOf["c"].stateDir); err != nil {
			t.Fatal(err)
		}
		in.produce(t, rng, 100+rng.IntN(200))
		// Processed: the changelog holds it before c joins (a copy from
		// scratch is then far behind, and the owners are current).
		waitEOSOutputs(t, e, in.model(), seed, time.Minute, running["a"], running["b"])
		// A burst just before c joins: the owners commit it while the
		// group rebalances, so the end offsets the leader reads are past
		// the positions they joined with, by more than AcceptableLag; they
		// must still count as current, and c warm up
		// (TestDecideOwnerUnderLoadIsCaughtUp: counted behind, c could take
		// a partition over from scratch, and no warm-up came).
		in.produce(t, rng, 200+rng.IntN(200))
		// Input keeps flowing while c warms up: a few rows every 200 ms,
		// from an rng of their own (the seed's draws stay the same
		// whatever the timing).
		more := rand.New(rand.NewPCG(rng.Uint64(), 7))
		lastMore := time.Now()
		flow := func() {
			if time.Since(lastMore) > 200*time.Millisecond {
				in.produce(t, more, 5+more.IntN(15))
				lastMore = time.Now()
			}
		}
		cArgs := argsOf["c"]
		if kind == killWarmupJoiner {
			cArgs.killPoint = fmt.Sprintf("%s@%d", engine.DuringStandby, 1+rng.IntN(3))
		}
		c := startEOSChild(t, cArgs)
		running["c"] = c
		others := []*eosChild{running["a"], running["b"]}
		ownerOf := func(p int32) string {
			for _, n := range []string{"a", "b"} {
				if slices.Contains(running[n].metrics().assigned, p) {
					return n
				}
			}
			return ""
		}
		var warm []int32
		if kind != killWarmupJoiner {
			waitFor(t, time.Minute, "c warms a copy up", func() bool {
				flow()
				warm = c.group().warmup
				return len(warm) > 0
			}, append(others, c)...)
		}
		switch kind {
		case killWarmupJoiner:
			dead := false
			waitFor(t, time.Minute, "c reaches its kill point", func() bool {
				flow()
				dead = c.exited()
				for _, o := range others {
					o.failIfErrored(t)
				}
				return dead
			}, append(others, c)...)
			c.failIfErrored(t)
			p, ok := c.killPointReached()
			if !ok || p != string(engine.DuringStandby) {
				c.dump(t)
				t.Fatalf("c died (%s) without reporting kill point %s", describeExit(c), cArgs.killPoint)
			}
			st.reached[kind]++
			t.Logf("round %d (%s): c killed at %s; its last group view: %+v", i, kind, cArgs.killPoint, c.group())
		case killWarmupOwner:
			owner := ownerOf(warm[0])
			if owner == "" {
				t.Fatalf("round %d: no owner of partition %d, which c warms up", i, warm[0])
			}
			running[owner].kill()
			st.reached[kind]++
			t.Logf("round %d (%s): c warms up %v; killed %s, the owner of %d", i, kind, warm, owner, warm[0])
			time.Sleep(time.Duration(rng.IntN(1000)) * time.Millisecond) // a random moment, not a wait for a condition
			running[owner] = startEOSChild(t, argsOf[owner])
		case killProbeJoiner, killProbeOwner:
			prevOwner := map[int32]string{}
			for _, p := range warm {
				prevOwner[p] = ownerOf(p)
			}
			var moved int32 = -1
			waitFor(t, time.Minute, fmt.Sprintf("a probing rebalance moves one of %v to c", warm), func() bool {
				flow()
				for _, p := range c.metrics().assigned {
					if _, ok := prevOwner[p]; ok {
						moved = p
						return true
					}
				}
				// Warm-ups change while c catches up (at most 2 in the
				// group at a time): follow them.
				for _, p := range c.group().warmup {
					if _, ok := prevOwner[p]; !ok {
						prevOwner[p] = ownerOf(p)
					}
				}
				return false
			}, append(others, c)...)
			victim := "c"
			if kind == killProbeOwner {
				victim = prevOwner[moved]
				if victim == "" {
					victim = ownerOf(moved) // unknown then: whichever holds it now, if any
				}
				if victim == "" || victim == "c" {
					victim = []string{"a", "b"}[rng.IntN(2)]
				}
			}
			running[victim].kill()
			st.reached[kind]++
			t.Logf("round %d (%s): a probing rebalance moved partition %d to c (previous owner %q); killed %s; c's restores so far %+v",
				i, kind, moved, prevOwner[moved], victim, c.restores())
			if victim != "c" {
				running[victim] = startEOSChild(t, argsOf[victim])
			}
		}
		in.produce(t, rng, 60+rng.IntN(120))
	}
	t.Logf("%d rounds in %v: %s", rounds, time.Since(start).Round(time.Millisecond), st)

	// c back with what it has (not a newcomer): every instance catches up.
	if c := running["c"]; c == nil || c.exited() {
		if c != nil {
			c.failIfErrored(t)
		}
		running["c"] = startEOSChild(t, argsOf["c"])
	}
	m := in.model()
	waitEOSOutputs(t, e, m, seed, 2*time.Minute, running["a"], running["b"], running["c"])
	for _, name := range []string{"a", "b", "c"} {
		running[name].stop(t, 30*time.Second)
	}
	checkEOS(t, e, m, seed, argsOf["a"].stateDir, argsOf["b"].stateDir, argsOf["c"].stateDir)
}
