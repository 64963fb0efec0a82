package kstate_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/kstate/kstate/internal/testprocs"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/state"
)

// dropSeen is the Counter's next release: it drops the "seen" variable.
type dropSeen struct{ testprocs.Counter }

func (d *dropSeen) Init(h processor.Handle) error { return h.DeleteIfExists("seen") }

// Spark's TransformWithStateSuite: with stateSchemaFilesThreshold 1, a
// restart whose processor deletes countState fails with
// STATE_STORE_STATE_SCHEMA_FILES_THRESHOLD_EXCEEDED (2 schema files, max
// 1). kstate: Options.State.MaxVariableSetVersions 1, a release that drops a
// variable fails at start-up with state.ErrTooManyVariableSetVersions
// naming the variable and the limit; with a limit of 2 it starts.
func TestEmbeddedVariableSetVersionsBounded(t *testing.T) {
	brokers := startEmbedded(t, 1)
	cfg := config(brokers, t.TempDir(), testprocs.NewCounter)
	cfg.State.MaxVariableSetVersions = 1
	stop := testprocs.Start(t, newApp(t, cfg))
	testprocs.Produce(t, brokers, "in", "a=x")
	testprocs.WaitOutputs(t, brokers, "out", 1, 20*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	cfg.NewProcessor = func() processor.StatefulProcessor[string, string, string] { return &dropSeen{} }
	_, done := testprocs.StartWatch(t, newApp(t, cfg))
	select {
	case err := <-done:
		if !errors.Is(err, state.ErrTooManyVariableSetVersions) || !strings.Contains(err.Error(), `dropping the variable "seen"`) ||
			!strings.Contains(err.Error(), "version 2") || !strings.Contains(err.Error(), "limit of 1") {
			t.Fatalf("Run: %v, want ErrTooManyVariableSetVersions naming \"seen\", version 2 and the limit 1", err)
		}
		t.Logf("Run: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not fail")
	}

	cfg.State.MaxVariableSetVersions = 2
	app := newApp(t, cfg)
	stop = testprocs.Start(t, app)
	testprocs.Eventually(t, 30*time.Second, "the partition started (Init ran)", func() bool {
		st := app.Status()
		return len(st.Partitions) == 1 && !st.Partitions[0].Restoring
	})
	if err := stop(); err != nil {
		t.Fatalf("Run with a limit of 2: %v", err)
	}
}
