package upstream

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// h1Transport is the HTTP/1.1 client of a cleartext (http://) upstream: the
// relay's own hop, kept lean because every call and every streamed chunk
// crosses it. It writes the request and reads the response in the caller's
// goroutine, over pooled keep-alive connections, with the standard
// library's wire code (Request.Write, http.ReadResponse and its chunked and
// Content-Length body readers). net/http's Transport costs two goroutines
// per connection and two goroutine hand-offs per call; this costs none.
// https:// upstreams keep net/http's Transport (TLS, ALPN, HTTP/2).
//
// A connection goes back to the pool only when its response body was read
// to the end and neither side asked to close it. Before an idle connection
// is reused it is checked, without blocking, for a close by the upstream
// (its keep-alive timeout), so that a request is not written to a
// connection already closed at the other end. A request that fails on a
// connection is never retried: a POST may have been served.
type h1Transport struct {
	addr        string // host:port
	dialer      net.Dialer
	maxIdle     int
	idleTimeout time.Duration
	maxHeader   int64 // bytes of status line and headers

	mu   sync.Mutex
	idle []*h1Conn // most recently used last
}

// newH1Transport returns a transport for the upstream at addr (host:port).
func newH1Transport(addr string) *h1Transport {
	return &h1Transport{
		addr:        addr,
		dialer:      net.Dialer{Timeout: dialTimeout, KeepAlive: keepAlive},
		maxIdle:     maxIdleConnsPerHost,
		idleTimeout: idleConnTimeout,
		maxHeader:   maxHeaderBytes,
	}
}

// h1Conn is one connection and its buffers.
type h1Conn struct {
	nc        net.Conn
	lim       limitedConn // bounds header bytes; lifted for the body
	br        *bufio.Reader
	idleSince time.Time
}

// limitedConn reads from the connection at most n bytes; n is set before
// the status line and headers are read and lifted after.
type limitedConn struct {
	c net.Conn
	n int64
}

func (l *limitedConn) Read(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, errHeaderTooLarge
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.c.Read(p)
	l.n -= int64(n)
	return n, err
}

const unlimited = 1<<63 - 1

var errHeaderTooLarge = errors.New("upstream response headers are over 1 MiB")

// aLongTimeAgo is a deadline in the past: it fails a blocked read or write
// at once.
var aLongTimeAgo = time.Unix(1, 0)

// RoundTrip implements [http.RoundTripper]. req is an HTTP/1.1 request to
// t.addr with a known ContentLength; its context cancels it at any point,
// the body read included.
func (t *h1Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	pc, err := t.conn(ctx)
	if err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { _ = pc.nc.SetDeadline(aLongTimeAgo) })
	if req.Header.Get("Accept-Encoding") == "" {
		// As net/http's Transport does; decodedBody decodes it.
		req.Header.Set("Accept-Encoding", "gzip")
	}
	if err := writeRequest(pc.nc, req); err != nil {
		stop()
		pc.nc.Close()
		return nil, err
	}
	pc.lim.n = t.maxHeader
	var resp *http.Response
	for {
		resp, err = http.ReadResponse(pc.br, req)
		if err != nil {
			stop()
			pc.nc.Close()
			return nil, err
		}
		// 1xx answers before the final one are skipped, as net/http does;
		// 101 would switch protocols, which is never asked for.
		if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			break
		}
	}
	pc.lim.n = unlimited
	resp.Body = &h1Body{t: t, pc: pc, body: resp.Body, stop: stop, reuse: !resp.Close && !req.Close}
	return resp, nil
}

// conn returns an idle connection that is still open, or a new one.
func (t *h1Transport) conn(ctx context.Context) (*h1Conn, error) {
	now := time.Now()
	for {
		t.mu.Lock()
		n := len(t.idle)
		if n == 0 {
			t.mu.Unlock()
			break
		}
		pc := t.idle[n-1]
		t.idle[n-1] = nil
		t.idle = t.idle[:n-1]
		t.mu.Unlock()
		if now.Sub(pc.idleSince) < t.idleTimeout && peerOpen(pc.nc) {
			return pc, nil
		}
		pc.nc.Close()
	}
	nc, err := t.dialer.DialContext(ctx, "tcp", t.addr)
	if err != nil {
		return nil, err
	}
	pc := &h1Conn{nc: nc, lim: limitedConn{c: nc, n: unlimited}}
	pc.br = bufio.NewReaderSize(&pc.lim, 4096)
	return pc, nil
}

// writers are the buffers requests are written through: held only while
// a request is written, not for the life of a connection (an open stream
// holds its connection for minutes).
var writers = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 4096) }}

// writeRequest writes req to c, in one write when it fits the buffer.
func writeRequest(c net.Conn, req *http.Request) error {
	bw := writers.Get().(*bufio.Writer)
	bw.Reset(c)
	err := req.Write(bw)
	if err == nil {
		err = bw.Flush()
	}
	bw.Reset(nil)
	writers.Put(bw)
	return err
}

// put returns a connection whose exchange ended cleanly to the pool.
func (t *h1Transport) put(pc *h1Conn) {
	if pc.br.Buffered() > 0 {
		// Bytes past the end of the answer: the connection is out of step.
		pc.nc.Close()
		return
	}
	pc.idleSince = time.Now()
	t.mu.Lock()
	if len(t.idle) < t.maxIdle {
		t.idle = append(t.idle, pc)
		pc = nil
	}
	t.mu.Unlock()
	if pc != nil {
		pc.nc.Close()
	}
}

// CloseIdleConnections closes every pooled connection.
func (t *h1Transport) CloseIdleConnections() {
	t.mu.Lock()
	idle := t.idle
	t.idle = nil
	t.mu.Unlock()
	for _, pc := range idle {
		pc.nc.Close()
	}
}

// h1Body is a response body on a pooled connection: read to its end, it
// gives the connection back; closed before, it closes the connection.
type h1Body struct {
	t     *h1Transport
	pc    *h1Conn
	body  io.ReadCloser // from http.ReadResponse: framing decoded
	stop  func() bool   // stops the cancellation hook
	reuse bool
	done  atomic.Bool // the connection was given back or closed
}

func (b *h1Body) Read(p []byte) (int, error) {
	n, err := b.body.Read(p)
	if err == io.EOF && b.done.CompareAndSwap(false, true) {
		// The hook may be running: the connection is then unusable.
		if b.stop() && b.reuse {
			b.t.put(b.pc)
		} else {
			b.pc.nc.Close()
		}
	}
	return n, err
}

// Close implements io.Closer; it may run concurrently with a Read, which
// then fails.
func (b *h1Body) Close() error {
	if b.done.CompareAndSwap(false, true) {
		b.stop()
		b.pc.nc.Close()
	}
	return nil
}
