package shard

import (
	"bytes"
	"hash/maphash"
	"unsafe"
)

// wbIndex is the write-behind layer's hash index: key → the ref of its
// entry (chunk<<32 | offset). Open addressing with linear probing over
// slots of two words, the ref plus one (0: free) and the key's hash, in
// memory outside the Go heap, like the layer's chunks.
//
// Why not a map[string]uint64: in heavy at 20,000 rows/s the map's access
// and assignment were 6 % of the process's CPU (hashing, and string
// compares reaching into the chunks), and its key strings were pointers
// the garbage collector scanned at every cycle (docs/BENCHMARKS.md,
// "Session 44"). Here a lookup compares 8-byte hashes and reads a key only
// on an equal hash, an insert is the free slot the lookup ended at, and the
// layer's point reads hash a key once for both layers (wbHash). Keys are
// never removed but all at once (reset), so the table needs no deletion.
type wbIndex struct {
	slots []uint64 // pairs: ref+1 (0: free), hash; len a power of two ×2
	mask  uint64   // number of slots - 1
	n     int      // used slots
}

// wbIndexMinSlots is the size of a new index's table (16 KiB).
const wbIndexMinSlots = 1 << 10

// wbSeed seeds the hashes of every layer's keys, so a frozen layer and the
// next one share them.
var wbSeed = maphash.MakeSeed()

func wbHash(key []byte) uint64 { return maphash.Bytes(wbSeed, key) }

// lookup returns the slot of key (hash h) in w's index and whether it is
// there; when not, the slot is the free one where insert puts it.
func (x *wbIndex) lookup(w *wbLayer, h uint64, key []byte) (slot uint64, found bool) {
	if x.slots == nil {
		return 0, false
	}
	for i := h & x.mask; ; i = (i + 1) & x.mask {
		r := x.slots[2*i]
		if r == 0 {
			return i, false
		}
		if x.slots[2*i+1] == h && bytes.Equal(w.refKey(r-1), key) {
			return i, true
		}
	}
}

// ref returns the ref at a used slot.
func (x *wbIndex) ref(slot uint64) uint64 { return x.slots[2*slot] - 1 }

// set replaces the ref at a used slot.
func (x *wbIndex) set(slot, ref uint64) { x.slots[2*slot] = ref + 1 }

// insert adds a key of hash h with ref at slot, the free slot lookup
// returned for it (unless the table is grown, which finds another).
func (x *wbIndex) insert(slot, h, ref uint64) {
	if x.slots == nil || uint64(x.n+1)*2 > x.mask+1 { // at most half used
		x.grow()
		for slot = h & x.mask; x.slots[2*slot] != 0; slot = (slot + 1) & x.mask {
		}
	}
	x.slots[2*slot], x.slots[2*slot+1] = ref+1, h
	x.n++
}

// grow doubles the table (or makes the first one) and moves every used slot
// to its place by its hash: no key is read.
func (x *wbIndex) grow() {
	n := uint64(wbIndexMinSlots)
	if x.slots != nil {
		n = 2 * (x.mask + 1)
	}
	old := x.slots
	x.slots, x.mask = wbWords(int(2*n)), n-1
	for j := 0; j < len(old); j += 2 {
		if old[j] == 0 {
			continue
		}
		i := old[j+1] & x.mask
		for x.slots[2*i] != 0 {
			i = (i + 1) & x.mask
		}
		x.slots[2*i], x.slots[2*i+1] = old[j], old[j+1]
	}
	freeWBWords(old)
}

// reset empties the index, keeping its table.
func (x *wbIndex) reset() {
	clear(x.slots)
	x.n = 0
}

// release returns the table's memory.
func (x *wbIndex) release() {
	freeWBWords(x.slots)
	x.slots, x.mask, x.n = nil, 0, 0
}

// wbWords returns n zeroed words outside the Go heap (allocCacheMem).
func wbWords(n int) []uint64 {
	b := allocCacheMem(n * 8)
	return unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(b))), n)
}

func freeWBWords(w []uint64) {
	if len(w) > 0 {
		freeCacheMem(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(w))), len(w)*8))
	}
}
