// Package timers implements kstate's durable per-key timers on top of a
// state.Shard.
//
// A timer is a (grouping key, expiry ms) pair. It is stored twice, both
// entries changelogged and staged with the batch like any state change:
// under changelog.TimerKey(expiry, key), so Expired walks timers in firing
// order (expiry, then key bytes) without a scan of all timers, and under
// changelog.TimerByKey(key, expiry), so List returns one key's timers.
// Registering an existing timer and deleting a missing one are no-ops.
// Timers fire when expiry <= threshold; the engine deletes each fired timer
// after its handler returned.
package timers
