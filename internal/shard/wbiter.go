package shard

import (
	"bytes"

	"github.com/kstate/kstate/internal/kv"
)

// wbIter is the committed state a scan merges the staging layer over: the
// write-behind layer over a store iterator. Layer entries shadow store keys
// and its tombstones hide them. The layer does not change while the
// iterator lives (only Commit and flushes change it, after resetReads has
// closed the batch's iterator).
//
// It supports what scan and last do: a seek (First, SeekGE) followed by
// Next, or a seek (Last, SeekLT) followed by Prev. A step against the
// direction of the last seek is not supported (it reports false).
type wbIter struct {
	st    kv.Iterator
	sOK   bool
	w     *wbLayer
	i     int  // the layer position: items[i]
	fwd   bool // direction of the last seek
	valid bool
	layer bool // the current key is the layer's items[i] (else the store's)
	key   []byte
	val   []byte
}

func newWBIter(st kv.Iterator, w *wbLayer) *wbIter { return &wbIter{st: st, w: w} }

// settle positions the iterator on the first visible key in its direction.
func (m *wbIter) settle() bool {
	items := m.w.items
	for {
		lOK := m.i >= 0 && m.i < len(items)
		if !m.sOK && !lOK {
			m.valid = false
			return false
		}
		// c < 0: the store's key comes first in the iterator's direction.
		var c int
		switch {
		case !m.sOK:
			c = 1
		case !lOK:
			c = -1
		default:
			c = bytes.Compare(m.st.Key(), m.w.refKey(items[m.i]))
			if !m.fwd {
				c = -c
			}
		}
		if c < 0 {
			m.valid, m.layer = true, false
			m.key, m.val = m.st.Key(), m.st.Value()
			return true
		}
		if c == 0 {
			m.sOK = m.step() // the layer shadows the store's key
		}
		v, deleted := wbVal(m.w.entry(items[m.i]))
		if deleted {
			m.move()
			continue
		}
		m.valid, m.layer = true, true
		m.key, m.val = m.w.refKey(items[m.i]), v
		return true
	}
}

// step moves the store iterator one key in the iterator's direction.
func (m *wbIter) step() bool {
	if m.fwd {
		return m.st.Next()
	}
	return m.st.Prev()
}

// move moves the layer position one key in the iterator's direction.
func (m *wbIter) move() {
	if m.fwd {
		m.i++
	} else {
		m.i--
	}
}

// SetBounds bounds the store iterator; the layer side is bounded by the
// seeks and by the scans' own bound checks.
func (m *wbIter) SetBounds(lower, upper []byte) {
	m.valid = false
	m.st.SetBounds(lower, upper)
}

// DeletesSkipped is the store iterator's.
func (m *wbIter) DeletesSkipped() uint64 { return m.st.DeletesSkipped() }

func (m *wbIter) First() bool {
	m.fwd, m.i = true, 0
	m.sOK = m.st.First()
	return m.settle()
}

func (m *wbIter) Last() bool {
	m.fwd, m.i = false, len(m.w.items)-1
	m.sOK = m.st.Last()
	return m.settle()
}

func (m *wbIter) SeekGE(key []byte) bool {
	m.fwd, m.i = true, m.w.find(key)
	m.sOK = m.st.SeekGE(key)
	return m.settle()
}

func (m *wbIter) SeekLT(key []byte) bool {
	m.fwd, m.i = false, m.w.find(key)-1
	m.sOK = m.st.SeekLT(key)
	return m.settle()
}

func (m *wbIter) Next() bool {
	if !m.valid || !m.fwd {
		m.valid = false
		return false
	}
	if m.layer {
		m.i++
	} else {
		m.sOK = m.st.Next()
	}
	return m.settle()
}

func (m *wbIter) Prev() bool {
	if !m.valid || m.fwd {
		m.valid = false
		return false
	}
	if m.layer {
		m.i--
	} else {
		m.sOK = m.st.Prev()
	}
	return m.settle()
}

func (m *wbIter) Valid() bool   { return m.valid }
func (m *wbIter) Key() []byte   { return m.key }
func (m *wbIter) Value() []byte { return m.val }
func (m *wbIter) Error() error  { return m.st.Error() }
func (m *wbIter) Close() error  { return m.st.Close() }
