// Package runtime is what turns a kstate application into running
// coordinators, apart from the Kafka client: the ports the coordinators
// run on (Ports), the pipelines of one Run seen as one (PipelineSet), the
// barrier at which they close their sessions together (CloseBarrier), and
// the hook through which package kstatetest runs an *kstate.App on
// in-memory ports (RunApp).
//
// Package kstate's App.Run fills Ports with adapters over internal/kafka;
// kstatetest fills them with internal/engine/enginetest's in-memory broker,
// sessions and a manual clock. Everything else — validation, defaults, the
// application → engine mapping, the task factory, the pipelines and the mapping
// of the engine's errors to the public ones — is the one path of App.Run.
package runtime

import (
	"context"
	"errors"
	"time"

	"github.com/kstate/kstate/internal/engine"
	"github.com/kstate/kstate/internal/initial"
	"github.com/kstate/kstate/internal/kv"
)

// Ports are what a Run's coordinators talk to. App.Run builds the Kafka
// ones; a test driver passes its own to RunApp.
type Ports struct {
	Admin     engine.Admin
	Changelog engine.Changelog
	Clock     engine.Clock
	// NewSession joins the group as the static member instance. The
	// session stops leaving the group on shutdown once stayIn (if not nil)
	// returns true; closeJoinGrace is the Kafka session's CloseJoinGrace
	// (0: its default).
	NewSession func(instance string, stayIn func() bool, closeJoinGrace time.Duration) (engine.Session, error)
	// CheckTopics is the coordinator's extra start-up check. Optional.
	CheckTopics func(ctx context.Context) error

	// The rest is for test drivers; the zero values are App.Run's.

	// Backend returns partition p's shard store (it survives the shard's
	// Close). Nil: a shard directory under Options.State.Dir.
	Backend func(p int32) kv.Store
	// ReadTopic reads an initial-state topic. Nil: from Kafka.
	ReadTopic initial.ReadTopic
	// RunID names the run in QueryInfo; "": a random one.
	RunID string
	// Test: one pipeline, one fixed poll size (MaxBatchRecords), a
	// TriggerInterval of 1ns (every poll after the clock moved is a
	// ProcessingTime trigger), no deferred first batch, write-through
	// local commits, no lag refresh.
	Test bool
	// KillHook is the coordinator's KillHook (crash tests); nil: the one
	// of the Run ctx (engine.WithKillHook).
	KillHook engine.KillHook
	// Started, if set, is called with the Run's coordinators once they are
	// built, before they run.
	Started func(coords []*engine.Coordinator)
}

// TestMaxBatchRecords is the poll size of Ports.Test: a test driver's
// batch takes everything queued.
const TestMaxBatchRecords = 1 << 20

// RunApp runs app (an *kstate.App) on ports until ctx is cancelled or an
// error stops it, as App.Run does on Kafka. Package kstate sets it in its
// init; it fails for any other value.
var RunApp = func(ctx context.Context, app any, ports Ports) error {
	return errors.New("runtime: package kstate is not linked in")
}
