package main

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
)

// lineWriter hands every write to a channel, for reading run's stdout.
type lineWriter chan string

// Write implements [io.Writer].
func (w lineWriter) Write(p []byte) (int, error) {
	w <- string(p)
	return len(p), nil
}

func TestRunListensAndShutsDown(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	stdout, stderr := make(lineWriter, 8), &syncBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--listen", "127.0.0.1:0", "--models", "m1,m2", "--chunk-delay", "50ms", "--chunks", "4"}, stdout, stderr)
	}()

	var line string
	select {
	case line = <-stdout:
	case err := <-done:
		t.Fatalf("run returned before listening: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("run did not report its address")
	}
	base := regexp.MustCompile(`http://\S+/v1`).FindString(line)
	if base == "" || !strings.Contains(line, "m1, m2") {
		t.Fatalf("stdout line %q lacks the URL and models", line)
	}

	resp, err := http.Get(base + "/models")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"id":"m1"`) {
		t.Fatalf("GET /v1/models = %d %s", resp.StatusCode, body)
	}

	// A stream in flight when the context is cancelled still completes.
	resp, err = http.Post(base+"/chat/completions", "application/json",
		strings.NewReader(`{"stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	if first, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(first, "data: ") {
		t.Fatalf("first stream line %q, %v", first, err)
	}
	cancel()
	rest, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("stream cut during graceful shutdown: %v", err)
	}
	if !strings.HasSuffix(string(rest), "data: [DONE]\n\n") {
		t.Errorf("stream did not finish: %q", rest)
	}

	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run returned %v, want nil", err)
		}
	case <-time.After(shutdownTimeout + 2*time.Second):
		t.Fatal("run did not return after cancel")
	}
	if _, err := http.Get(base + "/models"); err == nil {
		t.Error("server still answers after run returned")
	}
	if logs := stderr.String(); !strings.Contains(logs, "path=/v1/models") || !strings.Contains(logs, "status=200") {
		t.Errorf("stderr lacks request logs: %q", logs)
	}
}

func TestRunRejectsBadCommandLines(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		args      []string
		wantUsage bool
		wantErr   string
	}{
		{name: "unknown_flag", args: []string{"--bogus"}, wantUsage: true},
		{name: "positional_argument", args: []string{"extra"}, wantUsage: true, wantErr: "unexpected arguments"},
		{name: "zero_chunks", args: []string{"--chunks", "0"}, wantUsage: true, wantErr: "--chunks"},
		{name: "negative_delay", args: []string{"--chunk-delay", "-1s"}, wantUsage: true, wantErr: "--chunk-delay"},
		{name: "no_models", args: []string{"--models", " , "}, wantUsage: true, wantErr: "--models"},
		{name: "empty_name", args: []string{"--name", ""}, wantUsage: true, wantErr: "--name"},
		{name: "unknown_wire", args: []string{"--wire", "bedrock"}, wantUsage: true, wantErr: "--wire must be one of openai, anthropic, gemini, a2a"},
		{name: "bearer_on_anthropic", args: []string{"--wire", "anthropic", "--require-bearer", "t"}, wantUsage: true, wantErr: "--require-key"},
		{name: "key_on_openai", args: []string{"--require-key", "k"}, wantUsage: true, wantErr: "--require-bearer"},
		{name: "bad_listen_address", args: []string{"--listen", "127.0.0.1:99999"}, wantErr: "listen on 127.0.0.1:99999"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			stderr := &syncBuffer{}
			err := run(t.Context(), tt.args, io.Discard, stderr)
			if err == nil {
				t.Fatal("run returned nil")
			}
			if got := errors.Is(err, errUsage); got != tt.wantUsage {
				t.Errorf("errors.Is(%v, errUsage) = %v, want %v", err, got, tt.wantUsage)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("error %q lacks %q", err, tt.wantErr)
			}
			if tt.wantUsage && !strings.Contains(stderr.String(), "Usage: flexway-sample") {
				t.Errorf("stderr lacks usage: %q", stderr.String())
			}
		})
	}
}

func TestRunHelp(t *testing.T) {
	t.Parallel()
	stderr := &syncBuffer{}
	if err := run(t.Context(), []string{"-h"}, io.Discard, stderr); err != nil {
		t.Fatalf("run -h = %v, want nil", err)
	}
	for _, flag := range []string{"-listen", "-name", "-models", "-chunk-delay", "-chunks", "-require-bearer"} {
		if !strings.Contains(stderr.String(), flag) {
			t.Errorf("help lacks %s", flag)
		}
	}
}
