package upstream

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/flexway/flexway/server/backends"
	"github.com/flexway/flexway/server/call"
	"github.com/flexway/flexway/server/faults"
)

// relayHeaders are the identity headers of the relay tests.
var relayHeaders = IdentityHeaders{Tenant: "flexway-tenant", Agent: "Flexway-Agent", Sensitive: "X-Peer-Sensitive"}

// TestRelaySendsIdentityFromCallState: a relay sends the call state's
// tenant, agent and sensitivity under its declared names (canonicalised),
// on unary, streamed and embeddings calls alike; the agent header is left
// out when there is no agent, the sensitive header when the call is not
// sensitive; a call without a state sends no identity.
func TestRelaySendsIdentityFromCallState(t *testing.T) {
	t.Parallel()
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Header.Get("Accept") == "text/event-stream":
			serveStream("x")(w, r)
		case strings.HasSuffix(r.URL.Path, "/embeddings"):
			serveEmbedding(w, r)
		default:
			serveCompletion(w, r)
		}
	})
	b := newBackend(t, u, Options{
		Auth:            Auth{Type: AuthBearer, Secret: "sk-relay-key"},
		IdentityHeaders: relayHeaders,
		MeteredBy:       MeteredUpstream,
	})
	if b.MeteredBy() != MeteredUpstream {
		t.Errorf("MeteredBy() = %q, want %q", b.MeteredBy(), MeteredUpstream)
	}
	base := []string{"Accept", "Accept-Encoding", "Authorization", "Content-Length", "Content-Type", "User-Agent"}
	tests := []struct {
		name  string
		state *call.State
		want  map[string]string // identity headers expected, by canonical name
	}{
		{"tenant_agent_sensitive", &call.State{Tenant: "acme", Agent: "bot", Sensitive: true},
			map[string]string{"Flexway-Tenant": "acme", "Flexway-Agent": "bot", "X-Peer-Sensitive": "true"}},
		{"no_agent_not_sensitive", &call.State{Tenant: "globex"},
			map[string]string{"Flexway-Tenant": "globex"}},
		{"no_state", nil, map[string]string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			if tt.state != nil {
				ctx = call.NewContext(ctx, tt.state)
			}
			for _, op := range []string{"unary", "stream", "embeddings"} {
				switch op {
				case "unary":
					if _, _, err := b.CreateChatCompletion(ctx, chatRequest("m")); err != nil {
						t.Fatal(err)
					}
				case "stream":
					s, _, err := b.StreamChatCompletion(ctx, chatRequest("m"))
					if err != nil {
						t.Fatal(err)
					}
					s.Close()
				case "embeddings":
					if _, _, err := b.CreateEmbedding(ctx, embeddingRequest("e")); err != nil {
						t.Fatal(err)
					}
				}
				h := u.last(t).Header
				want := slices.Clone(base)
				for name := range tt.want {
					want = append(want, name)
				}
				slices.Sort(want)
				if got := headerNames(h); !slices.Equal(got, want) {
					t.Errorf("%s: upstream saw headers %v, want %v", op, got, want)
				}
				for name, v := range tt.want {
					if got := h.Values(name); !slices.Equal(got, []string{v}) {
						t.Errorf("%s: %s = %q, want [%q]", op, name, got, v)
					}
				}
				if h.Get("Authorization") != "Bearer sk-relay-key" {
					t.Errorf("%s: Authorization = %q, want the relay's own key", op, h.Get("Authorization"))
				}
			}
		})
	}
}

// TestOpenAIBackendSendsNoIdentity: without IdentityHeaders (every
// kind: openai backend) the call state's identity never leaves, and the
// backend is metered locally.
func TestOpenAIBackendSendsNoIdentity(t *testing.T) {
	t.Parallel()
	u := newUpstream(t, serveCompletion)
	b := newBackend(t, u, Options{})
	if b.MeteredBy() != MeteredLocal {
		t.Errorf("MeteredBy() = %q, want %q (the default)", b.MeteredBy(), MeteredLocal)
	}
	ctx := call.NewContext(context.Background(), &call.State{Tenant: "acme", Agent: "bot", Sensitive: true})
	if _, _, err := b.CreateChatCompletion(ctx, chatRequest("m")); err != nil {
		t.Fatal(err)
	}
	want := []string{"Accept", "Accept-Encoding", "Content-Length", "Content-Type", "User-Agent"}
	if got := headerNames(u.last(t).Header); !slices.Equal(got, want) {
		t.Errorf("upstream saw headers %v, want %v", got, want)
	}
}

// TestRelayIdentityValueNotAHeader: a tenant that cannot be sent as a
// header value (a relay may pass anything) is left out, never sent
// mangled or split into another header.
func TestRelayIdentityValueNotAHeader(t *testing.T) {
	t.Parallel()
	u := newUpstream(t, serveCompletion)
	b := newBackend(t, u, Options{IdentityHeaders: relayHeaders})
	ctx := call.NewContext(context.Background(), &call.State{Tenant: "acme\r\nX-Injected: 1", Agent: "bot"})
	if _, _, err := b.CreateChatCompletion(ctx, chatRequest("m")); err != nil {
		t.Fatal(err)
	}
	h := u.last(t).Header
	if _, ok := h["Flexway-Tenant"]; ok {
		t.Errorf("tenant header sent: %q", h.Values("Flexway-Tenant"))
	}
	if _, ok := h["X-Injected"]; ok {
		t.Error("a header was injected through the tenant")
	}
	if h.Get("Flexway-Agent") != "bot" {
		t.Errorf("Flexway-Agent = %q, want bot", h.Get("Flexway-Agent"))
	}
}

func TestNewRefusesRelayOptions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		o    Options
		want string
	}{
		{"bad_name", Options{IdentityHeaders: IdentityHeaders{Tenant: "Flexway Tenant"}}, `identity_headers: tenant: "Flexway Tenant" is not a valid header name`},
		{"reserved", Options{IdentityHeaders: IdentityHeaders{Agent: "content-type"}}, `identity_headers: agent: header "content-type" is set by the backend itself`},
		{"authorization", Options{IdentityHeaders: IdentityHeaders{Tenant: "authorization"}}, `identity_headers: tenant: header "authorization" carries the backend's credentials`},
		{"auth_header", Options{Auth: Auth{Type: AuthHeader, Header: "api-key", Secret: "s"}, IdentityHeaders: IdentityHeaders{Tenant: "Api-Key"}},
			`identity_headers: tenant: header "Api-Key" carries the backend's credentials`},
		{"duplicate", Options{IdentityHeaders: IdentityHeaders{Tenant: "X-Who", Sensitive: "x-who"}}, `identity_headers: sensitive: header "x-who" is also tenant`},
		{"metering", Options{MeteredBy: "remote"}, `metering: unknown value "remote" (want local or upstream)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.o.Name, tt.o.URL = "peer", "http://127.0.0.1:1/v1"
			_, err := New(tt.o)
			if err == nil || err.Error() != `backend "peer": `+tt.want {
				t.Fatalf("New: %v, want %q", err, `backend "peer": `+tt.want)
			}
		})
	}
}

// TestRelayPeer403RelayedAsIs: a relay's peer is a Flexway, whose 403
// refuses the caller's call (a sensitive call it cannot keep inside): it
// reaches the caller as is. Its 401, and any backend's 403 that is not a
// relay's, refuse Flexway's own credentials and stay an upstream error.
func TestRelayPeer403RelayedAsIs(t *testing.T) {
	t.Parallel()
	const refusal = `{"error":{"message":"sensitive call: no internal backend serves chat","type":"permission_error","param":null,"code":"sensitive_no_internal_backend"}}`
	for _, tc := range []struct {
		name   string
		relay  bool
		status int
		asIs   bool
	}{
		{"relay 403", true, 403, true},
		{"relay 401", true, 401, false},
		{"openai 403", false, 403, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := newUpstream(t, func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tc.status)
				_, _ = w.Write([]byte(refusal))
			})
			o := Options{Auth: Auth{Type: AuthBearer, Secret: "sk-relay-key"}}
			if tc.relay {
				o.IdentityHeaders = relayHeaders
			}
			b := newBackend(t, u, o)
			_, _, err := b.CreateChatCompletion(call.NewContext(context.Background(), &call.State{Tenant: "acme"}), chatRequest("m"))
			var fe *faults.Error
			if !errors.As(err, &fe) {
				t.Fatalf("error %v", err)
			}
			asIs := fe.Reason == faults.UpstreamStatus && fe.UpstreamHTTPStatus == tc.status && string(fe.UpstreamBody) == refusal
			if asIs != tc.asIs || (!tc.asIs && !errors.Is(err, backends.ErrUpstreamAuth)) {
				t.Fatalf("%+v; want relayed as is: %v", fe, tc.asIs)
			}
		})
	}
}
