package transcoder

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"sync"

	"github.com/flexway/flexway/server/faults"
)

// FramingListener wraps the plaintext HTTP listener so that the requests
// net/http refuses before any handler runs, for their framing or their
// head (a Transfer-Encoding other than a lone "chunked", a bad
// Content-Length, a missing Host), are answered in the surface's format:
// the OpenAI envelope on /v1/* (code invalid_request), RFC 9457 problem
// details elsewhere, with 400 where net/http would answer 501 for a
// transfer coding it does not implement, and the connection closed as
// net/http closes it. Install [FramingConnContext] as the server's
// ConnContext too: it lets the front close the connection after a request
// that had both Transfer-Encoding and Content-Length (RFC 9112 §6.1), which
// net/http serves as chunked without saying so.
//
// net/http writes those refusals straight to the connection, in one
// write, as "HTTP/1.1 <status>\r\nContent-Type: text/plain;
// charset=utf-8\r\nConnection: close\r\n\r\n<text>" (server.go, conn.serve):
// the wrapped connection recognises that exact shape, which no handler's
// answer has (net/http writes a handler's headers sorted, with Date), and
// replaces it. The path that picks the format is read from the last
// request head the connection received, kept in a 16 KiB window of its
// latest bytes; a client can only mislead the format of its own refusal.
//
// Not for a TLS listener: under TLS net/http needs the *tls.Conn itself
// (for r.TLS and HTTP/2), so its own refusals stand there.
func FramingListener(l net.Listener) net.Listener { return framingListener{l} }

type framingListener struct{ net.Listener }

func (l framingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &framingConn{Conn: c}, nil
}

// FramingConnContext is the http.Server ConnContext that goes with
// [FramingListener]: it makes the connection known to the front's
// handlers.
func FramingConnContext(ctx context.Context, c net.Conn) context.Context {
	if fc, ok := c.(*framingConn); ok {
		return context.WithValue(ctx, framingKey{}, fc)
	}
	return ctx
}

type framingKey struct{}

// framingWindow is how many of a connection's latest bytes are kept to
// find the last request head in.
const framingWindow = 16 << 10

// framingConn keeps the latest bytes read and rewrites net/http's own
// refusals.
type framingConn struct {
	net.Conn
	mu   sync.Mutex
	last []byte // the latest bytes read, at most framingWindow
}

func (c *framingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.mu.Lock()
		in := p[:n]
		if len(in) >= framingWindow {
			c.last = append(c.last[:0], in[len(in)-framingWindow:]...)
		} else {
			if keep := framingWindow - len(in); len(c.last) > keep {
				c.last = append(c.last[:0], c.last[len(c.last)-keep:]...)
			}
			c.last = append(c.last, in...)
		}
		c.mu.Unlock()
	}
	return n, err
}

// refusalHeaders are the headers of net/http's own answer to a request it
// cannot read, between its status line and its text.
const refusalHeaders = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"

func (c *framingConn) Write(p []byte) (int, error) {
	if code, text, ok := netHTTPRefusal(p); ok {
		if _, err := c.Conn.Write(c.rewrite(code, text)); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	return c.Conn.Write(p)
}

// netHTTPRefusal parses p as net/http's own refusal: "HTTP/1.1 ", a
// three-digit status, the rest of the status line, refusalHeaders and one
// line of text.
func netHTTPRefusal(p []byte) (code, text []byte, ok bool) {
	if len(p) > 512 || !bytes.HasPrefix(p, []byte("HTTP/1.1 ")) {
		return nil, nil, false
	}
	eol := bytes.Index(p, []byte("\r\n"))
	if eol < 12 || !bytes.HasPrefix(p[eol:], []byte(refusalHeaders)) {
		return nil, nil, false
	}
	code, text = p[9:12], p[eol+len(refusalHeaders):]
	for _, d := range code {
		if d < '0' || d > '9' {
			return nil, nil, false
		}
	}
	if bytes.ContainsAny(text, "\r\n") {
		return nil, nil, false
	}
	return code, text, true
}

// rewrite returns the answer to send instead of net/http's refusal with
// status code and text.
func (c *framingConn) rewrite(code, text []byte) []byte {
	status, _ := strconv.Atoi(string(code))
	msg := "the request cannot be read: " + string(bytes.TrimPrefix(text, append(code, ' ')))
	if status == http.StatusNotImplemented {
		// A transfer coding net/http does not implement: the request's
		// framing is the caller's mistake (RFC 9112 §6.1).
		status = http.StatusBadRequest
		msg = "unsupported Transfer-Encoding: a request body is sent with Content-Length, or with a single Transfer-Encoding: chunked"
	}
	fe := faults.New(faults.InvalidRequest, "%s", msg)
	path := c.lastPath()
	var body []byte
	ct := "application/json"
	if bytes.HasPrefix(path, []byte("/v1/")) {
		body = openaiErrorBody(fe)
	} else {
		ct = "application/problem+json"
		body, _ = json.Marshal(Problem{Type: "about:blank", Title: http.StatusText(status), Status: status, Detail: msg, Code: string(fe.Reason)})
		body = append(body, '\n')
	}
	out := []byte("HTTP/1.1 " + strconv.Itoa(status) + " " + http.StatusText(status) + "\r\nContent-Type: " + ct +
		"\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\nConnection: close\r\n\r\n")
	return append(out, body...)
}

// requestLine finds request lines: a method, a target and the version.
var requestLine = regexp.MustCompile(`(?:\A|\n)[A-Z]+ (\S+) HTTP/1\.[01]\r?\n`)

// lastHead returns the last request head in the window, from its request
// line to its blank line (or the window's end), and its target's path.
func (c *framingConn) lastHead() (head, path []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	all := requestLine.FindAllSubmatchIndex(c.last, -1)
	if len(all) == 0 {
		return nil, nil
	}
	m := all[len(all)-1]
	head = c.last[m[0]:]
	if end := bytes.Index(head, []byte("\r\n\r\n")); end >= 0 {
		head = head[:end]
	}
	path = c.last[m[2]:m[3]]
	if i := bytes.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	return bytes.Clone(head), bytes.Clone(path)
}

func (c *framingConn) lastPath() []byte {
	_, p := c.lastHead()
	return p
}

// contentLengthHeader finds a Content-Length header line in a head.
var contentLengthHeader = regexp.MustCompile(`(?i)\ncontent-length[ \t]*:`)

// closeAfterSmuggling marks the answer to r as the connection's last when
// r came chunked with a Content-Length too (RFC 9112 §6.1: "the server
// MUST close the connection after responding to such a request"): net/http
// drops the Content-Length and serves it as chunked. It reads the head of
// r from the connection's window ([FramingListener]); without it, or with
// a head too long for the window, it does nothing.
func closeAfterSmuggling(w http.ResponseWriter, r *http.Request) {
	if r.ContentLength != -1 || len(r.TransferEncoding) == 0 {
		return
	}
	fc, ok := r.Context().Value(framingKey{}).(*framingConn)
	if !ok {
		return
	}
	head, _ := fc.lastHead()
	if contentLengthHeader.Match(head) {
		w.Header().Set("Connection", "close")
	}
}
