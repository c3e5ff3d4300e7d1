package main

import (
	"fmt"
	"io"
	"log/slog"

	"github.com/flexway/flexway/server/config"
)

// validate loads the configuration and builds the gateway exactly as serve
// does, and loads server.tls's files, without opening listeners; it prints
// every error and warning.
// Errors make it fail (exit 1); warnings alone do not.
func validate(path string, stdout io.Writer) error {
	cfg, warnings, err := config.Load(path)
	config.PrintProblems(stdout, warnings, err)
	if err != nil {
		return errSilent
	}
	gw, err := build(cfg, slog.New(slog.DiscardHandler), nil, nil)
	if err != nil {
		fmt.Fprintln(stdout, "error:", err)
		return errSilent
	}
	gw.close()
	// The listeners' certificate and key are read as serve reads them.
	if _, err := serverTLS(cfg.Server.TLS); err != nil {
		fmt.Fprintln(stdout, "error:", err)
		return errSilent
	}
	pending := notYetEnforced(cfg)
	for _, p := range pending {
		fmt.Fprintln(stdout, "note:", p)
	}
	fmt.Fprintf(stdout, "%s: ok (%d warnings, %d notes)\n", path, len(warnings), len(pending))
	return nil
}
