// Command testapp runs one kstate application instance with one of the
// SPEC's example processors (internal/testprocs) or the exactly-once test
// processor (integration/testapp/eos), for tests that need a real child
// process: crash tests kill it with SIGKILL at random points, scale tests
// start and stop several. SIGTERM/SIGINT shut it down gracefully (exit 0);
// an error of Run exits 1. With KSTATE_TEST_KILLPOINT=<point>@<n> it
// SIGKILLs itself at the n-th occurrence of an engine kill point (see
// integration/testapp/cli). With -proc eos -dead-letter the DeadLetter
// policies are on, for the input's poison values and fail rows.
//
//	go run ./integration/testapp -brokers 127.0.0.1:9092 -app counter \
//	    -instance i1 -state /tmp/s1 -in words -out counts -proc counter
package main

import (
	"os"

	"github.com/kstate/kstate/integration/testapp/cli"
)

func main() { os.Exit(cli.Main(os.Args[1:])) }
