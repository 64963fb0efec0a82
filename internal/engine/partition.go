package engine

import "github.com/kstate/kstate/internal/murmur2"

// Murmur2 is Kafka's murmur2 hash (see package murmur2).
func Murmur2(data []byte) int32 { return murmur2.Hash(data) }

// PartitionFor is the partition Kafka's default partitioner chooses for a
// non-nil key among n partitions: toPositive(murmur2(key)) % n.
func PartitionFor(key []byte, n int) int32 { return murmur2.Partition(key, n) }
