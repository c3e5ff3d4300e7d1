// Command flexway is the Flexway AI gateway.
//
//	flexway serve    --config flexway.yaml   run the gateway
//	flexway validate --config flexway.yaml   check a configuration, print every error and warning
//	flexway version                          print the version
//
// main only wires signals; [run] does the work and is what tests call.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		// After the first signal, a second one stops at once instead of
		// waiting for open streams.
		<-ctx.Done()
		stop()
	}()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if err != errSilent {
			fmt.Fprintln(os.Stderr, "flexway:", err)
		}
		os.Exit(1)
	}
}
