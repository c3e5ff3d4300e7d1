// Command flexway is the Flexway AI gateway.
//
//	flexway serve    --config flexway.yaml   run the gateway
//	flexway validate --config flexway.yaml   check a configuration, print every error and warning
//	flexway ledger init --config flexway.yaml  initialise a new Redis budget ledger
//	flexway ledger accept-rollback --config flexway.yaml  accept a Redis ledger that lost commits
//	flexway version                          print the version
//
// main only wires signals; [run] does the work and is what tests call.
// The first SIGINT or SIGTERM stops serve gracefully (open calls and
// streams may finish for up to 30 s); a second one exits at once.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	signals := make(chan os.Signal, 2)
	// Notify also catches a signal the parent set to be ignored (a
	// background job of a script ignores SIGINT), so the second signal
	// works in every shell.
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-signals
		cancel()
		<-signals
		fmt.Fprintln(os.Stderr, "flexway: second signal: stopping now")
		os.Exit(130)
	}()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if err != errSilent {
			fmt.Fprintln(os.Stderr, "flexway:", err)
		}
		os.Exit(1)
	}
}
