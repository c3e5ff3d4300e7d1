package transcoder

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestRefusedKeyReadsNoBody: a /v1 request whose Authorization is not a
// usable bearer key (absent, another scheme, a tab, an empty token) is
// answered 401 at once, its connection closed, while its body stalls: the
// front reads none of it, not even for the server's grace period.
func TestRefusedKeyReadsNoBody(t *testing.T) {
	srv := newFront(t, Options{BodyReadTimeout: time.Minute})
	for _, tc := range []struct{ name, header string }{
		{"absent", ""},
		{"basic", "Authorization: Basic abc\r\n"},
		{"tab", "Authorization: Bearer\tsk-x\r\n"},
		{"empty_token", "Authorization: Bearer \r\n"},
		{"scheme_only", "Authorization: Bearer\r\n"},
	} {
		for _, path := range []string{"/v1/chat/completions", "/v1/embeddings"} {
			t.Run(tc.name+path, func(t *testing.T) {
				conn, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				start := time.Now()
				fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\n%sContent-Type: application/json\r\nContent-Length: 200000\r\n\r\n{\"mo", path, tc.header)
				_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
				resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
				if err != nil {
					t.Fatalf("no answer: %v", err)
				}
				resp.Body.Close()
				if d := time.Since(start); resp.StatusCode != http.StatusUnauthorized || !resp.Close || d >= unreadBodyGrace/2 {
					t.Fatalf("status %d, Connection: close %v, after %v; want 401, closed, before %v", resp.StatusCode, resp.Close, d, unreadBodyGrace/2)
				}
			})
		}
	}
}
