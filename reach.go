package kstate

import (
	"fmt"
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
// broker that goes away"). It costs a clock read and an atomic store per response.
type kafkaReach struct {
	lastOK  atomic.Int64          // reachNow of the last response read from a broker; 0: not tracking (no Run)
	lastErr atomic.Pointer[error] // the last connection or request error since; nil after a response
}

// reachEpoch is the zero of reachNow.
var reachEpoch = time.Now()

// reachNow is the monotonic time since reachEpoch (a wall-clock step does
// not fake an outage), at least 1.
func reachNow() int64 { return int64(time.Since(reachEpoch)) + 1 }

// start begins tracking for a Run: the cluster counts as reachable now.
func (r *kafkaReach) start() {
	r.lastErr.Store(nil)
	r.lastOK.Store(reachNow())
}

// stop ends tracking (Run returned).
func (r *kafkaReach) stop() { r.lastOK.Store(0) }

// answered notes a response read from a broker.
func (r *kafkaReach) answered() {
	if r.lastOK.Load() == 0 {
		return
	}
	r.lastOK.Store(reachNow())
	if r.lastErr.Load() != nil {
		r.lastErr.Store(nil)
	}
}

// failed notes a failed connection or request.
func (r *kafkaReach) failed(err error) { r.lastErr.Store(&err) }

// unreachable returns why Kafka counts as unreachable: no broker has
// answered for kafkaUnreachableAfter or longer (with the last error met
// since); "" when one did, or when no Run tracks.
func (r *kafkaReach) unreachable() string {
	last := r.lastOK.Load()
	if last == 0 {
		return ""
	}
	since := time.Duration(reachNow() - last)
	if since < kafkaUnreachableAfter {
		return ""
	}
	msg := fmt.Sprintf("Kafka unreachable: no broker has answered for %v", since.Round(time.Second))
	if err := r.lastErr.Load(); err != nil {
		msg += fmt.Sprintf(" (last error: %v)", *err)
	}
	return msg
}
