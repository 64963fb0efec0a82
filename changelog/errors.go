package changelog

import "errors"

var (
	// ErrShortKey is returned when a key is too short for its kind.
	ErrShortKey = errors.New("changelog: key too short")
	// ErrUnknownKind is returned for a key whose first byte is not a known kind.
	ErrUnknownKind = errors.New("changelog: unknown key kind")
	// ErrBadValue is returned when a stored value header cannot be decoded.
	ErrBadValue = errors.New("changelog: malformed value header")
	// ErrVersion is returned when a value header has an unsupported format version.
	ErrVersion = errors.New("changelog: unsupported value format version")
	// ErrLayout is returned when a shard or changelog was written in a
	// Layout newer than this build's: a newer kstate wrote it.
	ErrLayout = errors.New("changelog: layout newer than this build reads")
)
