package kstate

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kstate/kstate/internal/engine"
)

// Run's errors are this package's types, whatever the engine wrapped.
func TestPublicError(t *testing.T) {
	fenced := publicError(fmt.Errorf("kstate: commit transaction: %w", fmt.Errorf("kafka: x: %w", engine.ErrFenced)))
	if !errors.Is(fenced, ErrFenced) {
		t.Fatalf("%v: not ErrFenced", fenced)
	}
	inner := errors.New("inner")
	var ue *UserError
	if err := publicError(fmt.Errorf("kstate: %w", &engine.UserError{Method: "HandleInputRows", Key: `"a"`, Partition: 3, Err: inner})); !errors.As(err, &ue) ||
		ue.Partition != 3 || ue.Method != "HandleInputRows" || !errors.Is(err, inner) {
		t.Fatalf("%v: want a UserError wrapping inner", err)
	}
	var de *DecodeError
	if err := publicError(&engine.DecodeError{Topic: "in", Partition: 1, Offset: 7, Part: "value", Err: inner}); !errors.As(err, &de) || de.Offset != 7 {
		t.Fatalf("%v: want a DecodeError", err)
	}
	var me *ModeError
	if err := publicError(&engine.ModeError{Partition: 2, What: "time mode", Old: "NoTime", New: "EventTime"}); !errors.As(err, &me) || me.Old != "NoTime" {
		t.Fatalf("%v: want a ModeError", err)
	}
	var se *StuckError
	if err := publicError(fmt.Errorf("kstate: %w", &engine.StuckError{Partition: 4, Method: "HandleInputRows", Key: `"k"`, For: time.Minute, Limit: engine.LimitMaxBatch})); !errors.As(err, &se) ||
		se.Partition != 4 || se.Key != `"k"` || se.For != time.Minute || !errors.Is(err, ErrStuck) ||
		err.Error() != `kstate: partition 4: HandleInputRows(key "k") did not return within MaxBatchDuration (1m0s): the instance gave its partitions up `+
			`and nothing of the batch was committed; find why the call blocks (the log has its stack), or raise MaxBatchDuration if batches are legitimately this slow` {
		t.Fatalf("%v: want a StuckError matching ErrStuck", err)
	}
	var pc *PartitionsChangedError
	if err := publicError(fmt.Errorf("kstate: %w", &engine.PartitionsChangedError{Topic: "in", Changelog: "app-changelog", Old: 3, New: 5})); !errors.As(err, &pc) ||
		pc.Topic != "in" || pc.Old != 3 || pc.New != 5 || !strings.Contains(err.Error(), "Changing the number of input partitions") {
		t.Fatalf("%v: want a PartitionsChangedError 3 → 5 naming the procedure", err)
	}
	var cl *ChangelogLostError
	if err := publicError(fmt.Errorf("kstate: %w", &engine.ChangelogLostError{Changelog: "app-changelog", Partition: 1, ShardDir: "/s/app/1", Committed: 60, HasCommitted: true})); !errors.As(err, &cl) ||
		cl.Partition != 1 || cl.Committed != 60 || !strings.Contains(err.Error(), "delete /s/app/1") {
		t.Fatalf("%v: want a ChangelogLostError naming the shard path", err)
	}
	if publicError(nil) != nil {
		t.Fatal("nil error changed")
	}
}
