// Package rescale rebuilds a stopped application's state for more input
// partitions: it reads application A's changelog (the compaction view,
// read_committed), re-routes every grouping key's entries to the partition
// Kafka's default partitioner gives the key among N partitions, merges the
// metadata every partition needs, and writes the result as the changelog of
// a new application B together with B's committed input offsets, so that B
// continues exactly where A stopped (kstate state rescale).
//
// Build is the pure part (entries in, entries per new partition out);
// Run adds the safety checks and the Kafka reads and writes.
package rescale
