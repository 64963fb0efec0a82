package kstate

import (
	"errors"
	"fmt"

	"github.com/kstate/kstate/internal/engine"
)

// GroupBy re-keys one input topic (Topology.GroupBy): its records are
// grouped by Key(record key, decoded value) instead of their record key.
// Like Kafka Streams' groupBy, this goes through an internal topic,
// "<ApplicationID>-repartition", created at start with the inputs'
// partition count (delete cleanup policy):
//
//  1. Each record of the input is decoded, its grouping key computed and
//     encoded with Topology.KeySerde, and a record with that key, the
//     original value bytes, timestamp and headers (plus a
//     "kstate.repartition.input" header naming the input) is produced to
//     partition murmur2(key) mod N of the repartition topic — in the same
//     Kafka transaction as the consumed input offsets. Decode errors and
//     Key's errors meet OnDecodeError.
//  2. The repartition topic is read (read_committed) as one more input:
//     its records reach HandleInputRows under their new key, decoded with
//     the input's decoder.
//
// Both stages are exactly-once: a record is forwarded once in committed
// data, and processed once. Records of the input need not be keyed (a nil
// record key is fine). A ValueFromRecord decoder of the input sees, in
// stage 2, the repartition record (its partition, offset and headers) with
// Topic set to the input topic. With GroupBy the group uses the range
// assignor, as with several inputs (see Input): stop every instance before
// adding or removing one. RunToEnd does not support GroupBy
// (ErrGroupByRunToEnd).
type GroupBy[K, I any] struct {
	// Topic (required) is the input topic to re-key: one of Inputs or
	// InputTopics.
	Topic string
	// Key (required) returns the grouping key of a record of Topic from
	// its record key (nil when the record has none) and its decoded value.
	// It must be deterministic. An error (or a panic, which fails the
	// batch) is handled like a decode error.
	Key func(recordKey []byte, value I) (K, error)
}

// RepartitionTopic is the internal topic of Topology.GroupBy:
// "<ApplicationID>-repartition".
func (a *App[K, I, O]) RepartitionTopic() string { return a.cfg.repartitionTopic() }

func (c *config[K, I, O]) repartitionTopic() string { return c.ApplicationID + "-repartition" }

// ErrGroupByRunToEnd is returned by RunToEnd for an application with
// Topology.GroupBy: a bounded run's end would have to include the records
// its own first stage writes to the repartition topic after the start,
// which is not supported; use Run.
var ErrGroupByRunToEnd = errors.New("kstate: RunToEnd does not support Topology.GroupBy (the repartition topic's end is not known at start); use Run")

// checkGroupBy validates GroupBy; "" when valid.
func (c *config[K, I, O]) checkGroupBy() string {
	seen := map[string]bool{}
	for i, g := range c.GroupBy {
		found := false
		for _, in := range c.inputList() {
			found = found || in.Topic == g.Topic
		}
		switch {
		case !found:
			return fmt.Sprintf("Topology.GroupBy[%d]: topic %q is not an input topic (Topology.Inputs)", i, g.Topic)
		case g.Key == nil:
			return fmt.Sprintf("Topology.GroupBy[%d] (topic %q): Key is required", i, g.Topic)
		case seen[g.Topic]:
			return fmt.Sprintf("Topology.GroupBy[%d]: topic %q is listed twice", i, g.Topic)
		}
		seen[g.Topic] = true
	}
	return ""
}

// groupKeys returns the engine's per-input key functions (the repartition
// topic last, with none), nil without GroupBy.
func (c *config[K, I, O]) groupKeys() []func([]byte, I) ([]byte, error) {
	if len(c.GroupBy) == 0 {
		return nil
	}
	in := c.inputList()
	out := make([]func([]byte, I) ([]byte, error), len(in)+1)
	for _, g := range c.GroupBy {
		for i, x := range in {
			if x.Topic != g.Topic {
				continue
			}
			key, ks := g.Key, c.KeySerde
			out[i] = func(recordKey []byte, v I) ([]byte, error) {
				k, err := key(recordKey, v)
				if err != nil {
					return nil, err
				}
				b, err := ks.Serialize(k)
				if err != nil {
					return nil, fmt.Errorf("encode the grouping key %#v: %w", k, err)
				}
				return b, nil
			}
		}
	}
	return out
}

// engineTopics returns the coordinator's input topics: the inputs, and
// the repartition topic last with GroupBy.
func (c *config[K, I, O]) engineTopics() []string {
	ts := c.inputTopics()
	if len(c.GroupBy) > 0 {
		ts = append(ts, c.repartitionTopic())
	}
	return ts
}

// engineDecoders returns the engine's decoders of engineTopics (the
// repartition topic's records are decoded by the input they name).
func (c *config[K, I, O]) engineDecoders() []engine.InputDecoder[I] {
	ds := c.inputDecoders()
	if len(c.GroupBy) > 0 {
		ds = append(ds, engine.InputDecoder[I]{})
	}
	return ds
}

// repartitionInput is the index of the repartition topic among
// engineTopics; 0: none.
func (c *config[K, I, O]) repartitionInput() int {
	if len(c.GroupBy) == 0 {
		return 0
	}
	return len(c.inputList())
}

// repartitionTopicOrNone is the coordinator's RepartitionTopic.
func (c *config[K, I, O]) repartitionTopicOrNone() string {
	if len(c.GroupBy) == 0 {
		return ""
	}
	return c.repartitionTopic()
}
