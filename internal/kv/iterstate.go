package kv

import "errors"

// iterState is what the RocksDB and Pebble iterators share: the current
// position (copied key and value), the sticky error and the closed flag,
// and the accessors of Iterator over them.
type iterState struct {
	closed     bool
	valid      bool
	key, value []byte
	err        error
}

func (i *iterState) Valid() bool   { return i.valid }
func (i *iterState) Key() []byte   { return i.key }
func (i *iterState) Value() []byte { return i.value }

func (i *iterState) Error() error {
	if i.err != nil {
		return i.err
	}
	if i.closed {
		return ErrIterClosed
	}
	return nil
}

// closeResult clears the position and returns what Close returns: the
// iterator's error, unless it is only that the store closed under it.
func (i *iterState) closeResult() error {
	i.valid, i.key, i.value = false, nil, nil
	if i.err != nil && !errors.Is(i.err, ErrClosed) {
		return i.err
	}
	return nil
}
