package kstatetest

import (
	"github.com/kstate/kstate"
	"github.com/kstate/kstate/internal/engine/enginetest"
)

// ErrCrashed is matched (errors.Is) by RunBatch's error after Crash killed
// the application.
var ErrCrashed = enginetest.ErrCrashed

// faults are the failures a test injects.
type faults[K, O any] struct{}

// wrap lets the faults reach into the application's Config.
func (f *faults[K, O]) wrap(cfg any) {}

// release ends every injected failure still waiting.
func (f *faults[K, O]) release() {}

var _ = kstate.ErrFenced
