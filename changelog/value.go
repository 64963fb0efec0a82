package changelog

import (
	"encoding/binary"
	"fmt"
)

// FormatVersion is the current value format version.
const FormatVersion = 1

// Layout is the version of the shard's key spaces and of which of them the
// changelog holds, as this build writes them and the newest it reads:
//
//	1: every key space is in the changelog (kstate before December 2026;
//	   such a changelog has no LayoutMeta entry)
//	2: the per-key timer listing (KindTimerKey) is local: a restore writes
//	   it from the timer entries (KindTimer)
//
// A shard records its layout in the metadata entry LayoutMeta, in the
// first batch it commits in a layout it did not record yet; the entry is
// the first record of that batch, before any record written in the new
// layout. A build refuses, with ErrLayout, a shard or changelog whose
// recorded layout is newer than its own, so that it does not misread it.
const Layout = 2

// LayoutMeta is the name of the metadata entry (KindMeta) that records a
// shard's Layout, as a decimal number ("2"). It sorts before the engine's
// and the variable registry's entries ("engine/…", "var/…").
const LayoutMeta = "changelog/layout"

// flagExpiry marks a value that carries an expiry timestamp (TTL).
const flagExpiry = 1 << 0

// NoExpiry is the Expiry of a value without TTL.
const NoExpiry = int64(-1)

// Header is the decoded stored-value header.
type Header struct {
	SchemaID uint32 // schema version of the payload (see the package doc); 0 = none recorded
	Expiry   int64  // ms since epoch; NoExpiry when the value has no TTL
}

// DecodeValue splits a stored value into its header and payload (aliasing b).
// It never panics on arbitrary input.
func DecodeValue(b []byte) (Header, []byte, error) {
	if len(b) < 3 {
		return Header{}, nil, fmt.Errorf("%w: %d bytes", ErrBadValue, len(b))
	}
	if b[0] != FormatVersion {
		return Header{}, nil, fmt.Errorf("%w: %d (this build reads %d)", ErrVersion, b[0], FormatVersion)
	}
	flags := b[1]
	if flags&^flagExpiry != 0 {
		return Header{}, nil, fmt.Errorf("%w: unknown flags 0x%02x", ErrBadValue, flags)
	}
	id, n := binary.Uvarint(b[2:])
	if n <= 0 || id > 1<<32-1 {
		return Header{}, nil, fmt.Errorf("%w: bad schema id", ErrBadValue)
	}
	if n > 1 && b[2+n-1] == 0 {
		// An overlong varint (trailing 0x00 group) would decode to the same
		// header as the canonical form: two byte strings, one value. Only the
		// canonical form is ever written, so anything else is corruption.
		return Header{}, nil, fmt.Errorf("%w: non-canonical schema id varint", ErrBadValue)
	}
	h := Header{SchemaID: uint32(id), Expiry: NoExpiry}
	rest := b[2+n:]
	if flags&flagExpiry != 0 {
		if len(rest) < 8 {
			return Header{}, nil, fmt.Errorf("%w: truncated expiry", ErrBadValue)
		}
		h.Expiry = int64(binary.BigEndian.Uint64(rest))
		if h.Expiry == NoExpiry {
			return Header{}, nil, fmt.Errorf("%w: expiry flag with no-expiry value", ErrBadValue)
		}
		rest = rest[8:]
	}
	return h, rest, nil
}

// Record is one changelog record: a shard key and its new value, or a
// tombstone when Value is nil. Offset and TimestampMs are set on records
// read from Kafka.
type Record struct {
	Key    []byte
	Value  []byte
	Offset int64
	// TimestampMs is the Kafka record's timestamp in Unix milliseconds (0:
	// unknown). A restore records the last one with its offset: the
	// changelog's compaction may drop a tombstone delete.retention.ms after
	// it, so a store that resumes from an offset older than that restores
	// in full (docs/OPERATIONS.md, "Long outages").
	TimestampMs int64
}

// Tombstone reports whether the record deletes its key.
func (r Record) Tombstone() bool { return r.Value == nil }

// DecodePacked splits the payload of a packed list or map value (see the
// package doc) into its items, aliasing payload: a list's encoded
// elements, or a map's encoded user keys and values alternately. It never
// panics on arbitrary input.
func DecodePacked(payload []byte) ([][]byte, error) {
	var out [][]byte
	for len(payload) > 0 {
		n, w := binary.Uvarint(payload)
		if w <= 0 || n > uint64(len(payload)-w) {
			return nil, fmt.Errorf("%w: packed item %d overruns the value", ErrBadValue, len(out))
		}
		end := w + int(n)
		out, payload = append(out, payload[w:end:end]), payload[end:]
	}
	return out, nil
}
