package shard

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/kstate/kstate/changelog"
	"github.com/kstate/kstate/internal/changelogfmt"
	"github.com/kstate/kstate/internal/keys"
	"github.com/kstate/kstate/state"
)

// Variable kinds as recorded in the registry.
const (
	kindValue = "value"
	kindList  = "list"
	kindMap   = "map"
)

// Meta names of the variable registry: "var/<name>" holds a registryEntry
// (JSON); nextVarIDMeta holds the next id to allocate (u32 big-endian). Ids
// are never reused, so data of a dropped variable can never be read as
// another variable's.
const (
	varMetaPrefix = "var/"
	nextVarIDMeta = "varid/next"
)

// VarSetMeta is the meta name holding how many versions the set of
// declared variables has had (u32 big-endian; see varSetChanged). Absent
// on a fresh shard, and on a shard written before it existed: then the
// set it holds counts as version 1.
const VarSetMeta = "varset/versions"

type registryEntry struct {
	ID        uint32 `json:"id"`
	Kind      string `json:"kind"`
	Schema    string `json:"schema,omitempty"`
	KeySchema string `json:"keySchema,omitempty"`
	TTLMs     int64  `json:"ttlMs,omitempty"`
	// Schemas is the value schema history (version n is Schemas[n-1]) and
	// SchemaID the version of Schema, the one declared last; entries written
	// before the history existed have neither (see normalize).
	Schemas  []string `json:"schemas,omitempty"`
	SchemaID uint32   `json:"schemaId,omitempty"`
}

// VarInfo describes a declared state variable, as recorded in the shard.
type VarInfo struct {
	Name      string
	ID        uint32
	Kind      string // "value", "list", "map", "packed list" or "packed map" (state.Packed)
	Schema    string // value schema (codec's state.SchemaCodec.Schema, or empty)
	KeySchema string // MapState key schema
	TTL       time.Duration
	// Schemas is every value schema the variable was declared with, oldest
	// first: a stored value whose header has SchemaID n was written under
	// Schemas[n-1] (n == 0: under Schemas[0] when there is a history, else
	// by a codec without a schema). Avro schemas are
	// state.AvroSchemaPrefix followed by the schema's JSON.
	Schemas []string
	// SchemaID is the version of Schema (0 without a schema).
	SchemaID uint32
}

// SetDeclaring opens (true) or closes (false) the declaration window: the
// engine opens it only around the processor's Init. Opening it starts a new
// set of names for duplicate detection.
func (s *Shard) SetDeclaring(on bool) {
	if on && !s.declaring {
		s.declared = make(map[string]bool)
		s.setCounted = false
	}
	s.declaring = on
}

// varBase is the part shared by all state variable types.
type varBase struct {
	s    *Shard
	kind string // "ValueState", "ListState", "MapState"
	name string
	id   uint32
	ttl  int64 // ms; 0 = no TTL
	// schemaID is the value schema version written into every value's
	// header; schemas the history a decoder resolves older values with.
	schemaID uint32
	schemas  []string
	// kbuf is reused by stateKey: building a state key allocates nothing.
	kbuf []byte
	// pbuf and ebuf are reused by scanBounds.
	pbuf, ebuf []byte
}

// scanBounds returns prefix() and keys.PrefixEnd(prefix()) in buffers reused
// by the next call: only for a scan or lookup that does not keep them past
// its return (never for a range the shard records, like deleteRange's).
func (b *varBase) scanBounds() (prefix, end []byte) {
	p := b.appendHead(b.pbuf[:0])
	// The header's kind byte is below 0xff, so the end always exists.
	e, _ := keys.AppendPrefixEnd(b.ebuf[:0], p)
	b.pbuf, b.ebuf = p, e
	return p, e
}

// keyHead returns the state key of the current grouping key without a
// suffix in kbuf; the caller appends the suffix and stores the result back
// in kbuf (see stateKey).
func (b *varBase) keyHead() []byte { return b.appendHead(b.kbuf[:0]) }

// appendHead appends the state key prefix of the variable and the current
// grouping key (changelogfmt.StateKey without a suffix) to dst.
func (b *varBase) appendHead(dst []byte) []byte {
	dst = append(dst, byte(changelog.KindState))
	dst = binary.BigEndian.AppendUint32(dst, b.id)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(b.s.key)))
	return append(dst, b.s.key...)
}

// stateKey returns changelogfmt.StateKey(b.id, current grouping key, suffix)
// in a buffer reused by the next call: it is valid until then, and the
// shard copies what it keeps (staging, cache, TTL index keys).
func (b *varBase) stateKey(suffix []byte) []byte {
	k := append(b.keyHead(), suffix...)
	b.kbuf = k
	return k
}

// declare validates a declaration and records it in the registry.
func (s *Shard) declare(typeName, kind, name, schema, keySchema string, codecs []any, opts []state.Option) (varBase, error) {
	op := "New" + typeName
	fail := func(err error) (varBase, error) { return varBase{}, varErr(typeName, name, op, err) }
	switch {
	case s.closed:
		return fail(state.ErrClosed)
	case !s.declaring:
		return fail(state.ErrNotDeclaring)
	case s.inBatch && s.finished:
		return fail(ErrFinished)
	case name == "":
		return fail(errors.New("state: empty state variable name"))
	case s.declared[name]:
		return fail(state.ErrDuplicate)
	}
	for _, c := range codecs {
		if c == nil || (reflect.ValueOf(c).Kind() == reflect.Pointer && reflect.ValueOf(c).IsNil()) {
			return fail(errors.New("state: nil codec"))
		}
		if se, ok := c.(schemaErrorer); ok && se.SchemaError() != nil {
			return fail(se.SchemaError())
		}
	}
	var o state.Options
	for _, opt := range opts {
		opt(&o)
	}
	if o.HasTTL {
		if !s.opts.AllowTTL {
			return fail(state.ErrTTLNotAllowed)
		}
		if o.TTL < time.Millisecond {
			return fail(fmt.Errorf("%w, got %v", state.ErrBadTTL, o.TTL))
		}
	}
	if o.Packed {
		switch {
		case kind != kindPackedList && kind != kindPackedMap:
			return fail(errors.New("state: Packed applies to ListState and MapState only"))
		case o.HasTTL:
			return fail(errPackedTTL)
		}
	}
	maxVersions := o.MaxSchemaVersions
	switch {
	case maxVersions < 0:
		return fail(fmt.Errorf("state: WithMaxSchemaVersions(%d): want at least 1", maxVersions))
	case maxVersions == 0:
		maxVersions = state.DefaultMaxSchemaVersions
	}
	want := registryEntry{Kind: kind, Schema: schema, KeySchema: keySchema, TTLMs: o.TTL.Milliseconds()}
	old, found, err := s.registryEntry(name)
	if err != nil {
		return fail(err)
	}
	if found {
		if old.Kind != kind {
			return fail(fmt.Errorf("%w: %q was a %s state, now declared as a %s state: declare it under a new name "+
				"(and drop the old data once with DeleteIfExists(%q) in Init, in a release that no longer declares %q)",
				state.ErrKindChanged, name, old.Kind, kind, name, name))
		}
		if err := checkTTL(name, old.TTLMs, want.TTLMs); err != nil {
			return fail(err)
		}
		want.ID = old.ID
		stored := old
		old.normalize()
		if err := checkKeySchema(name, old.KeySchema, keySchema); err != nil {
			return fail(err)
		}
		if want.Schemas, want.SchemaID, err = evolveSchemas(name, old, schema, maxVersions); err != nil {
			return fail(err)
		}
		old = stored
	} else {
		if err := s.varSetChanged("declaring the new variable", name); err != nil {
			return fail(err)
		}
		if want.ID, err = s.allocVarID(); err != nil {
			return fail(err)
		}
		if schema != "" {
			want.Schemas, want.SchemaID = []string{schema}, 1
		}
	}
	if !found || !reflect.DeepEqual(want, old) {
		b, _ := json.Marshal(want)
		s.stageWrite(changelogfmt.MetaKey(varMetaPrefix+name), b, true)
	}
	s.declared[name] = true
	s.declaredAny = true
	return varBase{s: s, kind: typeName, name: name, id: want.ID, ttl: want.TTLMs, schemaID: want.SchemaID, schemas: want.Schemas}, nil
}

func (s *Shard) registryEntry(name string) (registryEntry, bool, error) {
	v, ok, err := s.get(changelogfmt.MetaKey(varMetaPrefix + name))
	if err != nil || !ok {
		return registryEntry{}, false, err
	}
	var e registryEntry
	if err := json.Unmarshal(v, &e); err != nil || e.ID == 0 {
		return registryEntry{}, false, fmt.Errorf("%w: registry entry of %q: %q", state.ErrCorrupt, name, v)
	}
	return e, true, nil
}

// varSetChanged counts a change of the set of declared variables: an Init
// that declares a variable the registry lacks or drops one it has makes the
// set's next version, once per Init however many it adds or drops (Spark
// writes one state schema file per such start). The first version is the
// first Init that declares anything. A change past the bound
// (ShardOptions.MaxVariableSetVersions) is refused before anything is
// staged, so the start fails and nothing is written. A variable an Init
// merely stops declaring keeps its data and is no change: kstate drops data
// only on DeleteIfExists (Spark counts it as removed).
func (s *Shard) varSetChanged(what, name string) error {
	if s.setCounted {
		return nil
	}
	key := changelogfmt.MetaKey(VarSetMeta)
	v, ok, err := s.get(key)
	if err != nil {
		return err
	}
	var n uint32
	switch {
	case ok && len(v) != 4:
		return fmt.Errorf("%w: %s of %d bytes", state.ErrCorrupt, VarSetMeta, len(v))
	case ok:
		n = binary.BigEndian.Uint32(v)
	default:
		// Fresh, or written before the count existed: a registry that holds
		// variables is version 1.
		prefix := changelogfmt.MetaKey(varMetaPrefix)
		if err := s.scan(prefix, keys.PrefixEnd(prefix), func(_, _ []byte) bool { n = 1; return false }); err != nil {
			return err
		}
	}
	limit := s.opts.MaxVariableSetVersions
	if limit == 0 {
		limit = state.DefaultMaxVariableSetVersions
	}
	if limit > 0 && int64(n) >= int64(limit) {
		return fmt.Errorf("%w: %s %q would make version %d of the application's set of state variables, over the limit of %d "+
			"(Options.State.MaxVariableSetVersions, default %d like Spark's stateSchemaFilesThreshold): raise the limit, "+
			"or add and drop variables in fewer releases",
			state.ErrTooManyVariableSetVersions, what, name, n+1, limit, state.DefaultMaxVariableSetVersions)
	}
	s.stageWrite(key, binary.BigEndian.AppendUint32(nil, n+1), true)
	s.setCounted = true
	return nil
}

func (s *Shard) allocVarID() (uint32, error) {
	key := changelogfmt.MetaKey(nextVarIDMeta)
	id := uint32(1)
	v, ok, err := s.get(key)
	if err != nil {
		return 0, err
	}
	if ok {
		if len(v) != 4 {
			return 0, fmt.Errorf("%w: next variable id of %d bytes", state.ErrCorrupt, len(v))
		}
		id = binary.BigEndian.Uint32(v)
	}
	if id == 1<<32-1 {
		return 0, errors.New("state: out of variable ids")
	}
	s.stageWrite(key, binary.BigEndian.AppendUint32(nil, id+1), true)
	return id, nil
}

// DeleteIfExists drops a state variable and all its data (every grouping
// key, TTL index entries included) and its registry entry; it is a no-op
// when the variable does not exist. Only during Init, and not for a name
// declared in the same Init.
func (s *Shard) DeleteIfExists(name string) error {
	fail := func(err error) error { return varErr("Shard", name, "DeleteIfExists", err) }
	switch {
	case s.closed:
		return fail(state.ErrClosed)
	case !s.declaring:
		return fail(state.ErrNotDeclaring)
	case s.inBatch && s.finished:
		return fail(ErrFinished)
	case s.declared[name]:
		return fail(errors.New("state: variable was declared in this Init; drop it before declaring it"))
	}
	e, found, err := s.registryEntry(name)
	if err != nil || !found {
		return fail(err)
	}
	if err := s.varSetChanged("dropping the variable", name); err != nil {
		return fail(err)
	}
	type entry struct {
		key    []byte
		expiry int64
	}
	var doomed []entry
	prefix := keys.StatePrefix(e.ID)
	var decodeErr error
	err = s.scan(prefix, keys.PrefixEnd(prefix), func(k, v []byte) bool {
		h, _, err := changelog.DecodeValue(v)
		if err != nil {
			decodeErr = fmt.Errorf("%w: key %x: %w", state.ErrCorrupt, k, err)
			return false
		}
		doomed = append(doomed, entry{cloneBytes(k), h.Expiry})
		return true
	})
	if err == nil {
		err = decodeErr
	}
	if err != nil {
		return fail(err)
	}
	for _, d := range doomed {
		if d.expiry != changelog.NoExpiry {
			s.stageWrite(changelogfmt.TTLKey(d.expiry, d.key), nil, true)
		}
		s.stageWrite(d.key, nil, true)
	}
	s.stageWrite(changelogfmt.MetaKey(varMetaPrefix+name), nil, true)
	s.declaredAny = true
	return nil
}

// ParseVarInfo decodes one registry entry as stored in the shard and the
// changelog: key is the full meta key (changelogfmt.MetaKey("var/"+name)),
// value its value. ok is false for meta keys that are not registry
// entries. Readers outside the engine (the state reader) use it.
func ParseVarInfo(key, value []byte) (v VarInfo, ok bool, err error) {
	prefix := changelogfmt.MetaKey(varMetaPrefix)
	if len(key) <= len(prefix) || string(key[:len(prefix)]) != string(prefix) {
		return VarInfo{}, false, nil
	}
	var e registryEntry
	if err := json.Unmarshal(value, &e); err != nil || e.ID == 0 {
		return VarInfo{}, true, fmt.Errorf("%w: registry entry %q: %q", state.ErrCorrupt, key, value)
	}
	return e.info(strings.TrimPrefix(string(key[1:]), varMetaPrefix)), true, nil
}

func (e registryEntry) info(name string) VarInfo {
	e.normalize()
	return VarInfo{
		Name: name, ID: e.ID, Kind: e.Kind,
		Schema: e.Schema, KeySchema: e.KeySchema, TTL: time.Duration(e.TTLMs) * time.Millisecond,
		Schemas: e.Schemas, SchemaID: e.SchemaID,
	}
}

// Variables lists the registered state variables (staged declarations
// included), ordered by name.
func (s *Shard) Variables() ([]VarInfo, error) {
	if s.closed {
		return nil, shardErr("Variables", state.ErrClosed)
	}
	prefix := changelogfmt.MetaKey(varMetaPrefix)
	var out []VarInfo
	var decodeErr error
	err := s.scan(prefix, keys.PrefixEnd(prefix), func(k, v []byte) bool {
		info, _, err := ParseVarInfo(k, v)
		if err != nil {
			decodeErr = err
			return false
		}
		out = append(out, info)
		return true
	})
	if err == nil {
		err = decodeErr
	}
	return out, shardErr("Variables", err)
}

// Name is the variable's name.
func (b *varBase) Name() string { return b.name }

// check validates that the variable may run op now.
func (b *varBase) check(op string, write bool) error {
	s := b.s
	var err error
	switch {
	case s.closed:
		err = state.ErrClosed
	case !s.inBatch:
		err = state.ErrNoBatch
	case write && s.finished:
		err = ErrFinished
	case !s.hasKey:
		err = state.ErrNoKey
	default:
		return nil
	}
	return b.err(op, err)
}

func (b *varBase) err(op string, err error) error {
	err = varErr(b.kind, b.name, op, err)
	if err != nil {
		b.s.noteOversize(err)
	}
	return err
}

// prefix is the key range of the variable's entries under the current key.
func (b *varBase) prefix() []byte { return keys.StateKeyPrefix(b.id, b.s.key) }

// newExpiry is the expiry of an entry written now.
func (b *varBase) newExpiry() (int64, error) {
	if b.ttl == 0 {
		return changelog.NoExpiry, nil
	}
	if b.s.batchTime < 0 {
		return 0, ErrNoBatchTime
	}
	return b.s.batchTime + b.ttl, nil
}

// nilable reports whether values of T can be nil (pointers, interfaces),
// so writes must check them.
func nilable[T any]() bool {
	k := reflect.TypeFor[T]().Kind()
	return k == reflect.Pointer || k == reflect.Interface
}

func isNil[T any](v T) bool {
	rv := reflect.ValueOf(&v).Elem()
	return (rv.Kind() == reflect.Pointer || rv.Kind() == reflect.Interface) && rv.IsNil()
}
