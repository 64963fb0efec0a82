package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/kstate/kstate/internal/skip"
)

type skipFlags struct {
	brokers   string
	app       string
	topic     string
	partition int32
	offset    int64
	sec       securityFlags
}

func newSkipCmd() *cobra.Command {
	f := skipFlags{partition: -1, offset: -1}
	cmd := &cobra.Command{
		Use:   "skip --brokers B --app A --topic T --partition P --offset O",
		Short: "Make a stopped application's next run skip one input record (a DecodeError's record)",
		Long: `Make the next run of a stopped application drop one input record: the one
a kstate.DecodeError names (its topic, partition and offset) when it stops
Run under the Fail policy. The next run processes the records before it
from the group's committed offset, drops that one record (counted in
Counters.Skipped, kstate_skipped_records_total, logged at Warn) and goes on with
the records after it: nothing else is skipped and the state is kept. Same
as kstate.SkipRecord.

The request is written to the partition's changelog ("<app>-changelog"),
and the batch that passes the offset consumes it in its own transaction:
it is applied exactly once, through crashes. A second skip of the same
partition before the next run replaces the first.

Refused, with nothing written (exit code 4): a group with members (stop
every instance; a stopped static member stays one until
Options.Kafka.SessionTimeout passes); an offset the group committed already (it
was processed); an offset outside the partition's records; an application
without a changelog, or with one of another partition count than the
topic.

Exit codes: 0 success; 1 error; 2 usage; 4 refused.`,
		Example: `  kstate skip --brokers localhost:9092 --app orders --topic orders-in --partition 2 --offset 175`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runSkip(cmd.Context(), cmd.OutOrStdout(), f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.brokers, "brokers", "", "Kafka bootstrap servers, comma-separated; required")
	fl.StringVar(&f.app, "app", "", "the application id (Options.ApplicationID, its group id); required")
	fl.StringVar(&f.topic, "topic", "", "the input topic of the record (DecodeError.Topic); required")
	fl.Int32Var(&f.partition, "partition", -1, "the record's partition (DecodeError.Partition); required")
	fl.Int64Var(&f.offset, "offset", -1, "the record's offset (DecodeError.Offset); required")
	f.sec.add(cmd)
	return cmd
}

func runSkip(ctx context.Context, out io.Writer, f skipFlags) error {
	if f.brokers == "" || f.app == "" || f.topic == "" || f.partition < 0 || f.offset < 0 {
		return usageErr("--brokers, --app, --topic, --partition and --offset are required")
	}
	if err := checkAppFlag("--app", f.app); err != nil {
		return err
	}
	cc, err := f.sec.client(strings.Split(f.brokers, ","))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	res, err := skip.Run(ctx, skip.Request{
		Client: cc, App: f.app, Topic: f.topic, Partition: f.partition, Offset: f.offset,
		TxnTimeout: 10 * time.Second,
	})
	if errors.Is(err, skip.ErrRefused) {
		return &codeError{exitRefused, err}
	}
	if err != nil {
		return err
	}
	from := "the start of its retained records (no committed offset)"
	if res.Committed >= 0 {
		from = fmt.Sprintf("committed offset %d", res.Committed)
	}
	fmt.Fprintf(out, "skip recorded: the next run of %q processes topic %q partition %d from %s, drops the record at offset %d, and goes on\n",
		f.app, f.topic, f.partition, from, f.offset)
	return nil
}
