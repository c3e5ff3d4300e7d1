package transcoder

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
)

// TestFramingLeavesHandlerAnswersAlone: through FramingListener, a
// handler's own plain-text refusal that closes the connection reaches the
// client as the handler wrote it: only net/http's pre-handler refusals are
// rewritten.
func TestFramingLeavesHandlerAnswersAlone(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{ConnContext: FramingConnContext, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Connection", "close")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, "the handler's own words")
	})}
	go srv.Serve(FramingListener(lis))
	t.Cleanup(func() { srv.Close() })
	resp, err := http.Get("http://" + lis.Addr().String() + "/v1/x")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || resp.Header.Get("Content-Type") != "text/plain; charset=utf-8" || string(b) != "the handler's own words" {
		t.Fatalf("%d %s %q", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
}

// TestNetHTTPRefusalShape: the refusal parser takes net/http's one-write
// refusals only.
func TestNetHTTPRefusalShape(t *testing.T) {
	for raw, want := range map[string]bool{
		"HTTP/1.1 501 Not Implemented" + refusalHeaders + "Unsupported transfer encoding":                         true,
		"HTTP/1.1 400 Bad Request" + refusalHeaders + "400 Bad Request":                                           true,
		"HTTP/1.1 400 Bad Request: missing required Host header" + refusalHeaders + "400 Bad Request: missing...": true,
		"HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Type: text/plain; charset=utf-8\r\n\r\nx":       false,
		"HTTP/1.1 200 OK" + refusalHeaders + "two\r\nlines":                                                       false,
		"HTTP/1.1 2x0 OK" + refusalHeaders + "x":                                                                  false,
		"HTTP/1.1 400 Bad Request" + refusalHeaders + strings.Repeat("x", 600):                                    false,
	} {
		if _, _, got := netHTTPRefusal([]byte(raw)); got != want {
			t.Errorf("%.60q: %v, want %v", raw, got, want)
		}
	}
}
