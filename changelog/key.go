package changelog

import (
	"encoding/binary"
	"fmt"
)

// Kind is the first byte of every shard key; it separates the key spaces.
type Kind byte

const (
	KindMeta     Kind = 0x00
	KindState    Kind = 0x01
	KindTimer    Kind = 0x02 // timers ordered by (expiry, key): for firing
	KindTimerKey Kind = 0x03 // timers ordered by (key, expiry): for listing per key; local to a shard, not changelogged (see the package doc)
	KindTTL      Kind = 0x04 // TTL index ordered by expiry: for cleanup without a full scan
)

func (k Kind) String() string {
	switch k {
	case KindMeta:
		return "meta"
	case KindState:
		return "state"
	case KindTimer:
		return "timer"
	case KindTimerKey:
		return "timerKey"
	case KindTTL:
		return "ttl"
	}
	return fmt.Sprintf("kind(0x%02x)", byte(k))
}

// Key is the decoded form of a shard key. Which fields are set depends on Kind.
type Key struct {
	Kind     Kind
	Name     string // KindMeta
	VarID    uint32 // KindState
	GroupKey []byte // KindState, KindTimer, KindTimerKey
	Suffix   []byte // KindState: empty (value), seq u64 (list), user key (map)
	Expiry   int64  // KindTimer, KindTimerKey, KindTTL
	StateKey []byte // KindTTL: the full KindState key the index entry points at
}

// unflip inverts the encoders' order-preserving map of an int64 to a
// uint64 (sign bit flipped): big-endian, negative timestamps sort first.
func unflip(u uint64) int64 { return int64(u ^ (1 << 63)) }

// DecodeKey parses a shard key. It never panics on arbitrary input; the
// returned slices alias b.
func DecodeKey(b []byte) (Key, error) {
	if len(b) == 0 {
		return Key{}, ErrShortKey
	}
	k := Key{Kind: Kind(b[0])}
	rest := b[1:]
	switch k.Kind {
	case KindMeta:
		k.Name = string(rest)
	case KindState:
		if len(rest) < 8 {
			return Key{}, fmt.Errorf("%w: state key of %d bytes", ErrShortKey, len(b))
		}
		k.VarID = binary.BigEndian.Uint32(rest)
		n := binary.BigEndian.Uint32(rest[4:])
		rest = rest[8:]
		if uint64(n) > uint64(len(rest)) {
			return Key{}, fmt.Errorf("%w: group key length %d exceeds %d remaining bytes", ErrShortKey, n, len(rest))
		}
		k.GroupKey, k.Suffix = rest[:n], rest[n:]
	case KindTimer:
		if len(rest) < 8 {
			return Key{}, fmt.Errorf("%w: timer key of %d bytes", ErrShortKey, len(b))
		}
		k.Expiry = unflip(binary.BigEndian.Uint64(rest))
		k.GroupKey = rest[8:]
	case KindTimerKey:
		if len(rest) < 4 {
			return Key{}, fmt.Errorf("%w: timer key of %d bytes", ErrShortKey, len(b))
		}
		n := binary.BigEndian.Uint32(rest)
		rest = rest[4:]
		if uint64(n)+8 != uint64(len(rest)) {
			return Key{}, fmt.Errorf("%w: timer-by-key length %d does not fit %d remaining bytes", ErrShortKey, n, len(rest))
		}
		k.GroupKey = rest[:n]
		k.Expiry = unflip(binary.BigEndian.Uint64(rest[n:]))
	case KindTTL:
		if len(rest) < 8 {
			return Key{}, fmt.Errorf("%w: ttl key of %d bytes", ErrShortKey, len(b))
		}
		k.Expiry = unflip(binary.BigEndian.Uint64(rest))
		k.StateKey = rest[8:]
		if len(k.StateKey) == 0 || Kind(k.StateKey[0]) != KindState {
			return Key{}, fmt.Errorf("%w: ttl entry does not point at a state key", ErrShortKey)
		}
		// TTL cleanup decodes the pointed-at key to find its variable; a
		// truncated one must fail here, when the index entry is read.
		if _, err := DecodeKey(k.StateKey); err != nil {
			return Key{}, fmt.Errorf("ttl entry points at a bad state key: %w", err)
		}
	default:
		return Key{}, fmt.Errorf("%w: 0x%02x", ErrUnknownKind, b[0])
	}
	return k, nil
}
