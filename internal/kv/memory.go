package kv

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
)

// memoryCheckpointFile is the single file a memory store checkpoint consists of.
const memoryCheckpointFile = "memory.kvdump"

// memoryCheckpointMagic starts a checkpoint file (format version 1).
var memoryCheckpointMagic = []byte("kstate-memkv-1\n")

// NewMemory returns an empty in-memory Store: an ordered memSkiplist guarded by
// a read-write mutex. Keys and values are copied on write and Get returns
// copies, so callers may reuse their buffers. It is meant for tests and for
// the demo; nothing survives the process except an explicit Checkpoint,
// which LoadMemoryCheckpoint reads back.
func NewMemory() Store {
	return &memStore{list: newMemSkiplist()}
}

// LoadMemoryCheckpoint opens a new memory store holding the contents of a
// checkpoint written by a memory store's Checkpoint(dir).
func LoadMemoryCheckpoint(dir string) (Store, error) {
	f, err := os.Open(filepath.Join(dir, memoryCheckpointFile))
	if err != nil {
		return nil, fmt.Errorf("kv: open memory checkpoint: %w", err)
	}
	defer f.Close()
	r := bufio.NewReader(f)
	magic := make([]byte, len(memoryCheckpointMagic))
	if _, err := io.ReadFull(r, magic); err != nil || !bytes.Equal(magic, memoryCheckpointMagic) {
		return nil, fmt.Errorf("kv: %s is not a memory store checkpoint", dir)
	}
	s := &memStore{list: newMemSkiplist()}
	readChunk := func() ([]byte, error) {
		n, err := binary.ReadUvarint(r)
		if err != nil {
			return nil, err
		}
		if n > 1<<31 {
			return nil, fmt.Errorf("kv: memory checkpoint %s: entry of %d bytes", dir, n)
		}
		b := make([]byte, n)
		_, err = io.ReadFull(r, b)
		return b, err
	}
	for {
		k, err := readChunk()
		if err == io.EOF {
			return s, nil
		}
		if err != nil {
			return nil, fmt.Errorf("kv: read memory checkpoint %s: %w", dir, err)
		}
		v, err := readChunk()
		if err != nil {
			return nil, fmt.Errorf("kv: read memory checkpoint %s: truncated entry: %w", dir, err)
		}
		s.list.set(k, v)
	}
}

// errMemClosed wraps ErrClosed for a closed memory store.
var errMemClosed = fmt.Errorf("%w: memory store", ErrClosed)

type memStore struct {
	mu     sync.RWMutex
	list   *memSkiplist
	closed bool
}

func (s *memStore) Get(key []byte) ([]byte, bool, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, false, errMemClosed
	}
	n := s.list.seekGE(key)
	if n == nil || !bytes.Equal(n.key, key) {
		return nil, false, nil
	}
	return append(make([]byte, 0, len(n.val)), n.val...), true, nil
}

func (s *memStore) NewIter(lower, upper []byte) Iterator {
	s.mu.RLock()
	closed := s.closed
	s.mu.RUnlock()
	it := &memIter{s: s, lower: memClone(lower), upper: memClone(upper)}
	if closed {
		it.err = errMemClosed
	}
	return it
}

func (s *memStore) Write(b *Batch, o WriteOptions) error {
	if err := o.check(); err != nil {
		return err
	}
	if b == nil {
		return nil
	}
	for _, op := range b.Ops() { // validate first: the write is all or nothing
		if op.Kind > OpDeleteRange {
			return fmt.Errorf("%w: unknown batch op kind %d", ErrInvalidOptions, op.Kind)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errMemClosed
	}
	for _, op := range b.Ops() {
		switch op.Kind {
		case OpPut:
			s.list.set(memClone(op.Key), append(make([]byte, 0, len(op.Value)), op.Value...))
		case OpDelete:
			s.list.remove(op.Key)
		case OpDeleteRange:
			// Collect first: removing while walking level 0 is fine for a
			// memSkiplist, but this keeps the loop obviously correct.
			var doomed [][]byte
			for n := s.list.seekGE(op.Key); n != nil && (op.End == nil || bytes.Compare(n.key, op.End) < 0); n = n.next[0] {
				doomed = append(doomed, n.key)
			}
			for _, k := range doomed {
				s.list.remove(k)
			}
		}
	}
	return nil
}

// Checkpoint writes the whole store into dir/memory.kvdump (dir must not
// exist). The file is written under a temporary name and renamed, so a
// crash never leaves a half-written checkpoint under the final name.
func (s *memStore) Estimate() (Estimate, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return Estimate{}, errMemClosed
	}
	var e Estimate
	for n := s.list.head.next[0]; n != nil; n = n.next[0] {
		e.Entries++
		e.Bytes += int64(len(n.key) + len(n.val))
	}
	return e, nil
}

func (s *memStore) Checkpoint(dir string) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return errMemClosed
	}
	if _, err := os.Stat(dir); err == nil {
		return fmt.Errorf("kv: checkpoint directory %s already exists", dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("kv: create checkpoint directory: %w", err)
	}
	tmp := filepath.Join(dir, memoryCheckpointFile+".tmp")
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("kv: create memory checkpoint: %w", err)
	}
	w := bufio.NewWriter(f)
	w.Write(memoryCheckpointMagic)
	var lenBuf [binary.MaxVarintLen64]byte
	for n := s.list.head.next[0]; n != nil; n = n.next[0] {
		w.Write(lenBuf[:binary.PutUvarint(lenBuf[:], uint64(len(n.key)))])
		w.Write(n.key)
		w.Write(lenBuf[:binary.PutUvarint(lenBuf[:], uint64(len(n.val)))])
		w.Write(n.val)
	}
	err = w.Flush()
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, memoryCheckpointFile))
	}
	if err != nil {
		return fmt.Errorf("kv: write memory checkpoint %s: %w", dir, err)
	}
	return nil
}

func (s *memStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	s.list = newMemSkiplist() // release the memory
	return nil
}

// memIter re-seeks by key on every positioning call, under the read lock.
// That costs O(log n) per step but makes the iterator immune to concurrent
// writes: it never holds a pointer into the list between calls.
type memIter struct {
	s            *memStore
	lower, upper []byte
	lbuf, ubuf   []byte // SetBounds' reused copies
	key, val     []byte
	valid        bool
	err          error
	closed       bool
}

func (it *memIter) position(fn func(l *memSkiplist) *memNode) bool {
	it.valid = false
	it.key, it.val = nil, nil
	if it.err != nil || it.closed {
		return false
	}
	it.s.mu.RLock()
	defer it.s.mu.RUnlock()
	if it.s.closed {
		it.err = errMemClosed
		return false
	}
	if it.upper != nil && (len(it.upper) == 0 || bytes.Compare(it.lower, it.upper) >= 0) {
		return false // empty range
	}
	n := fn(it.s.list)
	if n == nil || !it.inBounds(n.key) {
		return false
	}
	// Stored slices are never modified in place (writes replace them), so
	// handing them out without a copy is safe.
	it.key, it.val, it.valid = n.key, n.val, true
	return true
}

func (it *memIter) inBounds(k []byte) bool {
	if it.lower != nil && bytes.Compare(k, it.lower) < 0 {
		return false
	}
	return it.upper == nil || bytes.Compare(k, it.upper) < 0
}

func (it *memIter) First() bool {
	return it.position(func(l *memSkiplist) *memNode { return l.seekGE(it.lower) })
}

func (it *memIter) Last() bool {
	return it.position(func(l *memSkiplist) *memNode {
		if it.upper == nil {
			return l.last()
		}
		return l.seekLT(it.upper)
	})
}

func (it *memIter) SeekGE(key []byte) bool {
	if it.lower != nil && bytes.Compare(key, it.lower) < 0 {
		key = it.lower
	}
	return it.position(func(l *memSkiplist) *memNode { return l.seekGE(key) })
}

func (it *memIter) SeekLT(key []byte) bool {
	if it.upper != nil && bytes.Compare(key, it.upper) > 0 {
		key = it.upper
	}
	return it.position(func(l *memSkiplist) *memNode { return l.seekLT(key) })
}

func (it *memIter) Next() bool {
	if !it.valid {
		return false
	}
	cur := it.key
	return it.position(func(l *memSkiplist) *memNode { return l.seekGT(cur) })
}

func (it *memIter) Prev() bool {
	if !it.valid {
		return false
	}
	cur := it.key
	return it.position(func(l *memSkiplist) *memNode { return l.seekLT(cur) })
}

// SetBounds changes the range to [lower, upper) and unpositions the
// iterator (which sees every write anyway).
func (it *memIter) SetBounds(lower, upper []byte) {
	it.valid, it.key, it.val = false, nil, nil
	it.lower, it.lbuf = reuseBound(it.lbuf, lower)
	it.upper, it.ubuf = reuseBound(it.ubuf, upper)
}

// reuseBound copies bound into buf (nil stays nil) and returns the copy and
// the buffer to keep.
func reuseBound(buf, bound []byte) (out, keep []byte) {
	if bound == nil {
		return nil, buf
	}
	buf = append(buf[:0], bound...)
	if buf == nil {
		buf = []byte{}
	}
	return buf, buf
}

// DeletesSkipped is 0: the memory store deletes keys outright.
func (it *memIter) DeletesSkipped() uint64 { return 0 }

func (it *memIter) Valid() bool   { return it.valid }
func (it *memIter) Key() []byte   { return it.key }
func (it *memIter) Value() []byte { return it.val }
func (it *memIter) Error() error  { return it.err }

func (it *memIter) Close() error {
	if !it.closed {
		it.closed, it.valid, it.key, it.val = true, false, nil, nil
		if it.err == nil {
			it.err = ErrIterClosed
		}
	}
	return nil
}

func memClone(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append(make([]byte, 0, len(b)), b...)
}

// memSkiplist is a plain ordered map of byte keys. It does no locking and no
// copying; memStore does both.
const memMaxLevel = 24

type memNode struct {
	key, val []byte
	next     []*memNode
}

type memSkiplist struct {
	head  memNode
	level int
	rnd   uint64 // xorshift state for memNode heights
}

func newMemSkiplist() *memSkiplist {
	return &memSkiplist{head: memNode{next: make([]*memNode, memMaxLevel)}, level: 1, rnd: 0x9e3779b97f4a7c15}
}

func (l *memSkiplist) randomLevel() int {
	l.rnd ^= l.rnd << 13
	l.rnd ^= l.rnd >> 7
	l.rnd ^= l.rnd << 17
	h := 1
	for r := l.rnd; h < memMaxLevel && r&3 == 0; r >>= 2 {
		h++ // p = 1/4
	}
	return h
}

// findLT fills prev[i] with the last memNode at level i whose key < key and
// returns prev[0].
func (l *memSkiplist) findLT(key []byte, prev *[memMaxLevel]*memNode) *memNode {
	x := &l.head
	for i := l.level - 1; i >= 0; i-- {
		for x.next[i] != nil && bytes.Compare(x.next[i].key, key) < 0 {
			x = x.next[i]
		}
		if prev != nil {
			prev[i] = x
		}
	}
	return x
}

func (l *memSkiplist) seekGE(key []byte) *memNode { return l.findLT(key, nil).next[0] }

func (l *memSkiplist) seekGT(key []byte) *memNode {
	n := l.seekGE(key)
	if n != nil && bytes.Equal(n.key, key) {
		n = n.next[0]
	}
	return n
}

func (l *memSkiplist) seekLT(key []byte) *memNode {
	if x := l.findLT(key, nil); x != &l.head {
		return x
	}
	return nil
}

func (l *memSkiplist) last() *memNode {
	x := &l.head
	for i := l.level - 1; i >= 0; i-- {
		for x.next[i] != nil {
			x = x.next[i]
		}
	}
	if x == &l.head {
		return nil
	}
	return x
}

// set inserts or replaces; it keeps key and val (no copy).
func (l *memSkiplist) set(key, val []byte) {
	var prev [memMaxLevel]*memNode
	x := l.findLT(key, &prev).next[0]
	if x != nil && bytes.Equal(x.key, key) {
		x.val = val
		return
	}
	h := l.randomLevel()
	for i := l.level; i < h; i++ {
		prev[i] = &l.head
	}
	if h > l.level {
		l.level = h
	}
	n := &memNode{key: key, val: val, next: make([]*memNode, h)}
	for i := 0; i < h; i++ {
		n.next[i] = prev[i].next[i]
		prev[i].next[i] = n
	}
}

func (l *memSkiplist) remove(key []byte) {
	var prev [memMaxLevel]*memNode
	x := l.findLT(key, &prev).next[0]
	if x == nil || !bytes.Equal(x.key, key) {
		return
	}
	for i := 0; i < len(x.next); i++ {
		prev[i].next[i] = x.next[i]
	}
	for l.level > 1 && l.head.next[l.level-1] == nil {
		l.level--
	}
}
