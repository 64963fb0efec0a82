package shard

import (
	"errors"

	"github.com/kstate/kstate/state"
)

func varErr(kind, name, op string, err error) error {
	if err == nil {
		return nil
	}
	var ve *state.VarError
	if errors.As(err, &ve) && ve.Var == name && ve.Op == op {
		return err
	}
	return &state.VarError{Kind: kind, Var: name, Op: op, Err: err}
}

func shardErr(op string, err error) error { return varErr("Shard", "", op, err) }

func schemaOf(c any) string {
	if sc, ok := c.(state.SchemaCodec); ok {
		return sc.Schema()
	}
	return ""
}

// Errors of the shard protocol (the engine's misuse, never a processor's).
var (
	// ErrEmptyValue is returned by Shard.Put and PutMeta for an empty value: a
	// Kafka changelog cannot tell it from a tombstone.
	ErrEmptyValue = errors.New("state: empty value (a changelog cannot tell it from a tombstone; use Delete)")
	// ErrFinished is returned by a mutation after Finish produced the batch's changelog records.
	ErrFinished = errors.New("state: batch already finished (no mutations after Finish)")
	// ErrNotFinished is returned by Commit before Finish: the batch's changes
	// would reach the local store without having been written to the changelog.
	ErrNotFinished = errors.New("state: batch not finished (call Finish and commit its records to the changelog before Commit)")
	// ErrNoBatchTime is returned when a variable with a TTL is written in a
	// batch that has no processing time (Begin(-1)).
	ErrNoBatchTime = errors.New("state: TTL variable written in a batch without processing time")
	// ErrRestoreAfterDeclare is returned by ApplyChangelog and Wipe once state
	// variables were declared: restore must run before Init.
	ErrRestoreAfterDeclare = errors.New("state: restore after state variables were declared (restore the shard before Init)")
	// ErrInBatch is returned by ApplyChangelog, Wipe and Begin while a batch is open.
	ErrInBatch = errors.New("state: batch in progress")
)

// Provider is implemented by the engine's processor.Handle: it gives the
// state variable constructors of package processor the task's shard.
type Provider interface {
	StateShard() *Shard
}
