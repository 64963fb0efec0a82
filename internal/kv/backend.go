package kv

import (
	"errors"
	"fmt"
	"os"
)

// Backend names a persistent Store implementation.
type Backend string

const (
	// BackendRocksDB is RocksDB through cgo (grocksdb): the default of
	// builds with cgo.
	BackendRocksDB Backend = "rocksdb"
	// BackendPebble is Pebble (pure Go): the default of builds without cgo
	// (CGO_ENABLED=0 or the kstate_nocgo build tag), where RocksDB is not
	// compiled in.
	BackendPebble Backend = "pebble"
)

// ErrBackendUnavailable is returned when opening a backend that this binary
// was built without (RocksDB in a cgo-free build).
var ErrBackendUnavailable = errors.New("kv: store backend not compiled into this binary")

// TestBackendEnv names the environment variable that, when set to a backend
// name, replaces DefaultBackend: tests run the engine's suites against
// Pebble with KSTATE_TEST_STATE_BACKEND=pebble. Not meant for production:
// applications choose with kstate.Options.State.Backend.
const TestBackendEnv = "KSTATE_TEST_STATE_BACKEND"

// DefaultBackend is the backend used when none is chosen: RocksDB when it is
// compiled in, else Pebble; TestBackendEnv overrides it.
func DefaultBackend() Backend {
	if b := Backend(os.Getenv(TestBackendEnv)); b != "" {
		return b
	}
	if RocksDBAvailable {
		return BackendRocksDB
	}
	return BackendPebble
}

// Check returns nil when b is a known backend compiled into this binary.
func (b Backend) Check() error {
	switch b {
	case BackendPebble:
		return nil
	case BackendRocksDB:
		if !RocksDBAvailable {
			return fmt.Errorf("%w: %q (built without cgo, or with the kstate_nocgo tag); use %q", ErrBackendUnavailable, b, BackendPebble)
		}
		return nil
	}
	return fmt.Errorf("%w: unknown store backend %q, want %q or %q", ErrInvalidOptions, string(b), BackendRocksDB, BackendPebble)
}

// Subdir is the directory, inside a shard directory, that holds the store.
func (b Backend) Subdir() string { return string(b) }

// OpenBackend opens (creating by default) the store of backend b in dir,
// as a shard's store: a RocksDB store has RocksOptions.InsertHints (so a
// DeleteRange must start at an empty key or one beginning with 0x00).
// memory may be nil; readOnly means what it means in RocksOptions and
// PebbleOptions (a missing store is then an error).
func OpenBackend(b Backend, dir string, memory *SharedMemory, readOnly bool) (Store, error) {
	if err := b.Check(); err != nil {
		return nil, err
	}
	if b == BackendPebble {
		return OpenPebble(dir, PebbleOptions{Memory: memory, ReadOnly: readOnly})
	}
	return OpenRocksDB(dir, RocksOptions{Memory: memory, ReadOnly: readOnly, InsertHints: true})
}
