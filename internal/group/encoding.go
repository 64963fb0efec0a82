package group

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"
)

// The encodings of Meta and Assignment, carried in the UserData of Kafka's
// ConsumerMemberMetadata and ConsumerMemberAssignment.
//
// Each starts with its version (uvarint) and is a sequence of fields in a
// fixed order: strings and byte strings length-prefixed (uvarint), integers
// as varints, lists and maps as a count then their elements. A release only
// ever appends fields, so a decoder reads the fields it knows and ignores
// the bytes after them: what a newer release added. Each Member of a View
// is itself length-prefixed, so a field appended to Member is skipped too.
// Version 0 and undecodable bytes are an error; the balancer then treats
// the member as holding nothing.

// ErrEncoding is wrapped by every decoding error.
var ErrEncoding = errors.New("group: undecodable member metadata or assignment")

// Assignment is what the leader sends each member besides its active
// partitions (those travel in Kafka's own ConsumerMemberAssignment, so that
// Kafka's tools still describe the group).
type Assignment struct {
	Version int
	// Standby and Warmup are this member's standby and warm-up partitions
	// (also in View, under this member).
	Standby, Warmup []int32
	// Probing is how often the leader forces a rebalance while warm-ups
	// exist (0: none exist).
	Probing time.Duration
	// View is the whole group as the leader assigned it.
	View View
}

// EncodeMeta encodes m at Version (m.Version is ignored).
func EncodeMeta(m Meta) []byte {
	var e encoder
	e.uint(Version)
	e.str(m.InstanceID)
	e.str(m.Process)
	e.str(m.Addr)
	e.offsets(m.Shards)
	e.parts(m.Standby)
	return e.b
}

// DecodeMeta decodes what EncodeMeta of this or a newer release wrote.
func DecodeMeta(b []byte) (Meta, error) {
	d := decoder{b: b}
	m := Meta{Version: d.version()}
	m.InstanceID = d.str()
	m.Process = d.str()
	m.Addr = d.str()
	m.Shards = d.offsets()
	if len(d.b) > 0 { // an older release's ends here
		m.Standby = d.parts()
	}
	if d.err != nil {
		return Meta{}, fmt.Errorf("%w: meta: %v", ErrEncoding, d.err)
	}
	return m, nil
}

// EncodeAssignment encodes a at Version (a.Version is ignored).
func EncodeAssignment(a Assignment) []byte {
	var e encoder
	e.uint(Version)
	e.parts(a.Standby)
	e.parts(a.Warmup)
	e.int(int64(a.Probing))
	e.int(int64(a.View.Generation))
	e.str(a.View.LeaderID)
	e.int(int64(a.View.Partitions))
	e.int(a.View.At.UnixNano())
	e.uint(uint64(len(a.View.Members)))
	for _, m := range a.View.Members {
		var me encoder
		me.str(m.MemberID)
		me.str(m.InstanceID)
		me.str(m.Process)
		me.str(m.Addr)
		me.parts(m.Active)
		me.parts(m.Standby)
		me.parts(m.Warmup)
		me.offsets(m.Lag)
		e.bytes(me.b)
	}
	return e.b
}

// DecodeAssignment decodes what EncodeAssignment of this or a newer release
// wrote.
func DecodeAssignment(b []byte) (Assignment, error) {
	d := decoder{b: b}
	a := Assignment{Version: d.version()}
	a.Standby = d.parts()
	a.Warmup = d.parts()
	a.Probing = time.Duration(d.int())
	a.View.Generation = int32(d.int())
	a.View.LeaderID = d.str()
	a.View.Partitions = int32(d.int())
	if at := d.int(); at != 0 {
		a.View.At = time.Unix(0, at)
	}
	n := d.count()
	for range n {
		md := decoder{b: d.bytes()}
		var m Member
		m.MemberID = md.str()
		m.InstanceID = md.str()
		m.Process = md.str()
		m.Addr = md.str()
		m.Active = md.parts()
		m.Standby = md.parts()
		m.Warmup = md.parts()
		m.Lag = md.offsets()
		if md.err != nil && d.err == nil {
			d.err = fmt.Errorf("member %d: %v", len(a.View.Members), md.err)
		}
		a.View.Members = append(a.View.Members, m)
	}
	if d.err != nil {
		return Assignment{}, fmt.Errorf("%w: assignment: %v", ErrEncoding, d.err)
	}
	return a, nil
}

type encoder struct{ b []byte }

func (e *encoder) uint(v uint64) { e.b = binary.AppendUvarint(e.b, v) }
func (e *encoder) int(v int64)   { e.b = binary.AppendVarint(e.b, v) }
func (e *encoder) bytes(b []byte) {
	e.uint(uint64(len(b)))
	e.b = append(e.b, b...)
}
func (e *encoder) str(s string) {
	e.uint(uint64(len(s)))
	e.b = append(e.b, s...)
}

func (e *encoder) parts(ps []int32) {
	e.uint(uint64(len(ps)))
	for _, p := range ps {
		e.int(int64(p))
	}
}

// offsets writes m in partition order, so that one map always encodes
// alike.
func (e *encoder) offsets(m map[int32]int64) {
	e.uint(uint64(len(m)))
	for _, p := range slices.Sorted(maps.Keys(m)) {
		e.int(int64(p))
		e.int(m[p])
	}
}

// decoder reads fields until the first error, which it keeps; every read
// after it returns a zero value.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("truncated or malformed %s", what)
	}
}

func (d *decoder) version() int {
	if len(d.b) == 0 {
		d.fail("version (empty)")
		return 0
	}
	v := d.uint()
	if d.err == nil && v == 0 {
		d.err = errors.New("version 0")
	}
	return int(v)
}

func (d *decoder) uint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("unsigned varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) int() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

// count reads a list length, at most the bytes left (each element takes at
// least one): a corrupt length cannot allocate more than the input.
func (d *decoder) count() int {
	n := d.uint()
	if n > uint64(len(d.b)) {
		d.fail("count")
		return 0
	}
	return int(n)
}

func (d *decoder) bytes() []byte {
	n := d.count()
	if d.err != nil {
		return nil
	}
	b := d.b[:n]
	d.b = d.b[n:]
	return b
}

func (d *decoder) str() string { return string(d.bytes()) }

func (d *decoder) parts() []int32 {
	n := d.count()
	var ps []int32
	for range n {
		ps = append(ps, int32(d.int()))
	}
	if d.err != nil {
		return nil
	}
	return ps
}

func (d *decoder) offsets() map[int32]int64 {
	n := d.count()
	if n == 0 {
		return nil
	}
	m := make(map[int32]int64, n)
	for range n {
		p := int32(d.int())
		m[p] = d.int()
	}
	if d.err != nil {
		return nil
	}
	return m
}
