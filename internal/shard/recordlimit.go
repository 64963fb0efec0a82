package shard

import (
	"errors"
	"fmt"

	"github.com/kstate/kstate/internal/recordsize"
)

// ErrValueTooLarge is wrapped by a state write whose changelog record would
// be over ShardOptions.MaxRecordBytes: the producer would refuse it, and
// with it the whole batch, on every retry. The write is not staged.
var ErrValueTooLarge = errors.New("state: value too large for the changelog")

// checkRecordSize refuses the changelog record key=val when it is over
// the shard's MaxRecordBytes (as Kafka counts it; changelog records have
// no headers).
func (s *Shard) checkRecordSize(key, val []byte) error {
	limit := s.opts.MaxRecordBytes
	if limit <= 0 {
		return nil
	}
	if n := recordsize.Of(key, val, recordsize.Headers{}); n > limit {
		return fmt.Errorf("%w: its changelog record is %d bytes as Kafka counts them (value %d, key %d), over Options.Kafka.MaxRecordBytes = %d: "+
			"store smaller values (split a large one into MapState entries or ListState elements), or raise MaxRecordBytes and the changelog topic's max.message.bytes",
			ErrValueTooLarge, n, len(val), len(key), limit)
	}
	return nil
}

// noteOversize keeps the first write of the current call refused by
// checkRecordSize (err, already naming the variable), so that the engine
// fails the call even if the processor ignored the error (TakeOversize),
// and Finish fails the batch if the engine did not take it.
func (s *Shard) noteOversize(err error) {
	if s.oversize == nil && errors.Is(err, ErrValueTooLarge) {
		s.oversize = err
	}
}

// TakeOversize returns, and forgets, the first state write refused since
// the last call for being over MaxRecordBytes (a *state.VarError wrapping
// ErrValueTooLarge), nil if none. The engine calls it after every handler
// call: a processor that ignored the error still fails its call.
func (s *Shard) TakeOversize() error {
	err := s.oversize
	s.oversize = nil
	return err
}
