// Package murmur2 is Kafka's default partitioner: the one implementation
// behind the engine's routing (outputs, initial state) and the producer of
// internal/kafka, so keys land where Kafka's Java client puts them.
package murmur2

// Hash is Kafka's murmur2 hash (org.apache.kafka.common.utils.Utils.murmur2),
// the hash of the Java client's default partitioner and of franz-go's
// StickyKeyPartitioner.
func Hash(data []byte) int32 {
	const (
		seed = uint32(0x9747b28c)
		m    = uint32(0x5bd1e995)
		r    = 24
	)
	n := len(data)
	h := seed ^ uint32(n)
	for i := 0; i+4 <= n; i += 4 {
		k := uint32(data[i]) | uint32(data[i+1])<<8 | uint32(data[i+2])<<16 | uint32(data[i+3])<<24
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
	}
	tail := n &^ 3
	switch n % 4 {
	case 3:
		h ^= uint32(data[tail+2]) << 16
		fallthrough
	case 2:
		h ^= uint32(data[tail+1]) << 8
		fallthrough
	case 1:
		h ^= uint32(data[tail])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return int32(h)
}

// Partition is the partition Kafka's default partitioner chooses for a
// non-nil key among n partitions: toPositive(murmur2(key)) % n.
func Partition(key []byte, n int) int32 {
	return (Hash(key) & 0x7fffffff) % int32(n)
}
