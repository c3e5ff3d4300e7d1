package upstream

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flexway/flexway/server/backends"
	"github.com/flexway/flexway/server/backends/credentials"
	"github.com/flexway/flexway/server/faults"
)

// keyedUpstream answers by the bearer key of each request: statuses maps
// a key ("sk-a") to the status it is answered with, and headers to its
// Retry-After; any other key is served by serve.
type keyedUpstream struct {
	mu       sync.Mutex
	statuses map[string]int
	retry    map[string]string
	seen     []string
}

func (k *keyedUpstream) set(key string, status int, retryAfter string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.statuses[key], k.retry[key] = status, retryAfter
}

func (k *keyedUpstream) keys() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]string(nil), k.seen...)
}

func (k *keyedUpstream) handler(serve http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		key := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		k.mu.Lock()
		k.seen = append(k.seen, key)
		status, retry := k.statuses[key], k.retry[key]
		k.mu.Unlock()
		if status == 0 {
			serve(w, r)
			return
		}
		if retry != "" {
			w.Header().Set("Retry-After", retry)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		io.WriteString(w, `{"error":{"message":"upstream body echoing `+key+`","type":"rate_limit_error"}}`)
	}
}

// pooled is a backend named main with a pool of bearer keys sk-<name>
// over a keyed upstream serving serve; log captures the backend's log.
func pooled(t *testing.T, serve http.HandlerFunc, names ...string) (*Backend, *keyedUpstream, *bytes.Buffer) {
	t.Helper()
	ku := &keyedUpstream{statuses: map[string]int{}, retry: map[string]string{}}
	u := newUpstream(t, ku.handler(serve))
	var log bytes.Buffer
	cr := &Credentials{}
	for _, n := range names {
		cr.Keys = append(cr.Keys, CredentialKey{Name: n, Auth: Auth{Type: AuthBearer, Secret: "sk-" + n}})
	}
	b := newBackend(t, u, Options{Credentials: cr, Log: slog.New(slog.NewTextHandler(&log, nil))})
	return b, ku, &log
}

func stateOf(b *Backend, i int) credentials.State { return b.Credentials(time.Now())[i] }

// A 429 on key a: the same call is served at once by key b, a rests
// until its Retry-After and is used again after it.
func TestPool429RestsAndRetriesOnNextKey(t *testing.T) {
	t.Parallel()
	b, ku, _ := pooled(t, serveCompletion, "a", "b")
	ku.set("sk-a", 429, "1")
	resp, served, err := b.CreateChatCompletion(context.Background(), chatRequest("small-1"))
	if err != nil || resp.GetChoices()[0].GetMessage().GetText() != "Hi there" || served.Backend != "main" {
		t.Fatalf("call: %v %v %+v", err, resp, served)
	}
	if got := strings.Join(ku.keys(), ","); got != "sk-a,sk-b" {
		t.Fatalf("keys tried %s, want sk-a,sk-b", got)
	}
	if st := stateOf(b, 0); st.State != credentials.StateResting || time.Until(st.Until) > time.Second || !strings.HasPrefix(st.String(), "resting until 20") {
		t.Fatalf("key a: %+v %s", st, st)
	}
	if st := stateOf(b, 1); st.String() != "ok" {
		t.Fatalf("key b: %s", st)
	}
	// While a rests, every call goes to b without touching a.
	for range 3 {
		if _, _, err := b.CreateChatCompletion(context.Background(), chatRequest("small-1")); err != nil {
			t.Fatal(err)
		}
	}
	if got := strings.Join(ku.keys()[2:], ","); got != "sk-b,sk-b,sk-b" {
		t.Fatalf("keys while a rests: %s", got)
	}
	ku.set("sk-a", 0, "")
	time.Sleep(1100 * time.Millisecond)
	for range 2 {
		if _, _, err := b.CreateChatCompletion(context.Background(), chatRequest("small-1")); err != nil {
			t.Fatal(err)
		}
	}
	if got := ku.keys()[5:]; !strings.Contains(strings.Join(got, ","), "sk-a") {
		t.Fatalf("after its Retry-After key a is not used again: %v", got)
	}
}

// Retry-After as an HTTP date, and none at all (60 s).
func TestPool429RetryAfterForms(t *testing.T) {
	t.Parallel()
	b, ku, _ := pooled(t, serveCompletion, "a", "b")
	date := time.Now().Add(90 * time.Second).UTC().Truncate(time.Second)
	ku.set("sk-a", 429, date.Format(http.TimeFormat))
	if _, _, err := b.CreateChatCompletion(context.Background(), chatRequest("small-1")); err != nil {
		t.Fatal(err)
	}
	// Rounded up to whole seconds from the moment of the 429.
	if st := stateOf(b, 0); st.Until.Before(date) || st.Until.After(date.Add(time.Second)) {
		t.Fatalf("key a rests until %s, want %s", st.Until, date)
	}
	ku.set("sk-b", 429, "")
	_, _, err := b.CreateChatCompletion(context.Background(), chatRequest("small-1"))
	fe := wantFault(t, err, faults.RateLimited)
	if st := stateOf(b, 1); time.Until(st.Until) < 59*time.Second || time.Until(st.Until) > 60*time.Second {
		t.Fatalf("key b without Retry-After rests until %s, want 60 s", st.Until)
	}
	// Both rest: the earliest return is b's, 60 s.
	if fe.RetryAfterSeconds != 60 {
		t.Fatalf("Retry-After %d, want 60 (b, the earliest)", fe.RetryAfterSeconds)
	}
}

// Every key rests: Flexway's own 429 with the earliest Retry-After, not
// the upstream's body, neither fallen back from nor counted against the
// circuit; the last key tried included.
func TestPoolAllResting(t *testing.T) {
	t.Parallel()
	b, ku, _ := pooled(t, serveCompletion, "a", "b", "c")
	ku.set("sk-a", 429, "30")
	ku.set("sk-b", 429, "5")
	ku.set("sk-c", 429, "12")
	_, _, err := b.CreateChatCompletion(context.Background(), chatRequest("small-1"))
	fe := wantFault(t, err, faults.RateLimited)
	if fe.RetryAfterSeconds != 5 || fe.HTTPStatus() != 429 || len(fe.UpstreamBody) != 0 || strings.Contains(fe.Message, "sk-") {
		t.Fatalf("refusal %+v", fe)
	}
	if backends.Unavailable(err) {
		t.Fatal("a rate-limited pool counts as unavailable: it would be fallen back from and open the circuit")
	}
	if n := len(ku.keys()); n != 3 {
		t.Fatalf("%d attempts, want 3 (each key once)", n)
	}
	// The next call sends nothing.
	_, _, err = b.CreateChatCompletion(context.Background(), chatRequest("small-1"))
	wantFault(t, err, faults.RateLimited)
	if n := len(ku.keys()); n != 3 {
		t.Fatalf("%d attempts after a second call, want still 3", n)
	}
}

// 401, 402 and 403 set the key aside for good, logged once with its name
// and never its value; every key set aside is 502
// upstream_credentials_exhausted.
func TestPoolSetAside(t *testing.T) {
	t.Parallel()
	b, ku, log := pooled(t, serveCompletion, "a", "b", "c", "d")
	ku.set("sk-a", 401, "")
	ku.set("sk-b", 402, "")
	ku.set("sk-c", 403, "")
	for range 4 {
		if _, _, err := b.CreateChatCompletion(context.Background(), chatRequest("small-1")); err != nil {
			t.Fatal(err)
		}
	}
	var states []string
	for _, s := range b.Credentials(time.Now()) {
		states = append(states, s.Name+"="+s.String())
	}
	if got := strings.Join(states, " "); got != "a=set aside: 401 b=set aside: 402 c=set aside: 403 d=ok" {
		t.Fatalf("states %s", got)
	}
	for _, n := range []string{"a", "b", "c"} {
		if c := strings.Count(log.String(), "credential="+n+" "); c != 1 {
			t.Fatalf("key %s logged %d times, want once:\n%s", n, c, log)
		}
	}
	notContains(t, "log", log.String(), "sk-a", "sk-b", "sk-c", "sk-d")
	ku.set("sk-d", 401, "")
	_, _, err := b.StreamChatCompletion(context.Background(), chatRequest("small-1"))
	fe := wantFault(t, err, faults.UpstreamCredentialsExhausted)
	if fe.HTTPStatus() != 502 || backends.Unavailable(err) {
		t.Fatalf("exhausted: status %d unavailable %v", fe.HTTPStatus(), backends.Unavailable(err))
	}
	notContains(t, "message", fe.Error(), "sk-")
}

// A 429 before a stream's first byte moves the stream to the next key.
func TestPoolStream429(t *testing.T) {
	t.Parallel()
	b, ku, _ := pooled(t, serveStream("Hel", "lo"), "a", "b")
	ku.set("sk-a", 429, "3")
	s, _, err := b.StreamChatCompletion(context.Background(), chatRequest("small-1"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c, err := s.Recv()
	if err != nil || deltaText(c) != "Hel" {
		t.Fatalf("first chunk %v %v", c, err)
	}
	if got := strings.Join(ku.keys(), ","); got != "sk-a,sk-b" {
		t.Fatalf("keys %s", got)
	}
}

// A 5xx or another 4xx ends the call as with plain auth: no second key.
func TestPoolOtherStatusesAsToday(t *testing.T) {
	t.Parallel()
	b, ku, _ := pooled(t, serveCompletion, "a", "b")
	ku.set("sk-a", 503, "")
	ku.set("sk-b", 503, "")
	_, _, err := b.CreateChatCompletion(context.Background(), chatRequest("small-1"))
	wantFault(t, err, faults.UpstreamError)
	if !backends.Unavailable(err) || len(ku.keys()) != 1 {
		t.Fatalf("5xx: unavailable %v, %d attempts, want true and 1", backends.Unavailable(err), len(ku.keys()))
	}
	ku.set("sk-b", 400, "")
	_, _, err = b.CreateChatCompletion(context.Background(), chatRequest("small-1"))
	if fe := wantFault(t, err, faults.UpstreamStatus); fe.UpstreamHTTPStatus != 400 || len(ku.keys()) != 2 {
		t.Fatalf("400: %+v after %d attempts", fe, len(ku.keys()))
	}
	for _, s := range b.Credentials(time.Now()) {
		if s.State != credentials.StateOK {
			t.Fatalf("key %s %s after a 5xx or a 400", s.Name, s)
		}
	}
}

// A relay's 403 is its peer's policy refusal: relayed, the key kept.
func TestPoolRelay403Relayed(t *testing.T) {
	t.Parallel()
	ku := &keyedUpstream{statuses: map[string]int{"sk-a": 403}, retry: map[string]string{}}
	u := newUpstream(t, ku.handler(serveCompletion))
	b := newBackend(t, u, Options{IdentityHeaders: IdentityHeaders{Tenant: "Flexway-Tenant"},
		Credentials: &Credentials{Keys: []CredentialKey{{Name: "a", Auth: Auth{Type: AuthBearer, Secret: "sk-a"}}}}})
	_, _, err := b.CreateChatCompletion(context.Background(), chatRequest("small-1"))
	if fe := wantFault(t, err, faults.UpstreamStatus); fe.UpstreamHTTPStatus != 403 {
		t.Fatalf("%+v", fe)
	}
	if st := stateOf(b, 0); st.State != credentials.StateOK {
		t.Fatalf("relay 403 set the key aside: %s", st)
	}
}

// A token_file key is read at every call: a rotated token is used at once.
func TestPoolTokenFileReread(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "tok")
	if err := os.WriteFile(path, []byte("sk-one\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ku := &keyedUpstream{statuses: map[string]int{}, retry: map[string]string{}}
	u := newUpstream(t, ku.handler(serveCompletion))
	var uses []string
	b := newBackend(t, u, Options{Credentials: &Credentials{Keys: []CredentialKey{{Name: "f", Auth: Auth{Type: AuthTokenFile, TokenFile: path}}}},
		CredentialUse: func(c, o string) { uses = append(uses, c+":"+o) }})
	for _, tok := range []string{"sk-one", "sk-two"} {
		if err := os.WriteFile(path, []byte(tok+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, _, err := b.CreateChatCompletion(context.Background(), chatRequest("small-1")); err != nil {
			t.Fatal(err)
		}
	}
	if got := strings.Join(ku.keys(), ","); got != "sk-one,sk-two" {
		t.Fatalf("tokens sent %s", got)
	}
	ku.set("sk-two", 429, "")
	_, _, _ = b.CreateChatCompletion(context.Background(), chatRequest("small-1"))
	if got := strings.Join(uses, ","); got != "f:served,f:served,f:rate_limited" {
		t.Fatalf("credential uses %s", got)
	}
}

func TestPoolOptionsRefused(t *testing.T) {
	t.Parallel()
	key := CredentialKey{Name: "a", Auth: Auth{Type: AuthBearer, Secret: "sk-a"}}
	for _, tc := range []struct {
		name string
		o    Options
		want string
	}{
		{"both", Options{Auth: Auth{Type: AuthBearer, Secret: "x"}, Credentials: &Credentials{Keys: []CredentialKey{key}}}, "auth and credentials are both set"},
		{"none", Options{Credentials: &Credentials{Keys: []CredentialKey{{Name: "a"}}}}, "keys[0] (a): auth type none"},
		{"bad key", Options{Credentials: &Credentials{Keys: []CredentialKey{{Name: "a", Auth: Auth{Type: AuthBearer}}}}}, "keys[0] (a): auth: bearer needs a secret"},
		{"empty", Options{Credentials: &Credentials{}}, "at least one key"},
		{"duplicate", Options{Credentials: &Credentials{Keys: []CredentialKey{key, key}}}, `duplicate name "a"`},
		{"identity on key header", Options{IdentityHeaders: IdentityHeaders{Tenant: "api-key"},
			Credentials: &Credentials{Keys: []CredentialKey{{Name: "h", Auth: Auth{Type: AuthHeader, Header: "api-key", Secret: "v"}}}}}, "carries the backend's credentials"},
	} {
		tc.o.Name, tc.o.URL = "main", "http://127.0.0.1:1/v1"
		if _, err := New(tc.o); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

// Concurrent calls over a pool whose one key answers 429 (run with
// -race): every call is served, by the other keys.
func TestPoolConcurrent(t *testing.T) {
	t.Parallel()
	b, ku, _ := pooled(t, serveCompletion, "a", "b", "c")
	ku.set("sk-b", 429, "60")
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 10 {
				if _, _, err := b.CreateChatCompletion(context.Background(), chatRequest("small-1")); err != nil {
					t.Error(err)
					return
				}
				_ = b.Credentials(time.Now())
			}
		})
	}
	wg.Wait()
	n := 0
	for _, k := range ku.keys() {
		if k == "sk-b" {
			n++
		}
	}
	if n == 0 || n > 8 {
		t.Fatalf("key b tried %d times, want 1 to 8 (only calls that picked it before it rested)", n)
	}
}
