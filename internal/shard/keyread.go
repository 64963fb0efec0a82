package shard

import (
	"github.com/kstate/kstate/internal/changelogfmt"
	"github.com/kstate/kstate/internal/keys"
)

// RangeReader reads the committed entries of [lower, upper) in key order,
// calling each until it returns false: Shard.ReadCommitted, or the
// coordinator's ReadCommitted of one partition (live queries).
type RangeReader func(lower, upper []byte, each func(key, value []byte) bool) error

// ReadVarKey reads one state variable's committed state under one
// grouping key through read: the variable's registry entry and its
// entries under groupKey (one contiguous range of the shard), copied and
// keyed by shard key, as statereader.FromEntries takes them. ok is false
// when the shard never declared variable (entries then holds nothing of
// it). It is the one place outside the shard's own reads that knows where
// a variable's entries under a key lie; live queries (kstate's App.Query)
// use it.
func ReadVarKey(read RangeReader, variable string, groupKey []byte) (entries map[string][]byte, info VarInfo, ok bool, err error) {
	entries = map[string][]byte{}
	collect := func(k, v []byte) bool {
		entries[string(k)] = append([]byte(nil), v...)
		return true
	}
	regKey := changelogfmt.MetaKey(varMetaPrefix + variable)
	if err := read(regKey, keys.PrefixEnd(regKey), collect); err != nil {
		return nil, VarInfo{}, false, err
	}
	v, found := entries[string(regKey)]
	if !found {
		return entries, VarInfo{}, false, nil
	}
	if info, ok, err = ParseVarInfo(regKey, v); err != nil || !ok {
		return nil, VarInfo{}, false, err
	}
	prefix := keys.StateKeyPrefix(info.ID, groupKey)
	if err := read(prefix, keys.PrefixEnd(prefix), collect); err != nil {
		return nil, info, true, err
	}
	return entries, info, true, nil
}
