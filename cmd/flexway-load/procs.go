package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const (
	// startTimeout bounds how long a child may take to listen or be ready.
	startTimeout = 15 * time.Second
	// stopGrace is how long a child gets after SIGTERM before SIGKILL.
	stopGrace = 5 * time.Second
	// auditKeyEnv names the variable that carries the audit hash key to the
	// gateway; the configuration refers to it, never to the value.
	auditKeyEnv = "FLEXWAY_LOAD_AUDIT_KEY"
	// sampleModel is the model every request asks for.
	sampleModel = "sample-small"
)

// proc is a child process running in its own process group, so that
// stopping it stops everything it started.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string        // file receiving its stdout (after the first line) and stderr
	done chan struct{} // closed when it has exited
	err  error         // its exit error, valid after done
}

// startProc starts path with args and env, in dir, in a new process group.
// With waitLine it waits for the first line the child prints to stdout and
// returns it (a child that exits or prints nothing within startTimeout is an
// error); without, it returns as soon as the child has started, and the
// caller checks that it is ready its own way. Either way the child's stdout
// and stderr go to its log.
func startProc(ctx context.Context, name, path, dir string, args, env []string, waitLine bool) (*proc, string, error) {
	logPath := filepath.Join(dir, name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, "", err
	}
	cmd := exec.Command(path, args...)
	cmd.Dir = dir
	cmd.Env = env
	cmd.Stderr = logFile
	// Pdeathsig stops the child if the harness dies without cleaning up.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		logFile.Close()
		return nil, "", err
	}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, "", fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}

	first := make(chan string, 1)
	go func() {
		r := bufio.NewReader(stdout)
		line, _ := r.ReadString('\n')
		first <- strings.TrimSpace(line)
		// Keep draining so the child never blocks on a full pipe. The
		// child writes stderr through its own descriptor.
		_, _ = io.Copy(logFile, r)
		logFile.Close()
	}()
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	if !waitLine {
		return p, "", nil
	}

	timer := time.NewTimer(startTimeout)
	defer timer.Stop()
	select {
	case line := <-first:
		if line != "" {
			return p, line, nil
		}
		<-p.done
		return nil, "", fmt.Errorf("%s exited: %v\n%s", name, p.err, p.logTail())
	case <-timer.C:
		p.stop()
		return nil, "", fmt.Errorf("%s printed nothing within %s\n%s", name, startTimeout, p.logTail())
	case <-ctx.Done():
		p.stop()
		return nil, "", ctx.Err()
	}
}

// stop sends SIGTERM to the process group, then SIGKILL after stopGrace,
// and waits for the process to exit. It is safe to call more than once.
func (p *proc) stop() {
	pgid := -p.cmd.Process.Pid
	_ = syscall.Kill(pgid, syscall.SIGTERM)
	select {
	case <-p.done:
		// Reap anything else the group still holds.
		_ = syscall.Kill(pgid, syscall.SIGKILL)
	case <-time.After(stopGrace):
		_ = syscall.Kill(pgid, syscall.SIGKILL)
		<-p.done
	}
}

// exited reports whether the process has exited.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// logTail returns the last lines of the process's log, for error messages.
func (p *proc) logTail() string {
	b, _ := os.ReadFile(p.log)
	const keep = 2048
	if len(b) > keep {
		b = b[len(b)-keep:]
	}
	return string(bytes.TrimSpace(b))
}

// rssKiB returns the process's resident set size (VmRSS) in KiB.
func (p *proc) rssKiB() (int64, error) {
	return readStatusKiB(p.cmd.Process.Pid, "VmRSS")
}

// readStatusKiB reads one "Field:   123 kB" line of /proc/PID/status.
func readStatusKiB(pid int, field string) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		rest, ok := strings.CutPrefix(line, field+":")
		if !ok {
			continue
		}
		num, _, _ := strings.Cut(strings.TrimSpace(rest), " ")
		return strconv.ParseInt(num, 10, 64)
	}
	return 0, fmt.Errorf("/proc/%d/status has no %s", pid, field)
}

// sample is a running flexway-sample.
type sample struct {
	*proc
	base string // e.g. http://127.0.0.1:1234
}

// startSample starts the sample upstream on a free loopback port with the
// given pacing of streamed chunks.
func startSample(ctx context.Context, o options, dir, name string, chunkDelay time.Duration, chunks int) (*sample, error) {
	args := []string{
		"--listen", "127.0.0.1:0",
		"--models", sampleModel,
		"--chunk-delay", chunkDelay.String(),
		"--chunks", strconv.Itoa(chunks),
	}
	p, line, err := startProc(ctx, name, o.samplePath, dir, args, os.Environ(), true)
	if err != nil {
		return nil, err
	}
	// "flexway-sample listening on http://ADDR/v1 (models: ...)"
	_, rest, ok := strings.Cut(line, "listening on ")
	url, _, _ := strings.Cut(rest, " ")
	base, found := strings.CutSuffix(url, "/v1")
	if !ok || !found || !strings.HasPrefix(base, "http://") {
		p.stop()
		return nil, fmt.Errorf("%s: unexpected first line %q", name, line)
	}
	return &sample{proc: p, base: base}, nil
}

// gateway is a running `flexway serve`.
type gateway struct {
	*proc
	base  string // e.g. http://127.0.0.1:1234
	audit string // the configured audit log
}

// gatewayConfig is the configuration the harness runs Flexway on: one
// backend, one API key by its SHA-256, everything else left to the embedded
// defaults (the ledger beside the file), the audit log beside the file.
const gatewayConfig = `# Written by flexway-load for one run; removed when the run ends.
server:
  http: %[1]s
  grpc: %[2]s
identity:
  api_keys:
    - name: load
      key_sha256: %[3]s
      tenant: load
      agent: bench
ai:
  backends:
    sample:
      url: %[4]s/v1
      auth: {type: none}
      external: false
      models: [%[5]s]
      default_model: %[5]s
      capabilities: [chat]
audit:
  path: audit.jsonl
  hash_key: env:%[6]s
`

// pipelineAlias is the model the pipeline path asks for: the failover
// alias of pipelineConfig.
const pipelineAlias = "bench"

// pipelineConfig is gatewayConfig with a realistic policy set on, for the
// pipeline path: the alias pipelineAlias failing over from backend sample to
// sample-spare (both the same flexway-sample), a pool of two keys on
// backend sample (token files beside the configuration; the sample accepts
// any bearer), and one policy for the harness's tenant with a governance
// allowlist of the alias and both backends, per-minute caps far above what
// any phase sends, pii and secrets guardrails on the prompt and the answer
// (redact, deny, redact, redact: the harness's prompts and the sample's
// answers hold nothing they match), and the exact response cache, which
// every call misses because each call's user message is unique.
const pipelineConfig = `# Written by flexway-load for one run; removed when the run ends.
server:
  http: %[1]s
  grpc: %[2]s
identity:
  api_keys:
    - name: load
      key_sha256: %[3]s
      tenant: load
      agent: bench
ai:
  backend: sample
  aliases:
    %[7]s:
      strategy: failover
      targets:
        - {backend: sample, model: %[5]s}
        - {backend: sample-spare, model: %[5]s}
  cache:
    store: memory
    max_bytes: 64MiB
  backends:
    sample:
      url: %[4]s/v1
      credentials:
        strategy: round_robin
        keys:
          - {name: one, auth: {type: token_file, path: key-one}}
          - {name: two, auth: {type: token_file, path: key-two}}
      external: false
      models: [%[5]s]
      default_model: %[5]s
      capabilities: [chat]
    sample-spare:
      url: %[4]s/v1
      auth: {type: none}
      external: false
      models: [%[5]s]
      default_model: %[5]s
      capabilities: [chat]
  policies:
    - name: bench-pipeline
      match: {tenant: load}
      governance:
        models: [%[7]s]
        backends: [sample, sample-spare]
      budget: {requests_per_minute: 100000000, tokens_per_minute: 10000000000}
      guardrails:
        prompt:
          - {type: pii, action: redact}
          - {type: secrets, action: deny}
        response:
          - {type: pii, action: redact}
          - {type: secrets, action: redact}
      cache: {mode: exact, ttl: 1h}
audit:
  path: audit.jsonl
  hash_key: env:%[6]s
`

// pipelineKeyFiles are the token files of pipelineConfig's credential pool,
// written beside it.
var pipelineKeyFiles = []string{"key-one", "key-two"}

// startGateway writes gatewayConfig for upstream into its own directory
// under dir, starts `flexway serve` on it and waits for GET /readyz.
func startGateway(ctx context.Context, o options, dir, name, upstream, key string) (*gateway, error) {
	return startGatewayOn(ctx, o, dir, name, gatewayConfig, upstream, key)
}

// startPipeline is startGateway on pipelineConfig, with its key files.
func startPipeline(ctx context.Context, o options, dir, name, upstream, key string) (*gateway, error) {
	return startGatewayOn(ctx, o, dir, name, pipelineConfig, upstream, key)
}

// writeGatewayConfig writes config (gatewayConfig or pipelineConfig) for
// upstream and key into gdir, with the pool's key files, and returns the
// configuration's path. Both templates number their arguments, so that
// gatewayConfig may leave the alias out (fmt checks no extra argument then).
func writeGatewayConfig(gdir, config, httpAddr, grpcAddr, upstream, key string) (string, error) {
	sum := sha256.Sum256([]byte(key))
	cfg := fmt.Sprintf(config, httpAddr, grpcAddr, hex.EncodeToString(sum[:]), upstream, sampleModel, auditKeyEnv, pipelineAlias)
	for _, f := range pipelineKeyFiles {
		if err := os.WriteFile(filepath.Join(gdir, f), []byte("sk-sample-"+randomHex(8)+"\n"), 0o600); err != nil {
			return "", err
		}
	}
	path := filepath.Join(gdir, "flexway.yaml")
	return path, os.WriteFile(path, []byte(cfg), 0o600)
}

// startGatewayOn writes config for upstream into its own directory under
// dir, starts `flexway serve` on it and waits for GET /readyz.
func startGatewayOn(ctx context.Context, o options, dir, name, config, upstream, key string) (*gateway, error) {
	gdir := filepath.Join(dir, name)
	if err := os.Mkdir(gdir, 0o700); err != nil {
		return nil, err
	}
	httpAddr, err := freePort()
	if err != nil {
		return nil, err
	}
	grpcAddr, err := freePort()
	if err != nil {
		return nil, err
	}
	path, err := writeGatewayConfig(gdir, config, httpAddr, grpcAddr, upstream, key)
	if err != nil {
		return nil, err
	}
	env := append(os.Environ(), auditKeyEnv+"="+randomHex(16))
	p, _, err := startProc(ctx, name, o.flexwayPath, gdir, []string{"serve", "--config", path}, env, true)
	if err != nil {
		return nil, err
	}
	g := &gateway{proc: p, base: "http://" + httpAddr, audit: filepath.Join(gdir, "audit.jsonl")}
	if err := g.waitReady(ctx); err != nil {
		p.stop()
		return nil, err
	}
	return g, nil
}

// waitReady polls GET /readyz until it answers 200.
func (g *gateway) waitReady(ctx context.Context) error {
	deadline := time.Now().Add(startTimeout)
	client := &http.Client{Timeout: time.Second}
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, g.base+"/readyz", nil)
		if err != nil {
			return err
		}
		if resp, err := client.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		switch {
		case g.exited():
			return fmt.Errorf("%s exited: %v\n%s", g.name, g.err, g.logTail())
		case time.Now().After(deadline):
			return fmt.Errorf("%s not ready within %s\n%s", g.name, startTimeout, g.logTail())
		case ctx.Err() != nil:
			return ctx.Err()
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// freePort returns a loopback address that was free a moment ago.
func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// randomHex returns n random bytes in hex.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// raiseNoFile raises the soft RLIMIT_NOFILE to at least want (bounded by
// the hard limit) so that the harness can hold its connections, and so that
// the children, which inherit it, can too. It returns the soft limit now in
// force.
func raiseNoFile(want uint64) (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, err
	}
	if lim.Cur >= want {
		return lim.Cur, nil
	}
	lim.Cur = min(want, lim.Max)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, err
	}
	if lim.Cur < want {
		return lim.Cur, errors.New("the hard limit on open files is below what the memory phase needs")
	}
	return lim.Cur, nil
}
