package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/kstate/kstate/kafka/kafkatest"
)

// instanceEnv makes the test binary run the instance mode (its arguments
// in the variable, a JSON array) instead of the tests: the failover
// mode's children are the test binary itself.
const instanceEnv = "KSTATE_FAILOVERBENCH_INSTANCE"

func TestMain(m *testing.M) {
	if env, ok := os.LookupEnv(instanceEnv); ok {
		var args []string
		if err := json.Unmarshal([]byte(env), &args); err != nil || len(args) == 0 {
			fmt.Fprintf(os.Stderr, "%s=%q: %v\n", instanceEnv, env, err)
			os.Exit(2)
		}
		os.Exit(instanceMain(args[1:]))
	}
	selfCommand = func(args ...string) *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		b, _ := json.Marshal(args)
		cmd.Env = append(os.Environ(), instanceEnv+"="+string(b))
		return cmd
	}
	os.Exit(kafkatest.Main(m))
}

func longTest(t *testing.T) {
	t.Helper()
	if os.Getenv("KSTATE_LONG") == "" {
		t.Skip("long test: run with KSTATE_LONG=1 (make test-long)")
	}
}

// What bounds failover, on the real broker, with a 6 s session timeout
// (and a transaction timeout to match): a graceful stop that leaves and a
// restart with the same instance id pause the stopped instance's
// partitions far less than the session timeout; a graceful stop that
// stays in the group, a SIGKILL, and a restart later than the session
// timeout pause them until the session times out. The outputs stay
// exactly once through all five. The numbers of
// docs/BENCHMARKS.md come from the command (main.go); this is their proof
// on every make test-long.
func TestFailoverRealBroker(t *testing.T) {
	longTest(t)
	brokers := kafkatest.Start(t, kafkatest.RequireReal()).Brokers()
	const session = 6 * time.Second
	var log strings.Builder
	rs, err := runFailover(context.Background(), failoverOptions{
		Brokers: brokers, Sessions: []time.Duration{session}, Events: allEvents, Repeats: 1,
		Partitions: 4, Keys: 32, Rate: 200, TxnTimeout: -1, Dir: t.TempDir(), Log: &log,
	})
	t.Log("\n" + log.String())
	if err != nil {
		t.Fatal(err)
	}
	got := make(map[string]eventResult)
	for _, r := range rs {
		got[r.Event] = r
	}
	// The heartbeat interval is a third of the session timeout: the
	// broker sees a member's last heartbeat up to that long before it
	// stops, so its session ends up to that much sooner.
	hb := session / 3
	for _, ev := range []string{evLeave, evRestart} {
		if r := got[ev]; r.StoppedGap() >= session-hb {
			t.Errorf("%s: b's partitions paused %v (resumed %v after the event), want well within the session timeout %v", ev, r.StoppedGap(), r.StoppedResume(), session)
		}
	}
	for _, ev := range []string{evStop, evKill, evLateRestart} {
		r := got[ev]
		if r.StoppedGap() < session-hb || r.StoppedResume() > session+time.Minute {
			t.Errorf("%s: b's partitions paused %v, resumed %v after the event; want about the session timeout %v", ev, r.StoppedGap(), r.StoppedResume(), session)
		}
	}
}

// The protocol mode completes a join and a leave with both group
// protocols on the real broker (the static stop, 45 s with KIP-848, is
// left to the command).
func TestProtocolRealBroker(t *testing.T) {
	longTest(t)
	brokers := kafkatest.Start(t, kafkatest.RequireReal()).Brokers()
	var log strings.Builder
	rs, err := runProtocol(context.Background(), protocolOptions{
		Brokers: brokers, Protocols: []string{protoClassic, protoConsumer}, Members: 3, Partitions: 6, Repeats: 1, Log: &log,
	})
	t.Log("\n" + log.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 4 {
		t.Fatalf("%d results, want a join and a leave per protocol: %+v", len(rs), rs)
	}
}
