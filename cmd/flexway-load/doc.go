// Command flexway-load is Flexway's load harness: it measures what the
// gateway adds to a call, beside what floors measured in the same run add
// (a do-nothing Go reverse proxy, nginx, a byte-for-byte TCP relay), and
// prints one report that checks issue 19's targets, each a ratio to a
// floor, so that the noise of a shared machine cancels out. `make bench`
// runs it after `make build`.
//
// It exists so that the performance targets are checked by one
// reproducible program on real processes and real sockets, not estimated
// from in-process benchmarks (those are in cmd/flexway/bench_test.go).
//
// # Usage
//
//	make build
//	go run ./cmd/flexway-load [--flexway bin/flexway] [--sample bin/flexway-sample]
//	    [--duration-scale 1] [--out report.md]
//
// Flags:
//
//	--flexway         the gateway binary (default bin/flexway)
//	--sample          the sample upstream binary (default bin/flexway-sample)
//	--duration-scale  multiplies every phase's duration and request count;
//	                  0.2 is a smoke run of about a minute and a half (default 1)
//	--out             also write the report, as Markdown, to this file
//
// It builds nothing: the binaries must exist (the relay, the Go floor and
// the hold server are the harness binary itself; nginx is the system's). A
// full run takes about four and a half minutes, `make bench`'s `go test
// -bench` comes before it. To keep it there with six paths and 30 s per
// path at 1,000 req/s, the throughput ladder's runs are 1.5 s (they were
// 3 s) and the streaming phase opens 100 streams per path (it opened 200).
// The exit status is 1 when the harness itself fails (a process does not
// start, a phase cannot run); a target that is missed is reported as MISS,
// not as a failure.
//
// # The paths
//
// Everything is on the loopback interface of this machine, each child in
// its own process group, started on free ports and stopped (SIGTERM to the
// group, then SIGKILL) when the run ends; the temporary directory holding
// every configuration and log is removed. The upstream of every path is
// one bin/flexway-sample started with --chunk-delay 20ms and --chunks 10.
// Every path gets the same bodies and headers, the Authorization bearer
// key included (the sample ignores it); the paths take turns in every
// phase, so that the machine's drifting background load spreads evenly.
//
//   - direct: harness → sample.
//
//   - flexway: harness → `bin/flexway serve` → sample, on a configuration
//     the harness writes: one backend at the sample, one API key by its
//     key_sha256 (identity on: every call's key is checked), the embedded
//     defaults otherwise (the budget on the embedded ledger, every call
//     reserved and committed; Prometheus metrics; the access log), the
//     audit log to a file in the temporary directory. No alias, pool,
//     policy, guardrail or cache: the table of issue 19 holds with them
//     absent.
//
//   - pipeline: a second `flexway serve` on the same sample with a
//     realistic policy set on (pipelineConfig): the alias "bench", which
//     the path's calls ask for, failing over from backend sample to
//     sample-spare (both the sample); a pool of two keys (token files) on
//     backend sample; one policy for the harness's tenant with a governance
//     allowlist of the alias and both backends, requests_per_minute and
//     tokens_per_minute caps far above any phase's load, pii and secrets
//     guardrails on the prompt (redact, deny) and on the answer (redact),
//     which the harness's prompts and the sample's answers never trigger;
//     and the exact response cache (store memory), which every call
//     misses: each chat call's user message carries a sequence number
//     shared by all paths ("Say hello to the benchmark, call N."), so that
//     no two calls are alike on any path. The harness counts answers marked
//     Flexway-Cache: hit (the report prints the count; a hit is a problem).
//     This path runs in the concurrency-1 and fixed-rate phases only.
//
//   - gofloor, the Go floor: the harness binary itself, started again (as
//     os.Executable()) with a hidden first argument,
//
//     flexway-load -goproxy-mode LISTEN TARGET
//
//     an http.Server with net/http's defaults (the read-header and idle
//     timeouts of Flexway's front) serving an httputil.ReverseProxy to
//     TARGET that rewrites only the URL, with an http.Transport keeping up
//     to maxInFlight + 1,100 idle connections to its one upstream (more than
//     any phase holds at once) and FlushInterval -1, so that stream chunks
//     pass one by one. It checks, meters and logs nothing: it is what any Go
//     gateway starts from. The harness waits until a TCP dial to it succeeds.
//
//   - nginx, where Debian's nginx is installed (on PATH, else
//     /usr/sbin/nginx; `.ci` need not install it): the harness writes a
//     minimal nginx.conf into its own directory of the temporary directory
//     and starts `nginx -p DIR -e DIR/error.log -c DIR/nginx.conf -g
//     'daemon off;'`. daemon off keeps the master the harness's child, in
//     the process group the harness stops and measures; the pid file, the
//     error log, the access log (to a file, since Flexway writes one too)
//     and every temp path (client_body, proxy, fastcgi, uwsgi, scgi) are in
//     DIR, so nothing root-owned is needed; as root, a user line keeps the
//     worker the harness's own user. worker_processes 1: one event loop is
//     nginx's cheapest configuration per request, and on a small machine
//     the harness and the sample need the other cores; the targets compare
//     Flexway with nginx's cost per call, not with how it scales over
//     workers. The upstream block holds keepalive 64 connections, with
//     proxy_http_version 1.1, proxy_set_header Connection "" and
//     proxy_buffering off so that streams flow; keepalive_requests is
//     raised so that neither side closes a kept-alive connection
//     mid-phase. When nginx is absent, the report says why and its columns
//     read "absent", and the targets against it read n/a.
//
//   - relay: the harness binary with `-relay-mode LISTEN TARGET`, a
//     byte-for-byte TCP relay that dials the sample for each connection and
//     copies bytes both ways (io.Copy), half-closing each direction when
//     its source ends; it parses nothing. It shows what one more process in
//     the path costs on this machine: on a small VM waking another process,
//     often on another vCPU, is a large part of what any gateway adds.
//
// The memory phase has one more floor, the hold server: the harness binary
// with `-hold-mode LISTEN`, an http.Server with net/http's defaults whose
// handler reads and discards the body, answers text/event-stream with one
// flushed event (`data: {}`) and holds the response until the client
// closes. It has no upstream connection: its figure is the floor of any
// HTTP/1.1 front on net/http.
//
// # What it measures
//
// "Added" is a percentile through a path minus the same percentile direct,
// in the same phase. Latencies are in µs (ms from 1 ms), CPU per request in
// µs, rates in req/s, memory in KiB.
//
//  1. Non-streaming chat at concurrency 1: 2,000 requests per path after a
//     warm-up of 200, latency from send to the end of the body, the six
//     paths alternating request by request. CPU per request: utime + stime
//     summed over every process of the middle process's group, read from
//     /proc/PID/stat (in clock ticks, `getconf CLK_TCK`, 100 on Linux) before
//     and after the measured requests, ÷ the requests that path answered.
//     As the paths alternate, a middle process's CPU time over the phase is
//     that of its own requests plus its idling during the others'.
//  2. Non-streaming chat at a fixed open-loop rate of 1,000 req/s, 10
//     turns per path of 3 s each, 30 s per path in all (the pipeline's turns
//     are a third as long: it checks only a p50), so that p99.9 rests on
//     30 samples past it. Sends are scheduled on a time grid that does not
//     wait for responses, and latency is measured from each request's
//     scheduled time, so a slow response delays the measurement of the
//     requests behind it instead of hiding them (no coordinated omission);
//     the pacer's own lateness is part of every path's latency, and the
//     report shows it. CPU per request: the middle process group's CPU time
//     during each of its turns ÷ the requests answered in it, summed over
//     the turns.
//  3. Sustained throughput: the open-loop rate steps up (500, 1,000, 1,500,
//     2,000, 3,000, 4,000, 6,000, ... req/s, 1.5 s per run) until a step's
//     p99 exceeds 5 ms or a request fails in both of its two runs (on a
//     shared VM one scheduling hiccup fails a single run on any path; the
//     better run counts). Each path but the pipeline climbs until it fails
//     on its own; its best passing rate is reported. The load generator
//     shares the machine with the servers, so on a small machine it bounds
//     the direct path too.
//  4. Streaming against the paced sample (a chunk every 20 ms, 10 chunks):
//     time to the first SSE byte, time to the first content chunk, and the
//     gaps between the arrivals of the paced chunks, over 100 streams per
//     path (all but the pipeline), 8 at a time, in two turns. Flexway holds
//     a role-only first chunk until the first content chunk (so that it can
//     still fall back to another backend), so its first byte comes one
//     chunk delay after the others'; the first content chunk compares like
//     with like.
//  5. Memory: with every process above stopped, a second sample with a long
//     chunk delay holds streams open and a fresh gateway is started in front
//     of it; after a warm-up (50 non-streaming calls) and a moment to settle
//     its VmRSS is read from /proc/PID/status (idle), 1,000 streams are
//     opened through it (100 being opened at a time), and once all have
//     received their first byte and RSS has settled VmRSS is read again.
//     (open − idle) / 1,000 is the cost of one open stream, which includes
//     the caller's connection, the in-process gRPC stream and the upstream
//     connection. Then, each alone and measured exactly the same way (the
//     same client, request body and headers, streams and readings): a
//     fresh Go floor in front of a fresh slow sample (it holds an upstream
//     connection per stream like Flexway), and the hold server (warmed up
//     with 50 streams opened and closed one at a time).
//
// # The report
//
// The report states the machine (nproc, CPU model, load average, Go
// version, nginx's version or why it is absent), what was on, and issue
// 19's targets, each with Flexway's figure, the bound the floor sets, the
// ratio to the floor and a verdict, PASS or MISS (n/a when the floor is
// nginx and nginx is absent; MISS (not measured) when a phase did not run):
//
//   - added p50 at concurrency 1 and at 1,000 req/s ≤ 0.8 × the Go floor's
//     added p50, and ≤ 3 × nginx's;
//   - added p99 at 1,000 req/s ≤ 1.0 × the Go floor's; added p99.9 there,
//     over the 30 s, ≤ 1.5 × the Go floor's;
//   - CPU per request at concurrency 1 and at 1,000 req/s ≤ 0.8 × the Go
//     floor's, and ≤ 3 × nginx's;
//   - most req/s under a 5 ms p99 ≥ 1.25 × the Go floor's;
//   - stream: added time to the first content chunk (p50) ≤ the Go
//     floor's; added gap between chunks (p50) ≤ the Go floor's + 50 µs;
//   - RSS per open stream, 1,000 streams, ≤ 24 KiB;
//   - the pipeline row's added p50, at concurrency 1 and at 1,000 req/s,
//     ≤ 1.0 × the Go floor's added p50.
//
// A table then puts every Flexway figure beside the pipeline row's, the
// Go floor's, nginx's and the relay's, with the ratios flexway ÷ Go floor
// and flexway ÷ nginx; then each phase's figures per path. The earlier
// absolute targets (≤ 150 µs added p50 and so on) are withdrawn by issue
// 19 and no longer checked. (Issue 19's gRPC row is measured by `go test
// -bench` in ./server/grpcproxy/, not here.) Figures from a machine that
// other jobs share are noisy; run it on a quiet one to compare releases.
package main
