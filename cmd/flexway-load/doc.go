// Command flexway-load is Flexway's load harness: it measures what the
// gateway adds to a call, compared with calling the same upstream directly,
// and prints one report. `make bench` runs it after `make build`.
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
// It builds nothing: the binaries must exist. A full run takes one to two
// minutes. The exit status is 1 when the harness itself fails (a process
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
// # What it measures
//
// "Added" is a percentile through Flexway minus the same percentile direct.
// To spread the machine's drifting background load evenly, the two paths
// take turns in short rounds rather than running one after the other.
//
//  1. Non-streaming chat at concurrency 1: 2,000 requests per path after a
//     warm-up, latency from send to the end of the body.
//  2. Non-streaming chat at a fixed open-loop rate of 1,000 requests/s for
//     5 s per path. Sends are scheduled on a time grid that does not wait
//     for responses, and latency is measured from each request's scheduled
//     time, so a slow response delays the measurement of the requests behind
//     it instead of hiding them (no coordinated omission). The pacer's own
//     lateness is part of that latency on both paths; the report shows it.
//  3. Sustained throughput: the open-loop rate steps up (500, 1,000, 1,500,
//     2,000, 3,000, 4,000, 6,000, ... requests/s, 3 s per run) until a
//     step's p99 exceeds 5 ms or a request fails in both of its two runs
//     (on a shared VM one scheduling hiccup fails a single run on either
//     path; the better run counts). The best passing rate of
//     each path and their ratio are reported. The load generator shares the
//     machine with both servers, so on a small machine it bounds the direct
//     path too.
//  4. Streaming against the paced sample (a chunk every 20 ms, 10 chunks):
//     time to the first SSE byte, time to the first content chunk, and the
//     gaps between the arrivals of the paced chunks, over 200 streams per
//     path, 8 at a time. Flexway holds a role-only first chunk until the
//     first content chunk (so that it can still fall back to another
//     backend), so its first byte comes one chunk delay after the direct
//     path's; the first content chunk compares like with like.
//  5. Memory: a second sample with a long chunk delay holds streams open and
//     a fresh gateway is started in front of it; after a short warm-up its
//     VmRSS is read from /proc/PID/status (idle), 1,000 streams are opened
//     through it, and once all have received their first byte VmRSS is read
//     again. (open − idle) / 1,000 is the cost of one open stream, which
//     includes the caller's connection, the in-process gRPC stream and the
//     upstream connection.
//
// The report states the machine (nproc, CPU model, load average, Go
// version), what was on, every figure, and the targets, each marked PASS or
// MISS: added p50 ≤ 150 µs and p99 ≤ 1 ms at 1,000 req/s, sustained
// throughput ≥ 0.5 × direct, ≤ 30 KiB per open stream. Figures from a
// machine that other jobs share are noisy; run it on a quiet one to compare
// releases.
package main
