package shard

import (
	"bytes"
	"fmt"

	"github.com/kstate/kstate/changelog"
	"github.com/kstate/kstate/internal/changelogfmt"
	"github.com/kstate/kstate/state"
)

// The shard records the changelog layout it writes (changelog.Layout) in
// the metadata entry changelog.LayoutMeta, and refuses a store or a
// changelog that records a newer one: a newer kstate wrote it, and this
// build would misread it (a restore by a build of layout 1 leaves a
// layout-2 changelog's per-key timer listing empty). The entry is staged
// into the first batch after open whenever the store does not hold the
// current layout, so that it is that batch's first changelog record (meta
// keys sort first, and "changelog/" before "engine/" and "var/"), ahead
// of every record the batch writes in this layout.

var layoutKey, layoutValue = changelogfmt.LayoutEntry()

// parseLayout decodes a LayoutMeta value.
func parseLayout(v []byte) (int, error) {
	n, ok := changelogfmt.ParseLayout(v)
	if !ok || n < 1 {
		return 0, fmt.Errorf("%w: changelog layout entry %q is not a layout number", state.ErrCorrupt, v)
	}
	return n, nil
}

// checkLayout returns the error for a recorded layout v (the store's, or a
// changelog record's at offset, -1: the store) newer than this build's,
// and whether v is the current layout.
func (s *Shard) checkLayout(v []byte, offset int64) (current bool, err error) {
	n, err := parseLayout(v)
	if err != nil {
		return false, err
	}
	if n > changelog.Layout {
		where := "its store"
		if offset >= 0 {
			where = fmt.Sprintf("its changelog (the record at offset %d)", offset)
		}
		return false, fmt.Errorf("%w: shard %s: %s records changelog layout %d, and this build reads layouts up to %d: a newer kstate wrote it; run that version or a newer one (docs/OPERATIONS.md, \"Rolling upgrades\")",
			changelog.ErrLayout, s.opts.Dir, where, n, changelog.Layout)
	}
	return n == changelog.Layout, nil
}

// readLayout reads the store's recorded layout at open.
func (s *Shard) readLayout() error {
	v, ok, err := s.store.Get(layoutKey)
	if err != nil || !ok {
		return err
	}
	s.layoutCurrent, err = s.checkLayout(v, -1)
	return err
}

// checkRecordsLayout checks the layout entries among changelog records
// about to be applied, before any is written, and returns what the store
// records once they are: whether that is the current layout.
func (s *Shard) checkRecordsLayout(recs []changelog.Record) (current bool, err error) {
	current = s.layoutCurrent
	for i := range recs {
		r := &recs[i]
		if !bytes.Equal(r.Key, layoutKey) {
			continue
		}
		if r.Value == nil { // a tombstone: no layout recorded
			current = false
			continue
		}
		if current, err = s.checkLayout(r.Value, r.Offset); err != nil {
			return false, err
		}
	}
	return current, nil
}

// stageLayout stages the layout entry into the batch Begin starts, unless
// the store records the current layout.
func (s *Shard) stageLayout() {
	if !s.layoutCurrent {
		s.set(layoutKey, layoutValue)
		s.layoutStaged = true
	}
}
