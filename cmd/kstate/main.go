// Command kstate is kstate's command-line tool: `kstate demo` runs the
// end-to-end example on an embedded in-process Kafka, `kstate version`
// prints the build's version. Every command has --help.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

func main() {
	if err := newRootCmd().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "kstate:", err)
		os.Exit(1)
	}
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "kstate",
		Short:         "kstate: stateful stream processing on Apache Kafka",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newVersionCmd(), newDemoCmd(), newBenchCmd())
	return root
}
