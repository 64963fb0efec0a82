// Package testlog gives tests an slog.Logger that writes to the test's own
// log, so a passing test stays quiet and a failing one shows the engine's
// messages next to its own.
package testlog

import (
	"log/slog"
	"testing"
)

// New returns a logger writing text records to t.Output() at Info and above.
func New(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), nil))
}

// Discard returns a logger that drops everything.
func Discard() *slog.Logger { return slog.New(slog.DiscardHandler) }
