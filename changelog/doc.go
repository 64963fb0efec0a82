// Package changelog documents and decodes the binary format of kstate's
// changelog records, which is also the format of the local state shards: a
// documented, versioned format that tools outside kstate (a state reader, a
// repair job, an audit) read with DecodeKey and DecodeValue without the
// application's code. Package statereader builds on it to read an
// application's variables and timers by name.
//
// The package is for reading: kstate's engine writes the records with
// encoders of its own (not part of the API), so the format can evolve
// behind FormatVersion. A value of a format version this build does not
// know fails DecodeValue with ErrVersion instead of being misread.
//
// A changelog record is exactly one key/value pair of a partition's state
// shard: the record key is the shard key and the record value is the stored
// value (header + payload). A tombstone (nil value) deletes the key. Because
// every record carries the full new value of one shard key, a compacted
// changelog topic (latest record per key) is the complete truth of the shard,
// and replaying the same records twice yields the same shard.
//
// One key space of the shard is a local index, not in the changelog: the
// per-key timer listing (KindTimerKey). Each of its entries mirrors a timer
// entry (KindTimer) of the same group key and expiry, and a restore writes
// it from that. Changelogs written before December 2026 carry it too, and
// there an entry of it may outlive its timer (its tombstone was not written
// once the index became local): read timers from their KindTimer entries.
//
// Which key spaces the changelog holds is versioned by Layout (1: all of
// them; 2: all but the per-key timer listing). A shard records its layout
// in the metadata entry LayoutMeta, as the first record of the first batch
// it commits in it; a build refuses a newer layout with ErrLayout.
//
// Key layout (all integers big-endian):
//
//	0x00 meta      | name bytes
//	0x01 state     | varID u32 | len(groupKey) u32 | groupKey | suffix
//	                 suffix: ValueState: empty; ListState: seq u64; MapState: encoded user key
//	0x02 timer     | expiry u64 (sign bit flipped) | groupKey             (fire order)
//	0x03 timerKey  | len(groupKey) u32 | groupKey | expiry u64 (flipped)  (per-key listing; local)
//	0x04 ttl       | expiry u64 (flipped) | full state key (kind 0x01)     (TTL index)
//
// Value layout:
//
//	version u8 (=FormatVersion, 1) | flags u8 | schemaID uvarint | [expiry i64 if flags bit 0] | payload
//
// flags bit 0 set: the value has an expiry (TTL), Header.Expiry; other
// bits are never set. The schemaID uvarint is always in its shortest form.
//
// schemaID is the version of the variable's value schema the payload was
// written under: n is the n-th entry of the "schemas" list of the
// variable's registry entry (meta "var/<name>", JSON); 0 is a payload
// written before the registry kept schema versions (then version 1) or by
// a codec without a schema.
//
// A variable declared with state.Packed (registry kind "packed list" or
// "packed map") keeps a grouping key's whole list or map in one value,
// under the state key with an empty suffix; its payload is a sequence of
// items, each uvarint(len) | bytes (DecodePacked splits it):
//
//	packed list: element*            (the encoded values, in list order)
//	packed map:  (user key, value)*  (two items per entry, by encoded user key)
//
// An empty list or map is no value. The header's schemaID applies to every
// element or map value, and a packed value has no expiry.
package changelog
