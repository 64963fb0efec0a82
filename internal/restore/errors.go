package restore

import "errors"

var (
	// ErrBadRecord is returned by Restore for a changelog record that cannot
	// be applied (undecodable key, offsets going backwards); the message
	// names the offset.
	ErrBadRecord = errors.New("restore: bad changelog record")
	// ErrInvalidOptions is returned for invalid Options.
	ErrInvalidOptions = errors.New("restore: invalid options")
)
