package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime/debug"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// errSilent is returned when the error was already printed.
var errSilent = errors.New("failed")

const usage = `usage: flexway <command> [flags]

commands:
  serve    --config FILE   run the gateway (HTTP and gRPC listeners)
  validate --config FILE   check a configuration: every error (exit 1) and warning (exit 0)
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
	switch cmd {
	case "serve":
		if err := fs.Parse(rest); err != nil {
			return errSilent
		}
		return serve(ctx, *configPath, stdout, stderr, nil)
	case "validate":
		if err := fs.Parse(rest); err != nil {
			return errSilent
		}
		return validate(*configPath, stdout)
	case "version":
		fmt.Fprintln(stdout, "flexway", versionString())
		return nil
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprintf(stderr, "flexway: unknown command %q\n%s", cmd, usage)
	return errSilent
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
