// Package changelogfmt writes kstate's changelog record format: the shard
// keys and stored values the engine writes, which are also its changelog
// records. The format is documented, and decoded, by the public package
// changelog (its doc has the layout); the encoders live here so that the
// format can evolve behind changelog.FormatVersion without an encoder
// being public API. Every encoder's output decodes with changelog's
// DecodeKey or DecodeValue to what it was built from (the round-trip tests
// and fuzzers in changelog/ check it).
package changelogfmt

import (
	"encoding/binary"
	"strconv"

	"github.com/kstate/kstate/changelog"
)

// FlagExpiry marks a value that carries an expiry timestamp (TTL).
const FlagExpiry = 1 << 0

// flip maps an int64 to a uint64 whose big-endian bytes sort in the same
// order as the signed value (negative timestamps sort first); changelog's
// decoders undo it.
func flip(v int64) uint64 { return uint64(v) ^ (1 << 63) }

// MetaKey returns the shard key of a metadata entry.
func MetaKey(name string) []byte {
	b := make([]byte, 0, 1+len(name))
	return append(append(b, byte(changelog.KindMeta)), name...)
}

// stateKeyPrefix returns the prefix of all entries of variable varID under
// one grouping key: the contiguous range holding that key's state.
func stateKeyPrefix(varID uint32, groupKey []byte) []byte {
	b := make([]byte, 9, 9+len(groupKey)+8)
	b[0] = byte(changelog.KindState)
	binary.BigEndian.PutUint32(b[1:], varID)
	binary.BigEndian.PutUint32(b[5:], uint32(len(groupKey)))
	return append(b, groupKey...)
}

// StateKey returns the key of one state entry.
func StateKey(varID uint32, groupKey, suffix []byte) []byte {
	return append(stateKeyPrefix(varID, groupKey), suffix...)
}

// TimerKey returns the (expiry, key) ordered timer index key.
func TimerKey(expiry int64, groupKey []byte) []byte {
	b := make([]byte, 9, 9+len(groupKey))
	b[0] = byte(changelog.KindTimer)
	binary.BigEndian.PutUint64(b[1:], flip(expiry))
	return append(b, groupKey...)
}

// timerByKeyPrefix returns the prefix of all timers of one grouping key.
func timerByKeyPrefix(groupKey []byte) []byte {
	b := make([]byte, 5, 5+len(groupKey)+8)
	b[0] = byte(changelog.KindTimerKey)
	binary.BigEndian.PutUint32(b[1:], uint32(len(groupKey)))
	return append(b, groupKey...)
}

// TimerByKey returns the (key, expiry) ordered timer index key.
func TimerByKey(groupKey []byte, expiry int64) []byte {
	return binary.BigEndian.AppendUint64(timerByKeyPrefix(groupKey), flip(expiry))
}

// TTLKey returns the TTL index key for a state entry expiring at expiry.
func TTLKey(expiry int64, stateKey []byte) []byte {
	b := make([]byte, 9, 9+len(stateKey))
	b[0] = byte(changelog.KindTTL)
	binary.BigEndian.PutUint64(b[1:], flip(expiry))
	return append(b, stateKey...)
}

// AppendValue appends the encoded header and payload to dst, in format
// version changelog.FormatVersion.
func AppendValue(dst []byte, h changelog.Header, payload []byte) []byte {
	var flags byte
	if h.Expiry != changelog.NoExpiry {
		flags |= FlagExpiry
	}
	dst = append(dst, changelog.FormatVersion, flags)
	dst = binary.AppendUvarint(dst, uint64(h.SchemaID))
	if flags&FlagExpiry != 0 {
		dst = binary.BigEndian.AppendUint64(dst, uint64(h.Expiry))
	}
	return append(dst, payload...)
}

// EncodeValue returns header + payload in a new slice.
func EncodeValue(h changelog.Header, payload []byte) []byte {
	return AppendValue(make([]byte, 0, 12+len(payload)), h, payload)
}

// LayoutEntry returns the metadata entry that records the changelog layout
// this build writes: changelog.LayoutMeta = changelog.Layout in decimal.
func LayoutEntry() (key, value []byte) {
	return MetaKey(changelog.LayoutMeta), []byte(strconv.Itoa(changelog.Layout))
}

// ParseLayout decodes the value of a changelog.LayoutMeta entry; ok is
// false when it is not a decimal number.
func ParseLayout(v []byte) (n int, ok bool) {
	n, err := strconv.Atoi(string(v))
	return n, err == nil
}
