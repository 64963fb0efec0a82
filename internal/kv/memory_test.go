package kv_test

import (
	"testing"

	"github.com/kstate/kstate/internal/kv"
	"github.com/kstate/kstate/internal/kv/kvtest"
)

// The memory backend ignores dir, so the suite detects it as in-memory and
// skips the reopen and checkpoint-reopen subtests.
func TestMemoryConformance(t *testing.T) {
	kvtest.RunConformance(t, func(t *testing.T, dir string) kv.Store {
		s := kv.NewMemory()
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}
