// Package kafka (internal/kafka) is, with kafka/embedded, the only non-test
// package of kstate that imports a Kafka client (franz-go). Everything above it — the engine, processors, state —
// speaks the project's own types (Record, Partition, offsets), so the client
// can be upgraded or replaced without touching them.
//
// What it offers:
//
//   - Session: the exactly-once consume-transform-produce loop of one group
//     member (kgo.GroupTransactSession). Its state machine is
//     Poll* → Begin → Produce* → End(commit|abort). End commits the produced
//     records together with the offsets of everything polled since the last
//     End; an abort — asked for, or forced by a rebalance — rewinds
//     consumption to the last committed offsets so the same records are
//     polled again.
//   - Admin: topic creation and validation (changelog topics), offsets.
//   - PartitionReader: read one partition, read_committed, from an offset up
//     to the last stable offset captured at open (changelog restore).
//   - Producer and ReadAll: plain producing and reading for tests, demos and
//     output checks.
package kafka
