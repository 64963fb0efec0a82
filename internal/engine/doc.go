// Package engine runs a StatefulProcessor as an exactly-once consumer
// group member. It has two parts:
//
//   - The Coordinator (coordinator.go, round.go, slots.go, restore.go) owns
//     the poll loop, the transaction of every micro-batch, the partition
//     slots of rebalances, restore orchestration (including the wait for
//     the commit markers of the previous owner) and initial-state routing.
//     It is not generic and reaches Kafka only through the Session, Admin
//     and Changelog interfaces and time only through Clock (ports.go), so
//     package enginetest can drive it deterministically in memory. It must
//     not import internal/kafka: package kstate adapts that one.
//   - The partition Task (task.go, batch.go, emit.go) owns the partition's
//     state shard, timers and processor instance and turns a slice of
//     polled records into one micro-batch of output records and changelog
//     records; the coordinator sees it as a TaskHandle.
//
// One batch of a task, in order:
//
//	Begin(batch time)                 shard starts staging (reads see staged writes)
//	Init                              first batch only (or after an aborted first batch)
//	record metadata                   fresh shard only: time mode, output mode
//	HandleInitialState per row        first run only
//	decode, drop late rows, group by key (first-appearance order; offset order within a key)
//	HandleInputRows per key
//	fire expired timers               snapshot once; (expiry, key) order; skip deleted ones
//	advance watermark                 EventTime: max event time − allowed lateness
//	Finish                            TTL cleanup + staged changes as changelog records
//
// then, after the caller's transaction: Commit(next changelog offset) or Abort().
// Everything a batch changes in memory (watermark, batch id, counters) is
// kept pending until Commit, so an aborted batch is retried from exactly the
// same starting point.
package engine
