package initial

import (
	"context"
	"iter"

	"github.com/kstate/kstate/internal/engine"
	"github.com/kstate/kstate/serde"
)

// FromLoad takes the rows from load, called when the first partition needs
// them (once per Run); unlike FromSeq, loading may fail.
func FromLoad[K, S any](load func(ctx context.Context) (iter.Seq2[K, S], error)) Source[K] {
	return loadSource[K, S]{load: load}
}

type loadSource[K, S any] struct {
	load func(ctx context.Context) (iter.Seq2[K, S], error)
}

func (s loadSource[K, S]) Check(proc any) error { return checkHandler[K, S](proc) }

func (s loadSource[K, S]) Rows(ctx context.Context, read ReadTopic, keys serde.Serde[K]) ([]engine.InitialRow[K], error) {
	seq, err := s.load(ctx)
	if err != nil {
		return nil, err
	}
	return seqSource[K, S]{seq: seq}.Rows(ctx, read, keys)
}
