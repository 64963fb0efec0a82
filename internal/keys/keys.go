// Package keys has the range helpers the shard and the timers scan with:
// prefixes and exclusive upper bounds of the key spaces of package
// changelog's format. The format itself (and its encoders and decoders) is
// public in package changelog; these are implementation details of reading
// it efficiently.
package keys

import (
	"encoding/binary"

	"github.com/kstate/kstate/changelog"
	"github.com/kstate/kstate/internal/changelogfmt"
)

// FlipInt64 maps an int64 to a uint64 whose big-endian bytes sort in the
// same order as the signed value (the order of expiries in timer and TTL
// keys, and of the order-preserving state codecs).
func FlipInt64(v int64) uint64 { return uint64(v) ^ (1 << 63) }

// UnflipInt64 is the inverse of FlipInt64.
func UnflipInt64(u uint64) int64 { return int64(u ^ (1 << 63)) }

// KindPrefix returns the one-byte prefix of a key space.
func KindPrefix(k changelog.Kind) []byte { return []byte{byte(k)} }

// StatePrefix returns the key prefix of all entries of variable varID.
func StatePrefix(varID uint32) []byte {
	b := make([]byte, 5)
	b[0] = byte(changelog.KindState)
	binary.BigEndian.PutUint32(b[1:], varID)
	return b
}

// StateKeyPrefix returns the prefix of all entries of variable varID under
// one grouping key: the contiguous range holding that key's state.
func StateKeyPrefix(varID uint32, groupKey []byte) []byte {
	return changelogfmt.StateKey(varID, groupKey, nil)
}

// ListSuffix encodes a list element position (the suffix of a ListState
// element's state key).
func ListSuffix(seq uint64) []byte { return binary.BigEndian.AppendUint64(nil, seq) }

// TimerByKeyPrefix returns the prefix of all timers of one grouping key.
func TimerByKeyPrefix(groupKey []byte) []byte {
	k := changelogfmt.TimerByKey(groupKey, 0)
	return k[:len(k)-8]
}

// TimerUpperBound is the exclusive upper bound of all timer keys with
// expiry ≤ maxExpiry (use with lower bound KindPrefix(KindTimer)).
func TimerUpperBound(maxExpiry int64) []byte { return upperBound(changelog.KindTimer, maxExpiry) }

// TTLUpperBound is the exclusive upper bound of all TTL entries expiring at
// or before t.
func TTLUpperBound(t int64) []byte { return upperBound(changelog.KindTTL, t) }

// upperBound: every key of kind k with expiry ≤ max sorts before the first
// key of max+1.
func upperBound(k changelog.Kind, max int64) []byte {
	if max == 1<<63-1 {
		return []byte{byte(k) + 1}
	}
	b := make([]byte, 9)
	b[0] = byte(k)
	binary.BigEndian.PutUint64(b[1:], FlipInt64(max)+1)
	return b
}

// PrefixEnd returns the smallest key greater than every key with the given
// prefix, or nil when no such key exists (prefix of all 0xff).
func PrefixEnd(prefix []byte) []byte {
	end, ok := AppendPrefixEnd(nil, prefix)
	if !ok {
		return nil
	}
	return end
}

// AppendTimerKey appends changelogfmt.TimerKey(expiry, groupKey) to dst.
func AppendTimerKey(dst []byte, expiry int64, groupKey []byte) []byte {
	dst = append(dst, byte(changelog.KindTimer))
	dst = binary.BigEndian.AppendUint64(dst, FlipInt64(expiry))
	return append(dst, groupKey...)
}

// AppendTimerByKeyPrefix appends TimerByKeyPrefix(groupKey) to dst.
func AppendTimerByKeyPrefix(dst, groupKey []byte) []byte {
	dst = append(dst, byte(changelog.KindTimerKey))
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(groupKey)))
	return append(dst, groupKey...)
}

// AppendTimerByKey appends changelogfmt.TimerByKey(groupKey, expiry) to dst.
func AppendTimerByKey(dst, groupKey []byte, expiry int64) []byte {
	return binary.BigEndian.AppendUint64(AppendTimerByKeyPrefix(dst, groupKey), FlipInt64(expiry))
}

// AppendPrefixEnd appends PrefixEnd(prefix) to dst; ok=false (and dst
// unchanged) when it does not exist.
func AppendPrefixEnd(dst, prefix []byte) (_ []byte, ok bool) {
	for i := len(prefix) - 1; i >= 0; i-- {
		if prefix[i] < 0xff {
			dst = append(dst, prefix[:i+1]...)
			dst[len(dst)-1]++
			return dst, true
		}
	}
	return dst, false
}
