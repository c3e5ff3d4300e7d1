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
	config.PrintProblems(stdout, warnings, err)
	if err != nil {
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
