package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"
)

// errUsage marks command-line errors; the flag package has explained them.
var errUsage = errors.New("usage error")

// noFileWanted is the open-files limit the memory phase needs: the
// harness's and the gateway's 1,000 caller connections, the gateway's 1,000
// upstream ones and the sample's, with room to spare.
const noFileWanted = 4 * openStreamCount

// main wires SIGINT and SIGTERM to run's context: an interrupted run still
// stops its children and removes its temporary directory. Started with
// relayModeArg first, the binary is the relay path's TCP relay instead; with
// holdModeArg first, the memory phase's bare net/http server; with
// goproxyModeArg first, the Go floor.
func main() {
	runMode(os.Args)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	switch {
	case errors.Is(err, errUsage):
		os.Exit(2)
	case err != nil:
		fmt.Fprintln(os.Stderr, "flexway-load:", err)
		os.Exit(1)
	}
}

// options is the command line.
type options struct {
	flexwayPath string
	samplePath  string
	scale       float64
	out         string
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("flexway-load", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	fs.StringVar(&o.flexwayPath, "flexway", "bin/flexway", "the gateway binary (make build)")
	fs.StringVar(&o.samplePath, "sample", "bin/flexway-sample", "the sample upstream binary (make build)")
	fs.Float64Var(&o.scale, "duration-scale", 1, "multiplies every phase's duration and request count (0.2: smoke run)")
	fs.StringVar(&o.out, "out", "", "also write the report, as Markdown, to this file")
	if err := fs.Parse(args); err != nil {
		return o, fmt.Errorf("%w: %w", errUsage, err)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "flexway-load: unexpected arguments %q\n", fs.Args())
		return o, errUsage
	}
	if !(o.scale > 0 && o.scale <= 100) {
		fmt.Fprintln(stderr, "flexway-load: --duration-scale must be in (0, 100]")
		return o, errUsage
	}
	return o, nil
}

// run measures, prints the report to stdout and, with --out, writes it to a
// file. It fails when a process cannot be started or a phase cannot run; a
// missed target is not a failure.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	// Absolute, because each child runs in its own directory.
	for _, p := range []*string{&o.flexwayPath, &o.samplePath} {
		if _, err := os.Stat(*p); err != nil {
			return fmt.Errorf("%w (run make build first, or pass --flexway and --sample)", err)
		}
		if *p, err = filepath.Abs(*p); err != nil {
			return err
		}
	}
	if _, err := raiseNoFile(noFileWanted); err != nil {
		fmt.Fprintln(stderr, "flexway-load: warning:", err)
	}
	dir, err := os.MkdirTemp("", "flexway-load-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir) // runs last: after every child has stopped

	rep := newReport(o)
	b := &bench{opts: o, rep: rep, progress: stderr}
	if err := b.measure(ctx, dir); err != nil {
		return err
	}

	if err := writeReport(stdout, rep); err != nil {
		return err
	}
	if o.out != "" {
		if err := os.WriteFile(o.out, rep.markdown(), 0o644); err != nil {
			return err
		}
	}
	if len(rep.Problems) > 0 {
		return fmt.Errorf("%d phase(s) failed; see Problems in the report", len(rep.Problems))
	}
	return nil
}

// measure starts the sample and a process for every path in front of it
// (the gateway, the pipeline gateway, the Go floor, nginx when it is
// installed, the relay), runs every phase, and stops them; the memory
// phase starts and stops its own processes. A phase that fails is recorded
// in the report and the next one runs; only a failure to start the
// processes, or an interrupt, ends it early.
func (b *bench) measure(ctx context.Context, dir string) error {
	smp, err := startSample(ctx, b.opts, dir, "sample", pacedChunkDelay, pacedChunks)
	if err != nil {
		return err
	}
	defer smp.stop()
	key := "sk-load-" + randomHex(16)
	gw, err := startGateway(ctx, b.opts, dir, "gateway", smp.base, key)
	if err != nil {
		return err
	}
	defer gw.stop()
	pl, err := startPipeline(ctx, b.opts, dir, "gateway-pipeline", smp.base, key)
	if err != nil {
		return err
	}
	defer pl.stop()
	gp, err := startGoProxy(ctx, dir, "goproxy", smp.base)
	if err != nil {
		return err
	}
	defer gp.stop()
	rly, err := startRelay(ctx, dir, "relay", hostPort(smp.base))
	if err != nil {
		return err
	}
	defer rly.stop()
	// The middle processes whose exit during the run is a problem.
	middles := []*proc{gw.proc, pl.proc, gp.proc, rly.proc}

	b.hz = clockTicks()
	b.load = &load{client: newClient(maxInFlight), key: key}
	const chat = "/v1/chat/completions"
	b.paths[pathDirect] = &path{name: "direct", url: smp.base + chat}
	b.paths[pathFlexway] = &path{name: "flexway", url: gw.base + chat, cpu: groupMeter(gw.proc)}
	b.paths[pathPipeline] = &path{name: "pipeline", url: pl.base + chat, model: pipelineAlias, cpu: groupMeter(pl.proc)}
	b.paths[pathGoFloor] = &path{name: "gofloor", url: "http://" + gp.addr + chat, cpu: groupMeter(gp.proc)}
	b.paths[pathRelay] = &path{name: "relay", url: "http://" + rly.addr + chat, cpu: groupMeter(rly.proc)}
	if bin, err := findNginx(); err != nil {
		b.rep.NginxAbsent = err.Error()
		b.logf("nginx absent: %v", err)
	} else {
		ng, err := startNginx(ctx, bin, dir, "nginx", hostPort(smp.base))
		if err != nil {
			return err
		}
		defer ng.stop()
		middles = append(middles, ng.proc)
		b.rep.Nginx = bin + " (" + nginxVersion(bin) + ")"
		b.paths[pathNginx] = &path{name: "nginx", url: "http://" + ng.addr + chat, cpu: groupMeter(ng.proc)}
	}

	phases := []func(context.Context) error{b.concurrencyOne, b.fixedRateLoad, b.throughput, b.paced}
	for _, phase := range phases {
		if err := phase(ctx); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			b.rep.Problems = append(b.rep.Problems, err.Error())
			b.logf("phase failed: %v", err)
		}
	}
	for _, p := range middles {
		if p.exited() {
			b.rep.Problems = append(b.rep.Problems, p.name+" exited during the run: "+p.logTail())
		}
	}
	b.rep.CacheHits = b.load.cacheHits.Load()
	if b.rep.CacheHits > 0 {
		b.rep.Problems = append(b.rep.Problems, fmt.Sprintf("%d answers came from the pipeline gateway's response cache, which every call should miss", b.rep.CacheHits))
	}
	// Free the CPUs and memory for the memory phase's fresh processes.
	for _, p := range middles {
		p.stop()
	}
	smp.stop()
	b.load.client.CloseIdleConnections()
	b.rep.Audit = auditState(gw.audit)

	// Flexway's memory first; then, each alone, the Go floor's and the
	// bare net/http server's, measured the same way.
	for _, phase := range []func(context.Context, string) error{b.streamMemory, b.goFloorMemory, b.holdMemory} {
		if err := phase(ctx, dir); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			b.rep.Problems = append(b.rep.Problems, err.Error())
			b.logf("phase failed: %v", err)
		}
	}
	return nil
}

// runOutput runs a short command and returns its standard output.
func runOutput(name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).Output()
	return string(out), err
}
