package integration

import (
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstate/kstate/internal/faultdial"
	"github.com/kstate/kstate/internal/testlog"
	"github.com/kstate/kstate/internal/testprocs"
)

// A commit whose EndTxn is cut off on the way, on the real broker (issue
// #28, RELIABILITY.md Finding 3; the kfake variants and the case that
// breaks the check on purpose are in package kstate, unconfirmed_test.go).
// A real coordinator writes the markers after EndTxn returns and answers
// the stable offset fetch UNSTABLE_OFFSET_COMMIT meanwhile: the session's
// check must wait for it.
func TestUnconfirmedCommitRealBroker(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		mode faultdial.Mode
		want string // in the log
	}{
		{"request lost, found aborted", faultdial.LostRequest, "then found aborted"},
		{"answer lost, found committed", faultdial.LostAnswer, "then found committed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newSpecEnv(t, 2)
			cfg := e.config(t, testprocs.NewCounter)
			cut := &faultdial.Cutter{Mode: tc.mode, Refuse: 2 * time.Second}
			// Fewer retries: franz-go gives the EndTxn up while its
			// retries fail, as it does for a longer outage.
			cfg.Kafka.ClientOptions = []kgo.Opt{kgo.Dialer(cut.Dial), kgo.RequestRetries(2)}
			var logs *testlog.Buffer
			cfg.Observability.Logger, logs = testlog.Warnings(t)
			app := newSpecApp(t, cfg)
			_, done := testprocs.StartWatch(t, app)
			const keys = 7
			in := &testprocs.KeyCycler{T: t, Brokers: e.brokers, Topic: e.in, Keys: keys}
			in.Produce(14)
			testprocs.WaitOutputs(t, e.brokers, e.out, in.Sent, waitOut)

			step := func() error { return in.Step(7, 100*time.Millisecond, done) }
			if err := cut.CutDuring(30*time.Second, 15, step); err != nil {
				t.Fatal(err)
			}
			got := testprocs.WaitOutputs(t, e.brokers, e.out, in.Sent, waitOut)
			select {
			case err := <-done:
				t.Fatalf("Run stopped after the cut: %v", err)
			default:
			}
			checkCounts(t, got, in.Sent, keys)
			if cut.Failed() == 0 {
				t.Errorf("no retry failed: franz-go did not retry the cut EndTxn")
			}
			log := logs.String()
			if !strings.Contains(log, tc.want) {
				t.Errorf("the log does not say %q", tc.want)
			}
			rebuilt := strings.Contains(log, "Kafka unreachable: closing the session")
			if tc.mode == faultdial.LostRequest && rebuilt {
				t.Errorf("the session was rebuilt for a commit found aborted")
			}
			t.Logf("%d records in, outputs exact; %d retries failed; session rebuilt: %v", in.Sent, cut.Failed(), rebuilt)
		})
	}
}
