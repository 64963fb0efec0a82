package kstate

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// kafkaUnreachableAfter is how long no broker may have answered any of the
// App's Kafka clients before Ready reports Kafka unreachable. A healthy
// application hears from its brokers far more often, even when idle: the
// pipelines' fetches return at least every MaxBatchWait, their group
// heartbeats every 3s at most, and the lag reader asks every lagRefresh.
// A variable for tests.
var kafkaUnreachableAfter = 10 * time.Second

// kafkaReach tracks whether the App's Kafka clients (Run's admin client and
// every pipeline's session, through kafkaHook) still hear from the
// cluster: the time of the last response read from any broker, and the
// last connection or request error since. Readiness uses it (Ready): an
// idle application notices a lost cluster only through it, as franz-go
// retries its fetches and heartbeats silently (docs/ARCHITECTURE.md, "A
// broker that goes away"). It costs one atomic store per response.
type kafkaReach struct {
	lastOK atomic.Int64 // unix ns of the last response read from a broker; 0: not tracking (no Run)
	mu     sync.Mutex
	err    error // the last connection or request error; nil after a response
}

// start begins tracking for a Run: the cluster counts as reachable now.
func (r *kafkaReach) start() {
	r.mu.Lock()
	r.err = nil
	r.mu.Unlock()
	r.lastOK.Store(time.Now().UnixNano())
}

// stop ends tracking (Run returned).
func (r *kafkaReach) stop() { r.lastOK.Store(0) }

// answered notes a response read from a broker.
func (r *kafkaReach) answered() {
	if r.lastOK.Load() == 0 {
		return
	}
	r.lastOK.Store(time.Now().UnixNano())
	r.mu.Lock()
	r.err = nil
	r.mu.Unlock()
}

// failed notes a failed connection or request.
func (r *kafkaReach) failed(err error) {
	r.mu.Lock()
	r.err = err
	r.mu.Unlock()
}

// unreachable returns why Kafka counts as unreachable: no broker has
// answered for kafkaUnreachableAfter or longer (with the last error met
// since); "" when one did, or when no Run tracks.
func (r *kafkaReach) unreachable() string {
	last := r.lastOK.Load()
	if last == 0 {
		return ""
	}
	since := time.Since(time.Unix(0, last))
	if since < kafkaUnreachableAfter {
		return ""
	}
	r.mu.Lock()
	err := r.err
	r.mu.Unlock()
	msg := fmt.Sprintf("Kafka unreachable: no broker has answered for %v", since.Round(time.Second))
	if err != nil {
		msg += fmt.Sprintf(" (last error: %v)", err)
	}
	return msg
}
