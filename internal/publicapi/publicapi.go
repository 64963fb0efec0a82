// Package publicapi hands the root package's conversions to the other
// public packages (kstatetest) without exporting them from the root: the
// root sets the functions in its init, so they are set whenever package
// kstate is linked, which every user of them imports.
package publicapi

import "github.com/kstate/kstate/internal/engine"

// Counters converts the engine's counters to the public kstate.Counters
// (returned as any: this package cannot import the root).
var Counters func(engine.Counters) any
