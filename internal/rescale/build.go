package rescale

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/kstate/kstate/changelog"
	"github.com/kstate/kstate/internal/changelogfmt"
	"github.com/kstate/kstate/internal/engine"
	"github.com/kstate/kstate/internal/murmur2"
	"github.com/kstate/kstate/internal/shard"
)

// Meta names merged specially (the rest must agree between partitions).
const (
	metaVarPrefix = "var/"
	metaNextVarID = "varid/next"
)

// Entry is one shard entry of the new changelog.
type Entry struct {
	Key, Value []byte
}

// PartitionPlan is what one partition of B receives.
type PartitionPlan struct {
	Partition int32
	// InputOffset is where B continues reading this input partition: A's
	// committed offset for A's partitions, the partition's start for new
	// ones. It is B's committed offset and the partition's
	// engine/input_offset.
	InputOffset int64
	Keys        int // grouping keys held
	KeysMoved   int // of which came from another partition of A
	Entries     int // state, timer and TTL entries
	Moved       int // of which came from another partition of A
	// Records are the changelog entries to write, sorted by key: the merged
	// metadata, then the state, timer and TTL entries, then the input
	// offset. Run releases them once written.
	Records []Entry
	// RecordCount is len(Records) as built.
	RecordCount int
}

// Plan is a rescale's result.
type Plan struct {
	From, To  int // partition counts of A and B
	Variables []shard.VarInfo
	// Merged metadata (nil: no partition of A had it).
	BatchID, Watermark, LateWatermark *int64
	InitialStateApplied               bool
	NextVarID                         uint32
	// Remapped lists the variable ids rewritten in a partition's entries.
	Remapped   []string
	Partitions []PartitionPlan
}

// Build rebuilds A's entries (partition → shard key → stored value, the
// compaction view of A's changelog, engine/input_offset included or not)
// for n partitions; offsets gives B's input offset of each of its n
// partitions.
//
// Merged metadata, the same in every partition of B:
//   - var/<name>: the variable registry. A variable must have the same
//     kind, key schema and TTL in every partition that declares it, and its
//     value schema histories must be prefixes of one another (a partition
//     that ran no batch since a schema change has the shorter one); the
//     longest history is kept, so every value header keeps naming its
//     schema. Anything else is refused. Ids are allocated per partition
//     and may differ: each variable keeps the id of the lowest partition
//     declaring it unless another variable took that id first (by name
//     order), else it gets a new one; the state and TTL keys of partitions
//     where the id differs are rewritten, so one id never stands for two
//     variables. An entry whose id its partition does not declare (data of
//     a dropped variable) keeps its id unless a variable now has it:
//     refused.
//   - varid/next: above every id in use and every partition's value.
//   - engine/batch_id: the maximum (batch ids only grow).
//   - engine/watermark and engine/late_watermark: the minimum, so that
//     nothing that was on time in any partition of A is late in B.
//   - engine/initial_state_applied: set when any partition of A applied
//     the initial state (its rows were keyed, and move with their keys: B
//     must not apply them again; B's partitions are not fresh either, as
//     they hold the time mode).
//   - engine/input_offset: offsets[p], never A's value.
//   - any other metadata (time and output modes): must be equal wherever
//     present, else refused.
func Build(src map[int32]map[string][]byte, n int, offsets []int64) (*Plan, error) {
	parts := make([]int32, 0, len(src))
	for p := range src {
		parts = append(parts, p)
	}
	slices.Sort(parts)
	b, err := newBuilder(parts, n, offsets)
	if err != nil {
		return nil, err
	}
	// Pass 1: registries, and every id in use.
	for _, p := range parts {
		for k, v := range src[p] {
			if err := b.scan(p, []byte(k), v); err != nil {
				return nil, err
			}
		}
	}
	if err := b.resolve(); err != nil {
		return nil, err
	}
	type routed struct {
		key, value []byte
		from       int32
		group      string
	}
	// Pass 2: route every entry, rewriting ids.
	out := make([][]routed, n)
	for _, p := range parts {
		for k, v := range src[p] {
			nk, group, to, ok, err := b.route(p, []byte(k), v)
			if err != nil {
				return nil, err
			}
			if ok {
				out[to] = append(out[to], routed{key: nk, value: v, from: p, group: string(group)})
			}
		}
	}
	if err := b.finishMeta(); err != nil {
		return nil, err
	}
	for p := range out {
		pp := PartitionPlan{Partition: int32(p), InputOffset: offsets[p]}
		owner := map[string]int32{} // grouping key → the one A partition holding it
		groups := map[string]bool{} // grouping keys
		movedG := map[string]bool{} // grouping keys from elsewhere
		for _, r := range out[p] {
			// A key's entries must all come from one partition of A, or
			// two partitions' state of one key would be mixed.
			if from, dup := owner[r.group]; dup && from != r.from {
				return nil, errTwoPartitions(r.group, from, r.from)
			}
			owner[r.group] = r.from
			pp.Records = append(pp.Records, Entry{r.key, r.value})
			pp.Entries++
			groups[r.group] = true
			if r.from != int32(p) {
				pp.Moved++
				movedG[r.group] = true
			}
		}
		pp.Keys, pp.KeysMoved = len(groups), len(movedG)
		pp.Records = append(pp.Records, b.extra(int32(p))...)
		slices.SortFunc(pp.Records, func(a, b Entry) int { return bytes.Compare(a.Key, b.Key) })
		pp.RecordCount = len(pp.Records)
		b.plan.Partitions = append(b.plan.Partitions, pp)
	}
	return b.plan, nil
}

func errTwoPartitions(group string, a, b int32) error {
	return fmt.Errorf("%w: grouping key %q has state in partitions %d and %d of the application (its input was not partitioned by key): the entries cannot be merged",
		ErrRefused, group, min(a, b), max(a, b))
}

// builder holds what a rescale keeps in memory whatever the state's size:
// the variable registries, the merged metadata and the pending skips. Its
// callers feed it A's entries twice (scan, then route) and keep the
// routed entries themselves (Build in memory, Store on disk).
type builder struct {
	n       int
	offsets []int64
	parts   []int32
	plan    *Plan

	regs    map[int32]map[string]shard.VarInfo
	regVal  map[int32]map[string][]byte // registry entries as stored
	maxSeen uint32
	next    uint32

	names    []string
	assigned map[string]uint32
	owner    map[uint32]string
	varFrom  map[string]int32
	remap    map[int32]map[uint32]uint32 // [p][old id] = new id, for the variables p declares

	other     map[string][]byte // other meta name → value
	otherFrom map[string]int32
	// A pending skip (kstate.SkipRecord) names an offset of A's input
	// partition p, which B's partition p continues: it stays there only;
	// consumed ones are dropped.
	skips map[int32][]Entry
	meta  []Entry // the metadata every partition gets
}

func newBuilder(parts []int32, n int, offsets []int64) (*builder, error) {
	if len(offsets) != n {
		return nil, fmt.Errorf("rescale: %d offsets for %d partitions", len(offsets), n)
	}
	if n <= len(parts) {
		return nil, fmt.Errorf("%w: %d partitions: the state has %d; rescale only grows the partition count", ErrRefused, n, len(parts))
	}
	b := &builder{n: n, offsets: offsets, parts: parts, plan: &Plan{From: len(parts), To: n},
		regs: map[int32]map[string]shard.VarInfo{}, regVal: map[int32]map[string][]byte{},
		other: map[string][]byte{}, otherFrom: map[string]int32{}, skips: map[int32][]Entry{}}
	for _, p := range parts {
		b.regs[p], b.regVal[p] = map[string]shard.VarInfo{}, map[string][]byte{}
	}
	return b, nil
}

// scan is pass 1 over one entry of partition p: registries, and every id
// in use. It keeps no reference to k or v.
func (b *builder) scan(p int32, k, v []byte) error {
	key, err := changelog.DecodeKey(k)
	if err != nil {
		return fmt.Errorf("%w: partition %d: changelog key %x: %w", ErrRefused, p, k, err)
	}
	switch {
	case key.Kind == changelog.KindMeta && strings.HasPrefix(key.Name, metaVarPrefix):
		vi, _, err := shard.ParseVarInfo(k, v)
		if err != nil {
			return fmt.Errorf("%w: partition %d: %w", ErrRefused, p, err)
		}
		b.regs[p][vi.Name] = vi
		b.regVal[p][vi.Name] = bytes.Clone(v)
		b.maxSeen = max(b.maxSeen, vi.ID)
	case key.Kind == changelog.KindMeta && key.Name == metaNextVarID:
		if len(v) != 4 {
			return fmt.Errorf("%w: partition %d: %s of %d bytes, want 4", ErrRefused, p, key.Name, len(v))
		}
		b.next = max(b.next, binary.BigEndian.Uint32(v))
	case key.Kind == changelog.KindState:
		b.maxSeen = max(b.maxSeen, key.VarID)
	case key.Kind == changelog.KindTTL:
		sk, err := changelog.DecodeKey(key.StateKey)
		if err != nil {
			return fmt.Errorf("%w: partition %d: TTL entry %x: %w", ErrRefused, p, k, err)
		}
		b.maxSeen = max(b.maxSeen, sk.VarID)
	}
	return nil
}

// resolve merges the registries, then gives every variable one id.
func (b *builder) resolve() error {
	next := max(b.next, b.maxSeen+1)
	vars := map[string]shard.VarInfo{}
	b.varFrom = map[string]int32{} // the partition whose entry is kept
	firstID := map[string]uint32{} // the id in the lowest partition declaring it
	for _, p := range b.parts {
		for _, name := range sortedKeys(b.regs[p]) {
			vi := b.regs[p][name]
			if _, ok := firstID[name]; !ok {
				firstID[name] = vi.ID
			}
			if err := mergeVar(vars, b.varFrom, vi, p); err != nil {
				return err
			}
		}
	}
	b.names = sortedKeys(vars)
	b.assigned = map[string]uint32{}
	b.owner = map[uint32]string{}
	for _, name := range b.names {
		id := firstID[name]
		if _, taken := b.owner[id]; taken {
			id = next
			next++
		}
		b.assigned[name], b.owner[id] = id, name
		vi := vars[name]
		vi.ID = id
		b.plan.Variables = append(b.plan.Variables, vi)
	}
	b.remap = map[int32]map[uint32]uint32{}
	for _, p := range b.parts {
		b.remap[p] = map[uint32]uint32{}
		for _, name := range sortedKeys(b.regs[p]) {
			old := b.regs[p][name].ID
			b.remap[p][old] = b.assigned[name]
			if old != b.assigned[name] {
				b.plan.Remapped = append(b.plan.Remapped, fmt.Sprintf("variable %q: id %d in partition %d → %d", name, old, p, b.assigned[name]))
			}
		}
	}
	b.plan.NextVarID = next
	return nil
}

func (b *builder) newID(p int32, id uint32) (uint32, error) {
	if to, ok := b.remap[p][id]; ok {
		return to, nil
	}
	if name, taken := b.owner[id]; taken {
		return 0, fmt.Errorf("%w: partition %d holds data of variable id %d, which it does not declare, and variable %q has that id: "+
			"run the application until every partition has committed a batch with the current code, or move the state with kstate state export and Topology.InitialState",
			ErrRefused, p, id, name)
	}
	return id, nil
}

func (b *builder) minMax(dst **int64, v []byte, name string, p int32, takeMax bool) error {
	if len(v) != 8 {
		return fmt.Errorf("%w: partition %d: %s of %d bytes, want 8", ErrRefused, p, name, len(v))
	}
	x := int64(binary.BigEndian.Uint64(v))
	if *dst == nil || (takeMax && x > **dst) || (!takeMax && x < **dst) {
		*dst = &x
	}
	return nil
}

// route is pass 2 over one entry of partition p (already scanned):
// metadata is merged into b and an entry of the local timer index dropped
// (ok false); a state, timer or TTL entry
// returns its key with ids rewritten (k itself when unchanged), its
// grouping key (aliasing k) and the partition of B it goes to. It keeps
// no reference to k or v.
func (b *builder) route(p int32, k, v []byte) (nk, group []byte, to int32, ok bool, err error) {
	key, _ := changelog.DecodeKey(k) // checked by scan
	nk = k
	switch key.Kind {
	case changelog.KindMeta:
		plan := b.plan
		switch name := key.Name; {
		case strings.HasPrefix(name, engine.MetaInputOffset+"/"):
			err = fmt.Errorf("%w: partition %d has metadata %q: the application reads several input topics, which rescale does not support yet",
				ErrRefused, p, name)
		case strings.HasPrefix(name, engine.SkipMetaPrefix):
			if _, off, ok := engine.SkipOffset(k, v); ok && off >= 0 {
				b.skips[p] = append(b.skips[p], Entry{bytes.Clone(k), bytes.Clone(v)})
			}
		case name == changelog.LayoutMeta:
			// B is written in this build's layout (extra): A's may be
			// older, not newer.
			if n, ok := changelogfmt.ParseLayout(v); !ok || n > changelog.Layout {
				err = fmt.Errorf("%w: partition %d records changelog layout %q, and this build reads layouts up to %d: a newer kstate wrote it; rescale with that version: %w",
					ErrRefused, p, v, changelog.Layout, changelog.ErrLayout)
			}
		case strings.HasPrefix(name, metaVarPrefix), name == metaNextVarID, name == engine.MetaInputOffset:
			// Merged by resolve; input offsets replaced by offsets.
		case name == engine.MetaBatchID:
			err = b.minMax(&plan.BatchID, v, name, p, true)
		case name == engine.MetaWatermark:
			err = b.minMax(&plan.Watermark, v, name, p, false)
		case name == engine.MetaLateWatermark:
			err = b.minMax(&plan.LateWatermark, v, name, p, false)
		case name == engine.MetaInitialApplied:
			plan.InitialStateApplied = true
		case name == shard.VarSetMeta:
			// Versions of the set of variables: the most any partition
			// counted (u32 big-endian, so bytes compare as numbers).
			if old, ok := b.other[name]; !ok || bytes.Compare(v, old) > 0 {
				b.other[name], b.otherFrom[name] = bytes.Clone(v), p
			}
		default:
			if old, ok := b.other[name]; ok && !bytes.Equal(old, v) {
				return nil, nil, 0, false, fmt.Errorf("%w: metadata %q is %q in partition %d and %q in partition %d: the partitions of the application ran with different settings",
					ErrRefused, name, old, b.otherFrom[name], v, p)
			}
			b.other[name], b.otherFrom[name] = bytes.Clone(v), p
		}
		return nil, nil, 0, false, err
	case changelog.KindState:
		group = key.GroupKey
		id, err := b.newID(p, key.VarID)
		if err != nil {
			return nil, nil, 0, false, err
		}
		if id != key.VarID {
			nk = changelogfmt.StateKey(id, key.GroupKey, key.Suffix)
		}
	case changelog.KindTimer:
		group = key.GroupKey
	case changelog.KindTimerKey:
		// The per-key timer index is local to a shard (a restore derives
		// it from the timers); an older changelog's entries of it are
		// dropped, as they may be stale.
		return nil, nil, 0, false, nil
	case changelog.KindTTL:
		sk, _ := changelog.DecodeKey(key.StateKey)
		group = sk.GroupKey
		id, err := b.newID(p, sk.VarID)
		if err != nil {
			return nil, nil, 0, false, err
		}
		if id != sk.VarID {
			nk = changelogfmt.TTLKey(key.Expiry, changelogfmt.StateKey(id, sk.GroupKey, sk.Suffix))
		}
	default:
		return nil, nil, 0, false, fmt.Errorf("%w: partition %d: changelog key %x of unknown kind %v", ErrRefused, p, k, key.Kind)
	}
	return nk, group, murmur2.Partition(group, b.n), true, nil
}

// finishMeta builds the metadata every partition gets, once every entry
// is routed.
func (b *builder) finishMeta() error {
	plan := b.plan
	// B's entries are in this build's layout: its local timer index is
	// dropped (route).
	lk, lv := changelogfmt.LayoutEntry()
	meta := []Entry{{lk, lv}}
	for _, name := range b.names {
		// The registry entry of the partition with the longest history,
		// with the variable's id.
		k := changelogfmt.MetaKey(metaVarPrefix + name)
		v := b.regVal[b.varFrom[name]][name]
		if b.regs[b.varFrom[name]][name].ID != b.assigned[name] {
			var err error
			if v, err = setID(v, b.assigned[name]); err != nil {
				return fmt.Errorf("rescale: variable %q: %w", name, err)
			}
		}
		meta = append(meta, Entry{k, v})
	}
	if len(b.names) > 0 || plan.NextVarID > 1 {
		meta = append(meta, Entry{changelogfmt.MetaKey(metaNextVarID), binary.BigEndian.AppendUint32(nil, plan.NextVarID)})
	}
	putInt := func(name string, v *int64) {
		if v != nil {
			meta = append(meta, Entry{changelogfmt.MetaKey(name), binary.BigEndian.AppendUint64(nil, uint64(*v))})
		}
	}
	putInt(engine.MetaBatchID, plan.BatchID)
	putInt(engine.MetaWatermark, plan.Watermark)
	putInt(engine.MetaLateWatermark, plan.LateWatermark)
	if plan.InitialStateApplied {
		meta = append(meta, Entry{changelogfmt.MetaKey(engine.MetaInitialApplied), []byte{1}})
	}
	for name, v := range b.other {
		meta = append(meta, Entry{changelogfmt.MetaKey(name), v})
	}
	b.meta = meta
	return nil
}

// extra returns the entries partition p of B gets besides its routed
// ones, sorted by key: the merged metadata, p's pending skips and its
// input offset.
func (b *builder) extra(p int32) []Entry {
	out := slices.Concat(b.meta, b.skips[p])
	k, v := engine.InputOffsetRecord(b.offsets[p])
	out = append(out, Entry{k, v})
	slices.SortFunc(out, func(a, b Entry) int { return bytes.Compare(a.Key, b.Key) })
	return out
}

// mergeVar adds partition p's registry entry of a variable to vars,
// keeping the longest schema history, or refuses entries that disagree.
func mergeVar(vars map[string]shard.VarInfo, from map[string]int32, vi shard.VarInfo, p int32) error {
	old, ok := vars[vi.Name]
	if !ok {
		vars[vi.Name], from[vi.Name] = vi, p
		return nil
	}
	fail := func(what string, a, b any) error {
		return fmt.Errorf("%w: variable %q has %s %v in partition %d and %v in partition %d: the partitions ran different declarations; "+
			"run the application until every partition has committed a batch with the current code, or move the state with kstate state export and Topology.InitialState",
			ErrRefused, vi.Name, what, a, from[vi.Name], b, p)
	}
	if old.Kind != vi.Kind {
		return fail("kind", old.Kind, vi.Kind)
	}
	short, long := old.Schemas, vi.Schemas
	if len(short) > len(long) {
		short, long = long, short
	}
	if !slices.Equal(short, long[:len(short)]) {
		return fail("schema history", old.Schemas, vi.Schemas)
	}
	if len(vi.Schemas) > len(old.Schemas) {
		vars[vi.Name], from[vi.Name] = vi, p
		return nil
	}
	if len(vi.Schemas) == len(old.Schemas) {
		switch {
		case old.KeySchema != vi.KeySchema:
			return fail("key schema", old.KeySchema, vi.KeySchema)
		case old.TTL != vi.TTL:
			return fail("TTL", old.TTL, vi.TTL)
		case old.Schema != vi.Schema:
			return fail("schema", old.Schema, vi.Schema)
		}
	}
	return nil
}

// setID returns a registry entry (JSON) with its id replaced, every other
// field kept as stored.
func setID(entry []byte, id uint32) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(entry, &m); err != nil {
		return nil, fmt.Errorf("registry entry %q: %w", entry, err)
	}
	m["id"] = json.RawMessage(strconv.FormatUint(uint64(id), 10))
	return json.Marshal(m)
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
