package main

import (
	"fmt"
	"io"

	"github.com/flexway/flexway/cmd/flexway/gateway"
	"github.com/flexway/flexway/server/config"
)

// validate loads the configuration and builds the gateway exactly as serve
// does, server.tls's files included, without opening the budget ledger,
// the audit log or listeners; it prints every error and warning.
// Errors make it fail (exit 1); warnings alone do not.
func validate(path string, stdout io.Writer) error {
	cfg, warnings, err := config.Load(path)
	for _, w := range warnings {
		fmt.Fprintln(stdout, w.Error()) // "file:line: warning: path: message"
	}
	if err != nil {
		if ps, ok := err.(config.Problems); ok {
			for _, p := range ps {
				fmt.Fprintln(stdout, "error:", p.Error())
			}
		} else {
			fmt.Fprintln(stdout, "error:", err)
		}
		return errSilent
	}
	gw, err := gateway.New(gateway.Options{Config: cfg, Version: version, SkipLedger: true, SkipAudit: true})
	if err != nil {
		fmt.Fprintln(stdout, "error:", err)
		return errSilent
	}
	_ = gw.Close()
	fmt.Fprintf(stdout, "%s: ok (%d warnings)\n", path, len(warnings))
	return nil
}
