package kstate

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"os"

	"github.com/kstate/kstate/internal/initial"
	"github.com/kstate/kstate/serde"
	"github.com/kstate/kstate/statereader"
)

// InitialState is the initial state of an application, applied through the
// processor's HandleInitialState on the application's first run only. Build
// one with InitialStateFromSeq or InitialStateFromTopic; the processor must
// implement processor.InitialStateHandler[K, S] for the rows' type S.
//
// "First run" is decided per partition: a partition whose changelog holds
// no committed batch and whose group has no committed offset gets the rows
// whose keys hash to it (Kafka's murmur2 partitioner, so the input topic
// must be partitioned that way), in the same transaction as its first
// micro-batch, together with a marker that prevents a second application.
type InitialState[K any] interface {
	initial.Source[K]
}

// InitialStateFromSeq takes the initial state from a Go iterator of (key,
// value) pairs, e.g. read from a file. Several rows per key are allowed.
// The iterator is consumed once per Run, when the first partition needs it,
// and its rows are kept in memory for the rest of the Run.
func InitialStateFromSeq[K, S any](rows iter.Seq2[K, S]) InitialState[K] {
	return initial.FromSeq(rows)
}

// InitialStateFromTopic takes the initial state from a topic read from
// beginning to end (read_committed); record keys are grouping keys (decoded
// with Topology.KeySerde) and values are decoded with codec.
func InitialStateFromTopic[K, S any](topic string, codec serde.Deserializer[S]) InitialState[K] {
	return initial.FromTopic[K](topic, codec)
}

// InitialStateFromJSONL takes the initial state from a JSON-lines file
// written by `kstate state export` (one statereader.Entry per line: the
// partition, grouping key, variable and decoded value of an old
// application's state), to migrate or repair state into a new application.
// decode maps each entry to a row (key, value) of the new application, or
// returns ok false to skip it; an error stops the Run. Rows keep the file's
// order (partition, variable, key, list/map position), several per key.
// The file is read when the first partition needs it, once per Run.
//
// The export also holds the old application's timers, each partition's
// after its entries: a line with Kind "timer", no Variable, and the timer's
// expiry (ms since the epoch) as Value. To keep them, decode maps such a
// line to a row whose HandleInitialState calls Handle.RegisterTimer with
// that expiry (ProcessingTime and EventTime; the key is the current key
// there); a decode that skips lines of unknown variables drops them.
func InitialStateFromJSONL[K, S any](path string, decode func(e statereader.Entry) (key K, value S, ok bool, err error)) InitialState[K] {
	return initial.FromLoad(func(ctx context.Context) (iter.Seq2[K, S], error) {
		type row struct {
			k K
			v S
		}
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("initial state from %s: %w", path, err)
		}
		defer f.Close()
		var rows []row
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 0, 64<<10), 64<<20)
		for line := 1; sc.Scan(); line++ {
			if len(bytes.TrimSpace(sc.Bytes())) == 0 {
				continue
			}
			var e statereader.Entry
			if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
				return nil, fmt.Errorf("initial state from %s line %d: %w", path, line, err)
			}
			k, v, ok, err := decode(e)
			if err != nil {
				return nil, fmt.Errorf("initial state from %s line %d (variable %q key %q): %w", path, line, e.Variable, e.Key, err)
			}
			if ok {
				rows = append(rows, row{k, v})
			}
			if line%4096 == 0 && ctx.Err() != nil {
				return nil, ctx.Err()
			}
		}
		if err := sc.Err(); err != nil {
			return nil, fmt.Errorf("initial state from %s: %w", path, err)
		}
		return func(yield func(K, S) bool) {
			for _, r := range rows {
				if !yield(r.k, r.v) {
					return
				}
			}
		}, nil
	})
}
