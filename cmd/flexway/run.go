package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime/debug"

	"github.com/flexway/flexway/server/report"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// errSilent is returned when the error was already printed.
var errSilent = errors.New("failed")

const usage = `usage: flexway <command> [flags]

commands:
  serve    --config FILE   run the gateway (HTTP and gRPC listeners)
  validate --config FILE   check a configuration: every error (exit 1) and warning (exit 0)
  ledger init --config FILE
                           initialise a new Redis budget ledger (ai.budget.store.type: redis):
                           writes its marker, so that metered calls are served
  ledger accept-rollback --config FILE
                           accept a Redis budget ledger that lost commits (replicas refuse
                           metered calls with 503 once they see it): meter again from what it holds
  report   --audit PATH [--month YYYY-MM | --from DATE --to DATE] [--by tenant,agent,backend,model]
           [--format table|csv|json] [--tz ZONE] [--skip-bad]
                           chargeback from the audit log: calls, tokens, euros per tenant (--help)
  version                  print the version
`

// run executes one command line; stdout and stderr receive its output.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errSilent
	}
	cmd, rest := args[0], args[1:]
	fs := flag.NewFlagSet("flexway "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", "flexway.yaml", "configuration file")
	parse := func() error {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return err
			}
			return errSilent
		}
		if fs.NArg() > 0 {
			fmt.Fprintf(stderr, "flexway %s: unexpected argument %q\n", cmd, fs.Arg(0))
			return errSilent
		}
		return nil
	}
	switch cmd {
	case "serve":
		if err := parse(); err != nil {
			return helpIsNoError(err)
		}
		return serve(ctx, *configPath, stdout, stderr, serveEnv{})
	case "validate":
		if err := parse(); err != nil {
			return helpIsNoError(err)
		}
		return validate(*configPath, stdout)
	case "ledger":
		if len(rest) == 0 || (rest[0] != "init" && rest[0] != "accept-rollback") {
			fmt.Fprintf(stderr, "flexway ledger: want the subcommand init or accept-rollback\n%s", usage)
			return errSilent
		}
		sub := rest[0]
		rest = rest[1:]
		if err := parse(); err != nil {
			return helpIsNoError(err)
		}
		if sub == "accept-rollback" {
			return ledgerAcceptRollback(ctx, *configPath, stdout, stderr)
		}
		return ledgerInit(ctx, *configPath, stdout, stderr)
	case "report":
		if err := report.Run(rest, stdout, stderr); err != nil {
			return fmt.Errorf("report: %w", err)
		}
		return nil
	case "version", "--version", "-version":
		if len(rest) > 0 {
			fmt.Fprintf(stderr, "flexway version: unexpected argument %q\n", rest[0])
			return errSilent
		}
		fmt.Fprintln(stdout, "flexway", versionString())
		return nil
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprintf(stderr, "flexway: unknown command %q\n%s", cmd, usage)
	return errSilent
}

// helpIsNoError turns a -h request into success (the usage was printed).
func helpIsNoError(err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	return err
}

// versionString is the build's version and, when known, its VCS revision.
func versionString() string {
	v := version
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				v += " (" + s.Value[:12] + ")"
			}
		}
		v += " " + bi.GoVersion
	}
	return v
}
