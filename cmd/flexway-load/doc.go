// Command flexway-load is Flexway's load harness: it measures what the
// gateway adds to a call, compared with calling the same upstream directly
// and through a plain TCP relay, and prints one report. `make bench` runs it
// after `make build`.
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
//	                  0.2 is a smoke run of about half a minute (default 1)
//	--out             also write the report, as Markdown, to this file
//
// It builds nothing: the binaries must exist (the relay and the hold server
// are the harness binary itself). A full run takes about two minutes. The exit status is 1 when the harness itself fails (a process
// does not start, a phase cannot run); a target that is missed is reported
// as MISS, not as a failure.
//
// # What it runs
//
// Everything is on the loopback interface of this machine. The harness
// starts bin/flexway-sample on a free port with --chunk-delay 20ms and
// --chunks 10, writes a temporary configuration (one backend at the sample,
// one API key given by its key_sha256, the embedded defaults otherwise, the
// audit log in the temporary directory) and starts `bin/flexway serve` on it,
// each child in its own process group. It waits for GET /readyz, runs the
// phases below, then stops both process groups and removes the temporary
// directory. Identity is on: every call through Flexway carries the
// Authorization bearer key and is checked. The direct path gets the same
// body and the same headers.
//
// # The relay path
//
// A third path puts a byte-for-byte TCP relay between the harness and the
// same sample. The relay is the harness binary itself, started again (as
// os.Executable()) with a hidden first argument, in its own process group
// like the other children:
//
//	flexway-load -relay-mode LISTEN TARGET
//
// on a free loopback port in front of the sample; the harness waits until a
// TCP dial to it succeeds (at most 5 s). For each connection it accepts, it
// dials the sample and copies bytes both ways (io.Copy), half-closing each
// direction when its source ends and closing both connections when both
// have; it parses nothing and prints nothing. It gets the same body and
// headers as direct: the Authorization header passes through to the sample,
// which ignores it.
//
// It is there to show the floor. On a small machine, waking one more process,
// often on another vCPU, costs a large part of what any gateway adds to a
// loopback call (on a 2-vCPU VM the relay alone adds about 200 µs at p50 at
// concurrency 1). Relay − direct is that floor; flexway − relay is what
// Flexway itself adds on top of it. The targets still compare flexway with
// direct. The relay runs in the non-streaming phases (1 to 3 below), taking
// its turn after direct and flexway; it is stopped with the other processes
// before the memory phase, which has no relay.
//
// # The hold server
//
// The memory phase has a floor of its own. An HTTP/1.1 front on net/http
// pays, for each open stream, two goroutines (the connection's and its
// background read) and net/http's per-connection buffers, before it does
// anything with the call, and that is a large part of the 30 KiB target. To
// show how large on this machine, the memory phase starts the harness binary
// once more, in its own process group, with another hidden first argument:
//
//	flexway-load -hold-mode LISTEN
//
// It is an http.Server with net/http's defaults (no special buffer sizes;
// the read-header and idle timeouts of Flexway's front) on a free loopback
// port; the harness waits until a TCP dial to it succeeds (at most 5 s).
// For every request it reads and discards the body, answers
// `Content-Type: text/event-stream`, writes and flushes one event
// (`data: {}`), and holds the response open until the request's context is
// done, that is until the client closes the connection; then the handler
// returns and nothing of the stream remains. It has no upstream connection
// and prints nothing; it exits 1 when it cannot listen.
//
// # What it measures
//
// "Added" is a percentile through Flexway minus the same percentile direct;
// the relay's figures are shown beside it as relay − direct. To spread the
// machine's drifting background load evenly, the paths take turns in short
// rounds rather than running one after the other.
//
//  1. Non-streaming chat at concurrency 1: 2,000 requests per path after a
//     warm-up, latency from send to the end of the body, the three paths
//     alternating request by request.
//  2. Non-streaming chat at a fixed open-loop rate of 1,000 requests/s for
//     5 s per path. Sends are scheduled on a time grid that does not wait
//     for responses, and latency is measured from each request's scheduled
//     time, so a slow response delays the measurement of the requests behind
//     it instead of hiding them (no coordinated omission). The pacer's own
//     lateness is part of that latency on both paths; the report shows it.
//  3. Sustained throughput: the open-loop rate steps up (500, 1,000, 1,500,
//     2,000, 3,000, 4,000, 6,000, ... requests/s, 3 s per run) until a
//     step's p99 exceeds 5 ms or a request fails in both of its two runs
//     (on a shared VM one scheduling hiccup fails a single run on any
//     path; the better run counts). Each path, the relay included, climbs
//     until it fails on its own. The best passing rate of each path and its
//     ratio to direct are reported. The load generator shares the machine
//     with the servers, so on a small machine it bounds the direct path too.
//  4. Streaming against the paced sample (a chunk every 20 ms, 10 chunks):
//     time to the first SSE byte, time to the first content chunk, and the
//     gaps between the arrivals of the paced chunks, over 200 streams per
//     path (direct and flexway), 8 at a time. Flexway holds a role-only first chunk until the
//     first content chunk (so that it can still fall back to another
//     backend), so its first byte comes one chunk delay after the direct
//     path's; the first content chunk compares like with like.
//  5. Memory: a second sample with a long chunk delay holds streams open and
//     a fresh gateway is started in front of it; after a short warm-up (50
//     non-streaming calls) and a moment to settle its VmRSS is read from
//     /proc/PID/status (idle), 1,000 streams are opened through it (100
//     being opened at a time), and once all have received their first byte
//     and RSS has settled VmRSS is read again. (open − idle) / 1,000 is the
//     cost of one open stream, which includes the caller's connection, the
//     in-process gRPC stream and the upstream connection. Then, with the
//     gateway and its sample stopped, the hold server is started, warmed up
//     with 50 streams opened and closed one at a time, and measured in
//     exactly the same way: the same client, request body and headers, the
//     same 1,000 streams opened 100 at a time, the same readings. Its
//     (open − idle) / 1,000 is the floor of an HTTP/1.1 front on net/http
//     on this machine; Flexway's figure minus it is what Flexway adds per
//     stream (its upstream connection, the in-process gRPC stream and the
//     call's state). The floor checks no target; when it cannot be measured
//     the run records a problem and Flexway's figure stands.
//
// The report states the machine (nproc, CPU model, load average, Go
// version), what was on, every figure, and the targets, each marked PASS or
// MISS: added p50 ≤ 150 µs and p99 ≤ 1 ms at 1,000 req/s, sustained
// throughput ≥ 0.5 × direct, ≤ 30 KiB per open stream. Under the targets, a
// paragraph computed from the run says what the TCP relay adds over direct
// at 1,000 req/s and at concurrency 1, and what Flexway adds over the relay;
// the memory section likewise gives the hold server's figure beside
// Flexway's, and the difference.
// Figures from a machine that other jobs share are noisy; run it on a quiet
// one to compare releases.
package main
