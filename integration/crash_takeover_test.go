package integration

import (
	"math/rand/v2"
	"regexp"
	"testing"
	"time"

	"github.com/kstate/kstate/internal/engine"
)

// TestCrashTakeoverAbortsOpenTransaction (issue #27): an instance dies with
// its transaction open (outputs and changelog records produced, not
// committed), and the instance that takes its partitions over aborts that
// transaction at once instead of waiting for the broker to abort it after
// Kafka.TransactionTimeout. The timeout is a minute here, the session
// timeout 6 s: before the fix the survivor's offset fetch of the dead
// instance's partitions (RequireStable) and its restore (read_committed)
// waited for the minute, so the outputs were not complete within 30 s.
// Afterwards, every key's outputs 1..n exactly once, the changelog state
// the model's and the local shards equal to the changelog (checkEOS).
func TestCrashTakeoverAbortsOpenTransaction(t *testing.T) {
	t.Parallel()
	seed, _ := crashParams(t, 1)
	rng := rand.New(rand.NewPCG(seed, 27))
	const parts = 4
	e := newSpecEnv(t, parts)
	in := newEOSInput(t, e, parts, 50)
	args := func(name string) eosChildArgs {
		a := standbyArgs(e, name, t.TempDir())
		a.acceptableLag = 0 // a's copies are current: no warm-ups
		a.txnTimeout = time.Minute
		return a
	}
	argsA, argsB := args("a"), args("b")
	a, b := startEOSChild(t, argsA), startEOSChild(t, argsB)
	in.produce(t, rng, 200)
	waitFor(t, time.Minute, "both instances own partitions and stand by for the other's", func() bool {
		ma, mb := a.metrics(), b.metrics()
		ga, gb := a.group(), b.group()
		return len(ma.assigned) > 0 && len(mb.assigned) > 0 && len(ma.restoring)+len(mb.restoring) == 0 &&
			len(ga.standby) > 0 && len(gb.standby) > 0
	}, a, b)
	waitEOSOutputs(t, e, in.model(), seed, time.Minute, a, b)

	// a again, within its session timeout (static membership: no
	// rebalance, its partitions back), with a kill point at its first
	// produce: it dies with its transaction open.
	a.stop(t, 30*time.Second)
	killed := argsA
	killed.killPoint = string(engine.AfterProduce) + "@1"
	a = startEOSChild(t, killed)
	waitFor(t, time.Minute, "a owns its partitions again", func() bool {
		m := a.metrics()
		return len(m.assigned) > 0 && len(m.restoring) == 0
	}, a)
	in.produce(t, rng, 100)
	if !a.wait(time.Minute) || !a.killedBySIGKILL() {
		a.dump(t)
		t.Fatal("a did not die at its kill point")
	}
	dead := time.Now()

	// b takes a's partitions over after the session timeout; the dead
	// transaction would hold them for the transaction timeout (a minute).
	waitEOSOutputs(t, e, in.model(), seed, 30*time.Second, b)
	t.Logf("b completed every output %v after a's death", time.Since(dead).Round(time.Millisecond))
	if len(b.find(regexp.MustCompile(`aborted the open transaction of a member that left the group.*transactional_id=\S+-a\b`))) == 0 {
		b.dump(t)
		t.Fatal("b did not abort a's open transaction")
	}

	a = startEOSChild(t, argsA)
	in.produce(t, rng, 100)
	m := in.model()
	waitEOSOutputs(t, e, m, seed, time.Minute, a, b)
	a.stop(t, 30*time.Second)
	b.stop(t, 30*time.Second)
	checkEOS(t, e, m, seed, argsA.stateDir, argsB.stateDir)
}
