package kv

import (
	"errors"
	"strings"
	"syscall"

	"github.com/cockroachdb/pebble/v2"
)

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

// IsCorrupt reports whether err, from opening or reading a store, says
// that its files are damaged: RocksDB's Corruption status (a truncated or
// inconsistent MANIFEST, a block that fails its checksum, a table file the
// MANIFEST lists and the directory lacks) or Pebble's corruption errors.
// An I/O error (disk full, permissions, a missing directory) is not
// corruption: the files may be fine once it is fixed.
func IsCorrupt(err error) bool {
	return err != nil && (pebble.IsCorruptionError(err) || strings.Contains(err.Error(), "Corruption: "))
}

// IsStoreFailure reports whether err says the store itself failed, as
// opposed to the data a caller asked for: a closed store, damaged files
// (IsCorrupt), or an I/O error of the machine (RocksDB's "IO error:"
// status, or a disk errno: EIO, ENOSPC, EDQUOT, EROFS). Such an error is
// not a record's fault: retrying the record elsewhere or later may succeed.
// Other errnos (a handler's refused connection, say) are not the store's.
func IsStoreFailure(err error) bool {
	if err == nil {
		return false
	}
	return errors.Is(err, ErrClosed) || IsCorrupt(err) || strings.Contains(err.Error(), "IO error: ") ||
		errors.Is(err, syscall.EIO) || errors.Is(err, syscall.ENOSPC) ||
		errors.Is(err, syscall.EDQUOT) || errors.Is(err, syscall.EROFS)
}
