package kstatetest

import (
	"errors"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/internal/engine"
)

// ErrNoTopic is returned when Topology.InitialState reads a topic the driver
// was not given with InitialTopic.
var ErrNoTopic = errors.New("kstatetest: initial state topic not given")

// publicError gives the engine's typed errors the types kstate.App.Run
// returns (kstate.UserError, DecodeError, ModeError), as the root package's
// facade does for Run.
func publicError(err error) error {
	var (
		ue *engine.UserError
		de *engine.DecodeError
		me *engine.ModeError
		pc *engine.PartitionsChangedError
	)
	switch {
	case err == nil:
		return nil
	case errors.As(err, &pc):
		return &kstate.PartitionsChangedError{Topic: pc.Topic, Changelog: pc.Changelog, Old: pc.Old, New: pc.New}
	case errors.As(err, &ue):
		return &kstate.UserError{Method: ue.Method, Key: ue.Key, Partition: ue.Partition, Err: ue.Err, Panic: ue.Panic, Stack: ue.Stack}
	case errors.As(err, &de):
		return &kstate.DecodeError{Topic: de.Topic, Partition: de.Partition, Offset: de.Offset, Part: de.Part, Err: de.Err}
	case errors.As(err, &me):
		return &kstate.ModeError{Partition: me.Partition, What: me.What, Old: me.Old, New: me.New}
	}
	return err
}
