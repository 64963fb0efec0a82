// Package testlog gives tests an slog.Logger that writes to the test's own
// log, so a passing test stays quiet and a failing one shows the engine's
// messages next to its own.
package testlog

import (
	"bytes"
	"log/slog"
	"sync"
	"testing"
)

// New returns a logger writing text records to t.Output() at Info and above.
func New(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), nil))
}

// Discard returns a logger that drops everything.
func Discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// Buffer is a log sink that several goroutines may write to while a test
// reads what was written (String).
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Warnings returns a logger writing text records at Warn and above to a
// Buffer, for a test that checks what the engine warned about; the
// Buffer's contents go to t's log if t fails.
func Warnings(t testing.TB) (*slog.Logger, *Buffer) {
	var b Buffer
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("log:\n%s", b.String())
		}
	})
	return slog.New(slog.NewTextHandler(&b, &slog.HandlerOptions{Level: slog.LevelWarn})), &b
}
