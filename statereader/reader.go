// Package statereader reads a kstate application's state without the
// application's Go types and without a running application: straight from
// its changelog topic ("<ApplicationID>-changelog", read_committed, no
// local files needed) or from its local state directory (kstate.Options.State.Dir,
// RocksDB opened read-only).
//
// A Reader takes a snapshot when it is opened: from the changelog, every
// partition up to the last stable offset captured at open, the last value of
// each key winning and tombstones deleting (the view compaction converges
// to); from a state directory, the RocksDB contents as of the open. Either
// works while the application runs, and shows committed state only. With
// AtBatch, OpenChangelog reads one partition as of one of its batches
// (time travel, while the changelog still holds that history; see
// BatchNotReadableError).
//
// Values are decoded with the codec schema recorded when the variable was
// declared (state.SchemaCodec): int64, int32, int, uint64, float64, float32,
// bool and string become JSON numbers, booleans and strings; "json:…"
// codecs give their JSON as is; bytes give a base64 JSON string; state.Avro
// values become JSON objects (bytes as base64, a nullable field as its
// value or null). Each value is decoded with the schema version its header
// names in the variable's schema history, so rows written before a schema
// change read as they were written. A value
// whose schema has no decoder (a custom codec without a schema, or an
// unknown schema) is printed as a base64 JSON string and its Entry has
// ValueEncoding "base64" (MapKeyEncoding for map keys): the documented
// fallback. WithDecoders plugs decoders for more schemas in.
//
// Grouping keys are the application's key bytes (kstate.Topology.KeySerde): a Key is
// that string when the bytes are valid UTF-8, else their base64 with
// KeyEncoding "base64".
package statereader

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstate/kstate/changelog"
	"github.com/kstate/kstate/internal/changelogfmt"
	"github.com/kstate/kstate/internal/shard"
)

// ErrVariableNotFound is returned by Read for a variable that no partition
// declares. Check the name with Metadata (kstate state metadata).
var ErrVariableNotFound = errors.New("statereader: variable not found")

// Decoder turns a stored payload (the codec's bytes, header removed) into
// JSON.
type Decoder func(payload []byte) (json.RawMessage, error)

// Option configures Open*.
type Option func(*options)

type options struct {
	kafkaOpts []kgo.Opt
	progress  func(read, total int64)
	decoders  func(schema string) Decoder
	at        *atBatch // AtBatch
}

// WithKafkaOptions adds client options (TLS, SASL, timeouts) to the
// changelog reader's Kafka clients.
func WithKafkaOptions(opts ...kgo.Opt) Option {
	return func(o *options) { o.kafkaOpts = append(o.kafkaOpts, opts...) }
}

// WithProgress calls fn while reading the changelog, with the records read so
// far and the total to read (an upper bound: offsets of transaction markers
// and compacted records count in the total only). It is called from the
// opening goroutine, every 250ms and once at the end.
func WithProgress(fn func(read, total int64)) Option {
	return func(o *options) { o.progress = fn }
}

// WithDecoders adds decoders looked up by schema string before the built-in
// ones (the seam for Avro and other schema-carrying codecs); lookup returns
// nil for schemas it does not know.
func WithDecoders(lookup func(schema string) Decoder) Option {
	return func(o *options) { o.decoders = lookup }
}

// Variable is a declared state variable.
type Variable struct {
	Name      string `json:"name"`
	Kind      string `json:"kind"` // "value", "list", "map", "packed list" or "packed map"
	Schema    string `json:"schema,omitempty"`
	KeySchema string `json:"keySchema,omitempty"` // map keys
	// Schemas is the value schema history, oldest first (Schema is the
	// last); empty for a codec without a schema.
	Schemas []string      `json:"schemas,omitempty"`
	TTL     time.Duration `json:"-"` // written as ttlMs
	// Partitions is how many partitions declare it (a partition that never
	// ran a batch has declared nothing).
	Partitions int `json:"partitions"`
}

// MarshalJSON writes TTL in milliseconds.
func (v Variable) MarshalJSON() ([]byte, error) {
	type plain Variable
	p := struct {
		plain
		TTL int64 `json:"ttlMs,omitempty"`
	}{plain(v), v.TTL.Milliseconds()}
	return json.Marshal(p)
}

// PartitionMeta is the engine metadata of one partition. Pointer fields are
// nil when the partition has not stored them (yet).
type PartitionMeta struct {
	Partition  int32  `json:"partition"`
	TimeMode   string `json:"timeMode,omitempty"`
	OutputMode string `json:"outputMode,omitempty"`
	// BatchID is the id of the partition's last committed batch, the id
	// its sinks received for it (processor.QueryInfo().BatchID during it):
	// ids start at 0 and count the partition's batches that processed
	// rows or fired timers. Nil before the first such batch. (The shard
	// stores the id of the next batch, "engine/batch_id"; this is one
	// less, like Spark's state metadata maxBatchId.)
	BatchID *int64 `json:"batchId,omitempty"`
	// Watermark and LateWatermark are event-time watermarks in ms since
	// the epoch.
	Watermark     *int64 `json:"watermarkMs,omitempty"`
	LateWatermark *int64 `json:"lateWatermarkMs,omitempty"`
	// InputOffset is the input offset after the last committed batch.
	// With several input topics it is the first topic's, and
	// InputOffsets holds the others' by topic name.
	InputOffset         *int64           `json:"inputOffset,omitempty"`
	InputOffsets        map[string]int64 `json:"inputOffsets,omitempty"`
	InitialStateApplied bool             `json:"initialStateApplied,omitempty"`
	// Entries is the number of live keys (state, timers, metadata).
	Entries int `json:"entries"`
}

// Metadata is what an application's state declares.
type Metadata struct {
	ApplicationID string          `json:"applicationId"`
	Source        string          `json:"source"` // the topic or directory read
	Variables     []Variable      `json:"variables"`
	Partitions    []PartitionMeta `json:"partitions"`
}

// Entry is one stored state value: a ValueState value, one ListState
// element or one MapState entry.
type Entry struct {
	Partition   int32  `json:"partition"`
	Key         string `json:"key"`
	KeyEncoding string `json:"keyEncoding,omitempty"` // "base64" when the key bytes are not UTF-8
	Variable    string `json:"variable"`
	Kind        string `json:"kind"`
	// Index is the position of a list element (0 first).
	Index *int `json:"index,omitempty"`
	// MapKey is a map entry's key, decoded with the key schema.
	MapKey         json.RawMessage `json:"mapKey,omitempty"`
	MapKeyEncoding string          `json:"mapKeyEncoding,omitempty"`
	Value          json.RawMessage `json:"value"`
	ValueEncoding  string          `json:"valueEncoding,omitempty"` // "base64": no decoder for the schema
	// ExpiryMs is the TTL expiry (ms since the epoch), when the variable
	// has a TTL. An entry past its expiry that the application has not
	// removed yet is still listed.
	ExpiryMs *int64 `json:"expiryMs,omitempty"`
}

// KeyBytes returns the grouping key's bytes (undoing KeyEncoding).
func (e Entry) KeyBytes() ([]byte, error) { return decodeKeyString(e.Key, e.KeyEncoding) }

// Timer is one registered timer.
type Timer struct {
	Partition   int32  `json:"partition"`
	Key         string `json:"key"`
	KeyEncoding string `json:"keyEncoding,omitempty"`
	ExpiryMs    int64  `json:"expiryMs"`
	Expiry      string `json:"expiry"` // RFC 3339, UTC, with milliseconds
}

// Query narrows Read and Timers. The zero value selects everything.
type Query struct {
	// Key, when non-nil, selects one grouping key (the app's key bytes).
	Key []byte
	// Partitions, when non-empty, selects these partitions.
	Partitions []int32
	// Limit, when positive, stops after that many results.
	Limit int
}

type kvPair struct {
	k string // the changelog key (a string: the map's key, not copied)
	v []byte
}

type part struct {
	id   int32
	data []kvPair // sorted by key
	vars map[string]shard.VarInfo
	byID map[uint32]shard.VarInfo
}

// Reader is a snapshot of an application's state.
type Reader struct {
	app    string
	source string
	parts  []*part // by partition
	o      options
	dec    decoders
}

func newReader(app, source string, o options, raw map[int32]map[string][]byte) (*Reader, error) {
	r := &Reader{app: app, source: source, o: o}
	ids := make([]int32, 0, len(raw))
	for p := range raw {
		ids = append(ids, p)
	}
	slices.Sort(ids)
	for _, p := range ids {
		m := raw[p]
		pt := &part{id: p, vars: map[string]shard.VarInfo{}, byID: map[uint32]shard.VarInfo{}}
		pt.data = make([]kvPair, 0, len(m))
		for k, v := range m {
			pt.data = append(pt.data, kvPair{k, v})
		}
		slices.SortFunc(pt.data, func(a, b kvPair) int { return strings.Compare(a.k, b.k) })
		if v, ok := pt.meta(changelog.LayoutMeta); ok {
			if n, ok := changelogfmt.ParseLayout(v); !ok || n > changelog.Layout {
				return nil, fmt.Errorf("statereader: partition %d records changelog layout %q, and this build reads layouts up to %d: a newer kstate wrote it; read it with that version: %w",
					p, v, changelog.Layout, changelog.ErrLayout)
			}
		}
		for _, e := range pt.rangeOf(changelogfmt.MetaKey("var/")) {
			info, ok, err := shard.ParseVarInfo([]byte(e.k), e.v)
			if err != nil {
				return nil, fmt.Errorf("statereader: partition %d: %w", p, err)
			}
			if ok {
				pt.vars[info.Name] = info
				pt.byID[info.ID] = info
			}
		}
		r.parts = append(r.parts, pt)
	}
	return r, nil
}

// rangeOf returns the entries whose key starts with prefix.
func (p *part) rangeOf(prefix []byte) []kvPair {
	pre := string(prefix)
	i := sort.Search(len(p.data), func(i int) bool { return p.data[i].k >= pre })
	j := i
	for j < len(p.data) && strings.HasPrefix(p.data[j].k, pre) {
		j++
	}
	return p.data[i:j]
}

func (p *part) meta(name string) ([]byte, bool) {
	k := changelogfmt.MetaKey(name)
	i := sort.Search(len(p.data), func(i int) bool { return p.data[i].k >= string(k) })
	if i < len(p.data) && p.data[i].k == string(k) {
		return p.data[i].v, true
	}
	return nil, false
}

func (p *part) metaInt(name string) *int64 {
	b, ok := p.meta(name)
	if !ok || len(b) != 8 {
		return nil
	}
	v := int64(binary.BigEndian.Uint64(b))
	return &v
}

// metaNextBatch is the engine metadata holding the id of a partition's
// next batch (engine.MetaBatchID): the number of its batches that
// processed rows or fired timers. Its meaning is kept as it is stored by
// every release, so that sink batch ids (used for idempotence) never
// change across an upgrade; readers subtract one.
const metaNextBatch = "engine/batch_id"

// lastBatch converts a stored next-batch id into the last committed
// batch's id: nil when none committed.
func lastBatch(next *int64) *int64 {
	if next == nil || *next <= 0 {
		return nil
	}
	v := *next - 1
	return &v
}

// Metadata returns the variables and the engine metadata per partition.
func (r *Reader) Metadata() Metadata {
	md := Metadata{ApplicationID: r.app, Source: r.source, Variables: []Variable{}, Partitions: []PartitionMeta{}}
	vars := map[string]*Variable{}
	for _, p := range r.parts {
		pm := PartitionMeta{Partition: p.id, Entries: len(p.data)}
		if b, ok := p.meta("engine/time_mode"); ok {
			pm.TimeMode = string(b)
		}
		if b, ok := p.meta("engine/output_mode"); ok {
			pm.OutputMode = string(b)
		}
		pm.BatchID = lastBatch(p.metaInt(metaNextBatch))
		pm.Watermark = p.metaInt("engine/watermark")
		pm.LateWatermark = p.metaInt("engine/late_watermark")
		pm.InputOffset = p.metaInt("engine/input_offset")
		pm.InputOffsets = p.inputOffsets()
		_, pm.InitialStateApplied = p.meta("engine/initial_state_applied")
		md.Partitions = append(md.Partitions, pm)
		for name, info := range p.vars {
			v, ok := vars[name]
			if !ok {
				v = &Variable{Name: name, Kind: info.Kind, Schema: info.Schema, KeySchema: info.KeySchema, Schemas: info.Schemas, TTL: info.TTL}
				vars[name] = v
			}
			v.Partitions++
		}
	}
	for _, v := range vars {
		md.Variables = append(md.Variables, *v)
	}
	slices.SortFunc(md.Variables, func(a, b Variable) int { return compareStrings(a.Name, b.Name) })
	return md
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func (r *Reader) selected(q Query) []*part {
	if len(q.Partitions) == 0 {
		return r.parts
	}
	var out []*part
	for _, p := range r.parts {
		if slices.Contains(q.Partitions, p.id) {
			out = append(out, p)
		}
	}
	return out
}

// Read returns the entries of variable in partition, key and then position
// order (list elements in list order, map entries in map key byte order).
// It fails with ErrVariableNotFound when no partition declares it.
func (r *Reader) Read(variable string, q Query) ([]Entry, error) {
	found := false
	var out []Entry
	for _, p := range r.parts {
		if _, ok := p.vars[variable]; ok {
			found = true
		}
	}
	if !found {
		return nil, fmt.Errorf("%w: %q (application %q, %s)", ErrVariableNotFound, variable, r.app, r.source)
	}
	for _, p := range r.selected(q) {
		info, ok := p.vars[variable]
		if !ok {
			continue
		}
		var err error
		out, err = r.appendVar(out, p, info, q)
		if err != nil {
			return nil, err
		}
		if q.Limit > 0 && len(out) >= q.Limit {
			return out[:q.Limit], nil
		}
	}
	return out, nil
}

// ReadAll returns the entries of every variable, ordered by partition,
// variable name, key and position: what `kstate state export` writes.
func (r *Reader) ReadAll(q Query) ([]Entry, error) {
	var out []Entry
	for _, p := range r.selected(q) {
		names := make([]string, 0, len(p.vars))
		for n := range p.vars {
			names = append(names, n)
		}
		slices.Sort(names)
		for _, n := range names {
			var err error
			if out, err = r.appendVar(out, p, p.vars[n], q); err != nil {
				return nil, err
			}
			if q.Limit > 0 && len(out) >= q.Limit {
				return out[:q.Limit], nil
			}
		}
	}
	return out, nil
}

func (r *Reader) appendVar(out []Entry, p *part, info shard.VarInfo, q Query) ([]Entry, error) {
	prefix := []byte{byte(changelog.KindState)}
	prefix = binary.BigEndian.AppendUint32(prefix, info.ID)
	if q.Key != nil {
		prefix = binary.BigEndian.AppendUint32(prefix, uint32(len(q.Key)))
		prefix = append(prefix, q.Key...)
	}
	var lastKey []byte
	index := 0
	for _, e := range p.rangeOf(prefix) {
		k, err := changelog.DecodeKey([]byte(e.k))
		if err != nil {
			return nil, fmt.Errorf("statereader: partition %d variable %q: %w", p.id, info.Name, err)
		}
		if q.Key != nil && !bytes.Equal(k.GroupKey, q.Key) {
			continue
		}
		h, payload, err := changelog.DecodeValue(e.v)
		if err != nil {
			return nil, fmt.Errorf("statereader: partition %d variable %q key %q: %w", p.id, info.Name, k.GroupKey, err)
		}
		if shard.IsPackedKind(info.Kind) {
			if out, err = r.appendPacked(out, p, info, k.GroupKey, h, payload); err != nil {
				return nil, err
			}
			if q.Limit > 0 && len(out) >= q.Limit {
				return out[:q.Limit], nil
			}
			continue
		}
		ent := Entry{Partition: p.id, Variable: info.Name, Kind: info.Kind}
		ent.Key, ent.KeyEncoding = encodeKey(k.GroupKey)
		ent.Value, ent.ValueEncoding = r.decode(writerSchema(info, h.SchemaID), payload)
		if h.Expiry != changelog.NoExpiry {
			x := h.Expiry
			ent.ExpiryMs = &x
		}
		if !bytes.Equal(lastKey, k.GroupKey) {
			lastKey, index = k.GroupKey, 0
		}
		switch info.Kind {
		case "list":
			i := index
			ent.Index = &i
		case "map":
			ent.MapKey, ent.MapKeyEncoding = r.decode(info.KeySchema, k.Suffix)
		}
		index++
		out = append(out, ent)
		if q.Limit > 0 && len(out) >= q.Limit {
			break
		}
	}
	return out, nil
}

// appendPacked appends the elements (or map entries) of one key's packed
// list (or map) value, in stored order.
func (r *Reader) appendPacked(out []Entry, p *part, info shard.VarInfo, group []byte, h changelog.Header, payload []byte) ([]Entry, error) {
	items, err := changelog.DecodePacked(payload)
	if err == nil && info.Kind == "packed map" && len(items)%2 != 0 {
		err = fmt.Errorf("%w: a packed map value with a key and no value", changelog.ErrBadValue)
	}
	if err != nil {
		return nil, fmt.Errorf("statereader: partition %d variable %q key %q: %w", p.id, info.Name, group, err)
	}
	key, keyEnc := encodeKey(group)
	schema := writerSchema(info, h.SchemaID)
	for i := 0; i < len(items); i++ {
		ent := Entry{Partition: p.id, Variable: info.Name, Kind: info.Kind, Key: key, KeyEncoding: keyEnc}
		if info.Kind == "packed map" {
			ent.MapKey, ent.MapKeyEncoding = r.decode(info.KeySchema, items[i])
			i++
		} else {
			idx := i
			ent.Index = &idx
		}
		ent.Value, ent.ValueEncoding = r.decode(schema, items[i])
		out = append(out, ent)
	}
	return out, nil
}

// Timers returns the registered timers, by partition, key and expiry.
//
// It reads the timer entries (changelog.KindTimer, in expiry order), not
// the per-key index (changelog.KindTimerKey), which is local to a shard:
// changelogs written since December 2026 do not carry it, and in older ones
// an entry of it may outlive its timer.
func (r *Reader) Timers(q Query) ([]Timer, error) {
	var out []Timer
	for _, p := range r.selected(q) {
		type timer struct {
			order []byte // changelogfmt.TimerByKey: by key, then expiry
			key   changelog.Key
		}
		var ts []timer
		for _, e := range p.rangeOf([]byte{byte(changelog.KindTimer)}) {
			k, err := changelog.DecodeKey([]byte(e.k))
			if err != nil {
				return nil, fmt.Errorf("statereader: partition %d timer: %w", p.id, err)
			}
			if q.Key != nil && !bytes.Equal(k.GroupKey, q.Key) {
				continue
			}
			ts = append(ts, timer{changelogfmt.TimerByKey(k.GroupKey, k.Expiry), k})
		}
		slices.SortFunc(ts, func(a, b timer) int { return bytes.Compare(a.order, b.order) })
		for _, tm := range ts {
			t := Timer{Partition: p.id, ExpiryMs: tm.key.Expiry, Expiry: FormatMs(tm.key.Expiry)}
			t.Key, t.KeyEncoding = encodeKey(tm.key.GroupKey)
			out = append(out, t)
			if q.Limit > 0 && len(out) >= q.Limit {
				return out, nil
			}
		}
	}
	return out, nil
}

// FormatMs formats ms since the epoch as RFC 3339 in UTC with milliseconds.
func FormatMs(ms int64) string {
	return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z07:00")
}

func encodeKey(b []byte) (string, string) {
	if utf8.Valid(b) {
		return string(b), ""
	}
	return base64.StdEncoding.EncodeToString(b), "base64"
}

func decodeKeyString(s, enc string) ([]byte, error) {
	switch enc {
	case "":
		return []byte(s), nil
	case "base64":
		return base64.StdEncoding.DecodeString(s)
	}
	return nil, fmt.Errorf("statereader: unknown key encoding %q", enc)
}

// writerSchema is the schema a stored value was written under: the
// version its header names in the variable's history (internal/shard).
func writerSchema(info shard.VarInfo, id uint32) string {
	switch {
	case len(info.Schemas) == 0:
		return info.Schema
	case id == 0:
		return info.Schemas[0]
	case int(id) <= len(info.Schemas):
		return info.Schemas[id-1]
	}
	return "" // a version the history does not hold: undecodable (base64)
}

func (r *Reader) decode(schema string, payload []byte) (json.RawMessage, string) {
	var d Decoder
	if r.o.decoders != nil {
		d = r.o.decoders(schema)
	}
	if d == nil {
		d = r.builtin(schema)
	}
	if d != nil {
		if v, err := d(payload); err == nil && json.Valid(v) {
			return v, ""
		}
	}
	b, _ := json.Marshal(base64.StdEncoding.EncodeToString(payload))
	return b, "base64"
}

// inputOffsets returns the input offsets of the further input topics
// (metadata "engine/input_offset/<topic>"); nil with one input.
func (p *part) inputOffsets() map[string]int64 {
	const name = "engine/input_offset/"
	var out map[string]int64
	prefix := changelogfmt.MetaKey(name)
	for _, e := range p.rangeOf(prefix) {
		if len(e.v) != 8 {
			continue
		}
		if out == nil {
			out = map[string]int64{}
		}
		out[e.k[len(prefix):]] = int64(binary.BigEndian.Uint64(e.v))
	}
	return out
}
