// Package state holds kstate's per-partition state: the Shard (a store plus
// the staging layer of the batch in progress), codecs, and the typed state
// variables ValueState, ListState and MapState with optional TTL.
//
// # Batches and staging
//
// Every mutation of a batch is staged in memory (reads see it) and reaches
// the store only at Commit, in one atomic write together with the next
// changelog offset; Finish returns the same changes as changelog records,
// which the engine commits to Kafka first. Local state therefore never runs
// ahead of the changelog, and a crash between the Kafka commit and the
// local Commit is repaired by replaying the changelog tail from
// ChangelogOffset (ApplyChangelog is idempotent).
//
// State variables operate on the current grouping key (SetCurrentKey) and
// only inside a batch (ErrNoBatch otherwise). Reading absent state returns
// ok=false (or an empty sequence), never a made-up default.
//
// # Declarations
//
// Variables are declared only while the engine has opened the declaration
// window (SetDeclaring, around the processor's Init). Each is recorded in a
// registry in the shard's metadata ("var/<name>": id, kind, schema, TTL),
// so ids are stable across restarts and a changed kind is a clear error.
// Registry writes are staged until the next Commit and survive aborted
// batches. Restore (ApplyChangelog, Wipe) must run before declarations.
//
// # TTL
//
// With ShardOptions.AllowTTL (ProcessingTime mode), WithTTL(d) gives every
// entry an expiry of batch time + d; an entry with expiry <= batch time is
// invisible to reads at once and is tombstoned by Finish through a TTL
// index, without scanning the state. ValueState has one expiry, reset by
// Update; every ListState element and MapState entry has its own.
//
// # Key layout
//
// See package changelog: a value is stored under StateKey(id, key, nil), a
// list element under StateKey(id, key, seq u64), a map entry under
// StateKey(id, key, encoded user key). Map iteration follows the encoded
// key bytes, which is natural order for the built-in order-preserving
// integer and float codecs and byte order for strings.
package state
