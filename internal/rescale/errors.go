package rescale

import "errors"

// ErrRefused wraps every refusal of a rescale: a precondition that does not
// hold (A still running, B already exists, the input topic's partition
// count, unprocessed input in the wrong partition) or state that cannot be
// merged safely (variable registries or metadata that disagree between A's
// partitions, a grouping key held by two partitions). Nothing was written.
var ErrRefused = errors.New("rescale: refused")

// ErrNoSource is returned when application A has no changelog topic.
var ErrNoSource = errors.New("rescale: no state of the source application")
