// Package promptlog writes the prompt logs of ai.policies' prompt_logging
// (issue 17, stage 15 of DESIGN.md's AI pipeline): one JSON line per call
// to the policy's own file, with what went upstream and what went back to
// the client. It is never the audit and never a log line: prompts are
// collected only where a policy turns it on.
//
// A line (JSON names are the contract):
//
//	{"time":"2026-12-02T10:26:31.5Z","request_id":"…","tenant":"acme",
//	 "agent":"support-bot","model":"fast","messages":[…],"answer":"…"}
//
// time is when the call started, RFC 3339 in UTC; model is the requested
// model (or alias); messages is the messages array as sent upstream, after
// redaction; answer is what the client got: the text, as a JSON string, or
// a raw JSON value (tool calls, an embeddings input's vectors are never
// logged).
//
// Writing is off the call's path: [Writer.Write] puts the entry in a
// bounded queue ([Options.QueueLen]) drained by one goroutine, which
// encodes and appends it; when the queue is full the entry is dropped and
// counted ([Writer.Dropped], for a metric) and the call never waits. Files
// are created 0600 (and an existing file's mode is narrowed to it),
// rotated by size like the audit (gopkg.in/natefinch/lumberjack.v2, the
// audit's defaults: 100 MB, 10 backups), and hold whole lines: a line one
// earlier process left cut short is ended with a newline before anything
// is appended. [Writer.Close] writes every queued entry.
//
// A [Set] gives one Writer per path, shared by every policy naming it.
package promptlog

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"gopkg.in/natefinch/lumberjack.v2"
)

// Entry is one call's prompt log line.
type Entry struct {
	// Time is when the call started; written in UTC, RFC 3339 with
	// nanoseconds. Zero is the time Write is called.
	Time time.Time
	// RequestID, Tenant, Agent and Model are the call's (Model the
	// requested model or alias).
	RequestID, Tenant, Agent, Model string
	// Messages is the messages JSON array as sent upstream (after
	// redaction); nil is written as null. It must be valid JSON, else the
	// entry is counted in [Writer.Failed] and not written.
	Messages json.RawMessage
	// Answer is the text the client got, written as a JSON string, unless
	// AnswerJSON is set.
	Answer string
	// AnswerJSON, when not nil, is written as the answer instead of
	// Answer: a JSON value as sent to the client (tool calls).
	AnswerJSON json.RawMessage
}

// line is an Entry as written.
type line struct {
	Time      string          `json:"time"`
	RequestID string          `json:"request_id"`
	Tenant    string          `json:"tenant"`
	Agent     string          `json:"agent"`
	Model     string          `json:"model"`
	Messages  json.RawMessage `json:"messages"`
	Answer    json.RawMessage `json:"answer"`
}

// Options configures a [Writer].
type Options struct {
	// MaxSizeMB is the size, in megabytes, at which the file is rotated
	// (default 100); MaxBackups rotated files are kept (default 10).
	MaxSizeMB, MaxBackups int
	// QueueLen is how many entries may wait to be written (default 1024);
	// more are dropped.
	QueueLen int
	// Logger receives a line (path and error, never an entry) when
	// writing fails; nil discards.
	Logger *slog.Logger
}

// maxBatchBytes is the most bytes the writer gathers into one write; a
// longer line goes alone.
const maxBatchBytes = 256 << 10

// ErrClosed is returned by [Writer.Write] after [Writer.Close].
var ErrClosed = errors.New("prompt log closed")

// Writer is one prompt log file; safe for concurrent use.
type Writer struct {
	path    string
	file    *lumberjack.Logger
	out     io.Writer
	log     *slog.Logger
	queue   chan *Entry
	dropped atomic.Int64
	failed  atomic.Int64

	mu     sync.RWMutex // held to send on queue (read) or close it (write)
	closed bool
	done   chan struct{}
}

// Open opens (creating it and its directory) the prompt log at path and
// starts its writer. Its error names the path.
func Open(path string, o Options) (*Writer, error) {
	if path == "" {
		return nil, errors.New("prompt log: empty path")
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("prompt log %s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("prompt log %s: %w", path, err)
	}
	err = prepare(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("prompt log %s: %w", path, err)
	}
	size, backups, qlen := o.MaxSizeMB, o.MaxBackups, o.QueueLen
	if size <= 0 {
		size = 100
	}
	if backups <= 0 {
		backups = 10
	}
	if qlen <= 0 {
		qlen = 1024
	}
	w := &Writer{path: path, log: o.Logger, queue: make(chan *Entry, qlen), done: make(chan struct{})}
	if w.log == nil {
		w.log = slog.New(slog.DiscardHandler)
	}
	// lumberjack keeps the file's mode (0600) on the files it rotates to.
	w.file = &lumberjack.Logger{Filename: path, MaxSize: size, MaxBackups: backups}
	w.out = w.file
	go w.run()
	return w, nil
}

// prepare narrows f's mode to 0600 and ends a last line cut short.
func prepare(f *os.File) error {
	if err := f.Chmod(0o600); err != nil {
		return err
	}
	st, err := f.Stat()
	if err != nil || st.Size() == 0 {
		return err
	}
	last := make([]byte, 1)
	if _, err := f.ReadAt(last, st.Size()-1); err != nil {
		return err
	}
	if last[0] != '\n' {
		_, err = f.WriteAt([]byte{'\n'}, st.Size())
	}
	return err
}

// Path is the file's path, as given to Open.
func (w *Writer) Path() string { return w.path }

// Write queues e for writing and returns at once. e must not be changed
// afterwards. When the queue is full, e is dropped and counted in
// [Writer.Dropped] (nil is returned: the call goes on); after Close it
// returns [ErrClosed].
func (w *Writer) Write(e *Entry) error {
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	w.mu.RLock()
	defer w.mu.RUnlock()
	if w.closed {
		return ErrClosed
	}
	select {
	case w.queue <- e:
	default:
		w.dropped.Add(1)
	}
	return nil
}

// Dropped is how many entries were dropped because the queue was full.
func (w *Writer) Dropped() int64 { return w.dropped.Load() }

// Failed is how many entries were not written because they could not be
// encoded (messages or answer not JSON) or the write failed.
func (w *Writer) Failed() int64 { return w.failed.Load() }

// Close writes every queued entry and closes the file; later Writes fail
// with [ErrClosed]. It is safe to call more than once.
func (w *Writer) Close() error {
	w.mu.Lock()
	if !w.closed {
		w.closed = true
		close(w.queue)
	}
	w.mu.Unlock()
	<-w.done
	return w.file.Close()
}

// run writes queued entries, gathering what is already queued into one
// write, until the queue is closed.
func (w *Writer) run() {
	defer close(w.done)
	var buf []byte
	var n int // entries in buf
	for e := range w.queue {
		buf, n = w.add(buf[:0], e), 1
	gather:
		for len(buf) < maxBatchBytes {
			select {
			case e, ok := <-w.queue:
				if !ok {
					break gather
				}
				before := len(buf)
				buf = w.add(buf, e)
				if len(buf) > before {
					n++
				}
			default:
				break gather
			}
		}
		w.flush(buf, n)
		if cap(buf) > 4*maxBatchBytes {
			buf = nil
		}
	}
}

// add appends e's line to buf, or counts it as failed.
func (w *Writer) add(buf []byte, e *Entry) []byte {
	l := line{Time: e.Time.UTC().Format(time.RFC3339Nano), RequestID: e.RequestID, Tenant: e.Tenant, Agent: e.Agent, Model: e.Model, Messages: e.Messages}
	if l.Messages == nil {
		l.Messages = json.RawMessage("null")
	}
	if e.AnswerJSON != nil {
		l.Answer = e.AnswerJSON
	} else {
		s, _ := json.Marshal(e.Answer) // a string always encodes
		l.Answer = s
	}
	b := bytes.NewBuffer(buf)
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	// Encode compacts raw values: the line is one line.
	if err := enc.Encode(&l); err != nil {
		w.failed.Add(1)
		w.log.Error("prompt log entry not written: not JSON", "path", w.path)
		return buf
	}
	return b.Bytes()
}

// flush writes buf, n lines, to the file.
func (w *Writer) flush(buf []byte, n int) {
	if len(buf) == 0 {
		return
	}
	if _, err := w.out.Write(buf); err != nil {
		w.failed.Add(int64(n))
		w.log.Error("prompt log cannot be written", "path", w.path, "error", err.Error())
	}
}

// Set hands out one [Writer] per path; safe for concurrent use. It lives
// as long as the gateway (across configuration reloads), so that two
// policies, or two generations of one policy, naming the same path share
// its writer.
type Set struct {
	opts    Options
	mu      sync.Mutex
	writers map[string]*Writer
}

// NewSet returns an empty Set whose writers are opened with o.
func NewSet(o Options) *Set { return &Set{opts: o, writers: map[string]*Writer{}} }

// Writer returns the writer of path, opening it on first use. Paths are
// compared cleaned and absolute (./a.jsonl and a.jsonl are one file).
func (s *Set) Writer(path string) (*Writer, error) {
	key, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("prompt log %s: %w", path, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if w, ok := s.writers[key]; ok {
		return w, nil
	}
	w, err := Open(path, s.opts)
	if err != nil {
		return nil, err
	}
	s.writers[key] = w
	return w, nil
}

// Dropped is the sum of every writer's [Writer.Dropped].
func (s *Set) Dropped() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for _, w := range s.writers {
		n += w.Dropped()
	}
	return n
}

// Close closes every writer (writing what they hold); the first error is
// returned.
func (s *Set) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var first error
	for k, w := range s.writers {
		if err := w.Close(); err != nil && first == nil {
			first = err
		}
		delete(s.writers, k)
	}
	return first
}
