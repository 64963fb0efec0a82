// Package timers describes kstate's durable per-key timers.
//
// A processor registers, deletes and lists the timers of the grouping key
// in progress through its processor.Handle (RegisterTimer, DeleteTimer,
// ListTimers). A timer is a (grouping key, expiry ms) pair:
//
//   - registering an existing timer and deleting a missing one are no-ops;
//   - a timer is expired when expiry <= threshold, the batch's processing
//     time (ProcessingTime mode) or its event-time watermark (EventTime);
//   - expired timers fire after all HandleInputRows calls of the batch, in
//     (expiry, key) order, even for keys that receive no more rows; a timer
//     registered for a past time fires in the same batch;
//   - a fired timer is deleted once HandleExpiredTimer returned;
//   - timers are durable state: they are changelogged with the batch and
//     survive restarts, rebalances and failover.
//
// Outside a processor, a test lists timers with kstatetest's Driver.Timers
// and a tool with package statereader (Reader.Timers, `kstate state
// timers`). The package has no identifiers: the API is processor.Handle's.
package timers
