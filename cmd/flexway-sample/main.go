package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"
)

// shutdownTimeout bounds how long run waits for in-flight requests once its
// context is cancelled before it cancels them and closes the connections.
const shutdownTimeout = 5 * time.Second

// errUsage marks errors in the command line; the flag package has already
// explained them on stderr.
var errUsage = errors.New("usage error")

// main wires SIGINT and SIGTERM to run's context and turns its error into
// the exit status: 2 for command-line errors, 1 for others.
func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	switch {
	case errors.Is(err, errUsage):
		os.Exit(2)
	case err != nil:
		fmt.Fprintf(os.Stderr, "flexway-sample: %v\n", err)
		os.Exit(1)
	}
}

// run parses args, listens, prints the listening address to stdout, logs one
// line per request to stderr and serves until ctx is cancelled. It then shuts
// the server down gracefully and returns nil; in-flight requests get
// [shutdownTimeout] to finish before they are cancelled. Command-line errors
// wrap [errUsage].
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	listen, opts, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	opts.logger = slog.New(slog.NewTextHandler(stderr, nil))

	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", listen, err)
	}
	// Request contexts outlive ctx so that shutdown is graceful; they are
	// cancelled only when the grace period runs out.
	baseCtx, cancelRequests := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelRequests()
	srv := &http.Server{
		Handler:           newHandler(opts),
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return baseCtx },
	}
	fmt.Fprintf(stdout, "flexway-sample listening on http://%s%s (wire: %s; models: %s; a sample, not a real model)\n",
		ln.Addr(), wireBases[opts.wire], opts.wire, strings.Join(opts.models, ", "))

	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()

	select {
	case err := <-serveErr:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		cancelRequests()
		_ = srv.Close()
	}
	if err := <-serveErr; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}

// wireBases is the path each wire's base URL ends with, as printed once
// listening: what a client (or a Flexway backend's url) is given.
var wireBases = map[string]string{
	wireOpenAI:    "/v1",
	wireAnthropic: "",
	wireGemini:    "/v1beta",
	wireA2A:       "/",
}

// parseFlags turns the command line into the listen address and handler
// options. Usage and parse errors are printed to stderr.
func parseFlags(args []string, stderr io.Writer) (string, options, error) {
	fs := flag.NewFlagSet("flexway-sample", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: flexway-sample [flags]\n\n"+
			"flexway-sample is a local OpenAI-compatible sample model server, not a real model.\n\nFlags:")
		fs.PrintDefaults()
	}
	def := defaultOptions()
	listen := fs.String("listen", "127.0.0.1:8000", "address to listen on (port 0 picks a free port)")
	name := fs.String("name", def.name, "owner reported by GET /v1/models")
	wire := fs.String("wire", wireOpenAI, "wire format served: "+strings.Join(wires, ", "))
	models := fs.String("models", "", "comma-separated model names served (default per wire: "+
		"openai sample-small,sample-large,sample-words; anthropic sample-claude; gemini sample-gemini,sample-gemini-embedding; a2a sample-agent)")
	chunkDelay := fs.Duration("chunk-delay", def.chunkDelay, "delay before each streamed content chunk")
	chunks := fs.Int("chunks", def.chunks, "number of content chunks a streamed answer is split into")
	bearer := fs.String("require-bearer", "", "when set, require \"Authorization: Bearer TOKEN\" on every request (openai and a2a wires)")
	key := fs.String("require-key", "", "when set, require this API key as x-api-key (anthropic wire) or x-goog-api-key (gemini wire)")
	rlKey := fs.String("rate-limit-key", "", "when set, answer 429 with Retry-After to every request bearing this API key (as bearer, x-api-key or x-goog-api-key), to show a credential pool resting one key")
	rlRetry := fs.Int("rate-limit-retry-after", 30, "the Retry-After, in seconds, of --rate-limit-key's 429")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return "", options{}, err
		}
		return "", options{}, fmt.Errorf("%w: %w", errUsage, err)
	}

	modelList := *models
	if modelList == "" {
		modelList = strings.Join(defaultModels(*wire), ",")
	}
	opts := options{
		wire:                *wire,
		requireKey:          *key,
		name:                strings.TrimSpace(*name),
		models:              splitModels(modelList),
		chunkDelay:          *chunkDelay,
		chunks:              *chunks,
		requireBearer:       *bearer,
		rateLimitKey:        *rlKey,
		rateLimitRetryAfter: *rlRetry,
	}
	var problem string
	switch {
	case fs.NArg() > 0:
		problem = fmt.Sprintf("unexpected arguments: %q", fs.Args())
	case !slices.Contains(wires, *wire):
		problem = fmt.Sprintf("--wire must be one of %s, not %q", strings.Join(wires, ", "), *wire)
	case *bearer != "" && (*wire == wireAnthropic || *wire == wireGemini):
		problem = "--require-bearer is for the openai and a2a wires; use --require-key"
	case *key != "" && (*wire == wireOpenAI || *wire == wireA2A):
		problem = "--require-key is for the anthropic and gemini wires; use --require-bearer"
	case *rlRetry < 1:
		problem = "--rate-limit-retry-after must be at least 1"
	case strings.TrimSpace(*listen) == "":
		problem = "--listen must not be empty"
	case opts.name == "":
		problem = "--name must not be empty"
	case len(opts.models) == 0:
		problem = "--models must name at least one model"
	case opts.chunkDelay < 0:
		problem = "--chunk-delay must not be negative"
	case opts.chunks < 1 || opts.chunks > maxChunks:
		problem = fmt.Sprintf("--chunks must be between 1 and %d", maxChunks)
	}
	if problem != "" {
		fmt.Fprintf(stderr, "flexway-sample: %s\n", problem)
		fs.Usage()
		return "", options{}, fmt.Errorf("%w: %s", errUsage, problem)
	}
	return *listen, opts, nil
}

// splitModels splits a comma-separated list, trimming spaces and dropping
// empty and repeated names.
func splitModels(s string) []string {
	var out []string
	seen := map[string]bool{}
	for _, m := range strings.Split(s, ",") {
		m = strings.TrimSpace(m)
		if m == "" || seen[m] {
			continue
		}
		seen[m] = true
		out = append(out, m)
	}
	return out
}
