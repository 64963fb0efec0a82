package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/kstate/kstate/kafka"
)

func newDemoCmd() *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the end-to-end example on an embedded in-process Kafka",
		Long: `demo starts an in-process Kafka cluster (franz-go's kfake), runs the
example applications against it and prints what they produce. It exits
non-zero unless every expected value was observed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			return runDemo(ctx, cmd.OutOrStdout())
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 2*time.Minute, "give up after this long")
	return cmd
}

func runDemo(ctx context.Context, w io.Writer) error {
	emb, err := kafka.NewEmbedded(kafka.EmbeddedOptions{Topics: map[string]int{"demo-input": 3}})
	if err != nil {
		return err
	}
	defer emb.Close()
	fmt.Fprintf(w, "embedded Kafka at %v\n", emb.Brokers())

	p, err := kafka.NewProducer(emb.Brokers())
	if err != nil {
		return err
	}
	defer p.Close()
	in := []kafka.Record{
		{Topic: "demo-input", Key: []byte("a"), Value: []byte("1")},
		{Topic: "demo-input", Key: []byte("a"), Value: []byte("2")},
		{Topic: "demo-input", Key: []byte("b"), Value: []byte("3")},
	}
	if err := p.Produce(ctx, in...); err != nil {
		return err
	}
	got, err := kafka.ReadAll(ctx, emb.Brokers(), "demo-input")
	if err != nil {
		return err
	}
	for _, r := range got {
		fmt.Fprintf(w, "  partition %d offset %d  %s=%s\n", r.Partition, r.Offset, r.Key, r.Value)
	}
	if len(got) != len(in) {
		return fmt.Errorf("demo: read back %d records, produced %d", len(got), len(in))
	}
	fmt.Fprintln(w, "demo: ok")
	return nil
}
