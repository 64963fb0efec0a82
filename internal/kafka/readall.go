package kafka

import (
	"context"
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ReadAll reads every partition of topic, read_committed, from the log start
// to the high watermark at call time, and returns the records ordered by
// partition, then offset. It is meant for tests and output checks.
//
// A transaction still open below that high watermark makes ReadAll wait for
// it to end (its records are returned if it commits); ctx bounds the wait.
func ReadAll(ctx context.Context, brokers []string, topic string) ([]Record, error) {
	return ClientConfig{Brokers: brokers}.ReadAll(ctx, topic)
}

// ReadAll is ReadAll with c's TLS, SASL and extra options.
func (c ClientConfig) ReadAll(ctx context.Context, topic string) ([]Record, error) {
	cl, err := kgo.NewClient(c.toolOpts()...)
	if err != nil {
		return nil, fmt.Errorf("kafka: read all of topic %q: %w", topic, err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)

	td, err := describeTopic(ctx, adm, topic)
	if err != nil {
		return nil, err
	}
	parts := make([]int32, 0, len(td.Partitions))
	for p := range td.Partitions {
		parts = append(parts, p)
	}
	slices.Sort(parts)

	var out []Record
	for _, p := range parts {
		f, err := newPartFetcher(ctx, cl, adm, topic, p)
		if err != nil {
			return nil, err
		}
		start, _, high, err := offsetsOf(ctx, adm, topic, p)
		if err != nil {
			return nil, err
		}
		f.pos, f.end = start, high
		for {
			recs, done, err := f.next(ctx)
			if err != nil {
				return nil, err
			}
			out = append(out, recs...)
			if done {
				break
			}
		}
	}
	return out, nil
}
