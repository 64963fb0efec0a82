// Package engine runs a StatefulProcessor on one input partition: the
// partition Task owns the partition's state shard, timers and processor
// instance and turns a slice of polled records into one micro-batch of
// output records and changelog records. It knows nothing about Kafka: the
// root package kstate polls, produces, commits the transaction and then
// tells each task to Commit or Abort.
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
