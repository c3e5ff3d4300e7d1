package main

import (
	"slices"

	"github.com/flexway/flexway/server/config"
)

// notYetEnforced lists the configured features this build loads and
// validates but does not enforce or serve yet, one key path and sentence
// each, so that an operator is not misled by a configuration that loads.
// Each line goes away when its feature lands.
func notYetEnforced(cfg *config.Config) []string {
	var out []string
	add := func(path, what string) { out = append(out, path+": not yet in this build: "+what) }
	if cfg.Telemetry.OTLPEndpoint != "" {
		add("telemetry.otlp_endpoint", "metrics and traces are not exported over OTLP (/metrics is served)")
	}
	add("traces", "no trace spans are recorded or passed upstream")
	slices.Sort(out)
	return out
}
