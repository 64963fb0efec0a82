// Command kstate is kstate's command-line tool: `kstate demo` runs the
// end-to-end example on an embedded in-process Kafka, `kstate version`
// prints the build's version. Every command has --help.
package main

import (
	"context"
	"os"

	"github.com/spf13/cobra"
)

func main() {
	os.Exit(runCLI(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "kstate",
		Short:         "kstate: stateful stream processing on Apache Kafka",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newVersionCmd(), newDemoCmd(), newBenchCmd(), newStateCmd(), newResetCmd(), newSkipCmd())
	return root
}
