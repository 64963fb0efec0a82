package kv

import "errors"

var (
	// ErrClosed is returned by every operation on a store (or on one of its
	// iterators) after the store was closed. Backends shared by several
	// goroutines must return it instead of touching freed resources.
	ErrClosed = errors.New("kv: store is closed")
	// ErrIterClosed is returned by Error on an iterator after its Close.
	ErrIterClosed = errors.New("kv: iterator is closed")
	// ErrInvalidOptions is returned for a contradictory WriteOptions or
	// backend options (e.g. Sync together with DisableWAL).
	ErrInvalidOptions = errors.New("kv: invalid options")
)
