package identity

import (
	"context"
	"crypto/sha256"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/flexway/flexway/server/bearer"
	"github.com/flexway/flexway/server/call"
	"github.com/flexway/flexway/server/faults"
	"github.com/flexway/flexway/server/requestid"
)

// Key is what an API key stands for.
type Key struct {
	// Name is the key's name in the configuration (audited hashed).
	Name string
	// Tenant and Agent are the caller's identity; empty for a relay.
	Tenant, Agent string
	// Relay, when set, marks the key of a trusted relay: the identity comes
	// from the named metadata keys instead.
	Relay *RelayHeaders
}

// RelayHeaders names the headers (gRPC metadata keys, compared
// case-insensitively) under which a relay passes a caller's identity.
type RelayHeaders struct {
	Tenant, Agent, Sensitive string
}

// Keyring resolves API keys. Only the SHA-256 of a key is ever looked up.
type Keyring interface {
	// Lookup returns the key whose SHA-256 is sum.
	Lookup(sum [sha256.Size]byte) (Key, bool)
}

// OperationNamer names a gRPC method for audit lines and metrics.
type OperationNamer func(fullMethod string) string

// UnaryServerInterceptor authenticates unary calls; see the package doc.
func UnaryServerInterceptor(keys Keyring, opts ...Option) grpc.UnaryServerInterceptor {
	o := evaluate(opts)
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		st, err := authenticate(ctx, keys, info.FullMethod, o)
		if st != nil {
			_ = grpc.SetHeader(ctx, metadata.Pairs(requestid.Header, st.RequestID))
		}
		if err != nil {
			return nil, err
		}
		return handler(call.NewContext(ctx, st), req)
	}
}

// StreamServerInterceptor authenticates streaming calls; see the package
// doc. The handler sees a stream whose context carries the call's state.
func StreamServerInterceptor(keys Keyring, opts ...Option) grpc.StreamServerInterceptor {
	o := evaluate(opts)
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		st, err := authenticate(ss.Context(), keys, info.FullMethod, o)
		if st != nil {
			_ = ss.SetHeader(metadata.Pairs(requestid.Header, st.RequestID))
		}
		if err != nil {
			return err
		}
		return handler(srv, &wrappedStream{ServerStream: ss, ctx: call.NewContext(ss.Context(), st)})
	}
}

// wrappedStream swaps the context of a server stream.
type wrappedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (w *wrappedStream) Context() context.Context { return w.ctx }

// authenticate returns the call state (also on error, for its request id)
// and an error when the caller is not authenticated. A call whose context
// carries the HTTP front's admission ([call.WithAdmission], in-process
// only) takes the identity the front resolved from the same metadata, so
// that the key is looked up once per call; any other call's key is looked
// up here ([Identify]).
func authenticate(ctx context.Context, keys Keyring, method string, o *options) (*call.State, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	st := &call.State{
		RequestID: requestid.OrNew(first(md, requestid.Header)),
		Operation: o.namer(method),
		Start:     time.Now(),
		Admitted:  call.AdmissionFrom(ctx), // the HTTP front's check before the body
		// http for the HTTP front's calls (an in-process context value),
		// grpc for every other.
		Listener: call.ListenerFrom(ctx),
	}
	var id call.Identity
	if a := st.Admitted; a != nil && a.Caller.KeyName != "" {
		id = a.Caller
	} else {
		var err error
		if id, err = Identify(keys, md); err != nil {
			return st, err
		}
	}
	st.KeyName, st.Relay, st.Tenant, st.Agent, st.Sensitive = id.KeyName, id.Relay, id.Tenant, id.Agent, id.Sensitive
	return st, nil
}

// MaxRelayAgentBytes bounds the agent name a trusted relay may pass: at
// most this many bytes, each printable ASCII other than space (0x21 to
// 0x7e). The name may be one this gateway does not declare: it is kept as
// passed in the call state and the audit.
const MaxRelayAgentBytes = 64

// Identify resolves the caller of a call carrying md (incoming gRPC
// metadata, or the HTTP front's forwarded headers, lower-case keys): the
// bearer key, and for a trusted relay the identity headers it passed. It
// fails with faults.InvalidAPIKey when the key is missing or unknown, or a
// relay passed no tenant, and with faults.InvalidRequest when a relay
// passed an agent name longer than [MaxRelayAgentBytes] or not printable.
// Whether the tenant and agent are declared is the budget's to check.
func Identify(keys Keyring, md metadata.MD) (call.Identity, error) {
	token, ok := bearer.Token(first(md, "authorization"))
	if !ok {
		return call.Identity{}, faults.New(faults.InvalidAPIKey, "missing API key: send Authorization: Bearer <key>")
	}
	key, ok := keys.Lookup(sha256.Sum256([]byte(token)))
	if !ok {
		return call.Identity{}, faults.New(faults.InvalidAPIKey, "invalid API key")
	}
	id := call.Identity{KeyName: key.Name}
	if key.Relay == nil {
		id.Tenant, id.Agent = key.Tenant, key.Agent
		return id, nil
	}
	id.Relay = key.Name
	id.Tenant = first(md, key.Relay.Tenant)
	if id.Tenant == "" {
		return id, faults.New(faults.InvalidAPIKey, "relay %q passed no tenant", key.Name)
	}
	id.Agent = first(md, key.Relay.Agent)
	if id.Agent != "" && (len(id.Agent) > MaxRelayAgentBytes || !printable(id.Agent)) {
		return id, faults.New(faults.InvalidRequest, "relay %q passed an agent name that is not 1 to %d printable ASCII characters without spaces", key.Name, MaxRelayAgentBytes)
	}
	if key.Relay.Sensitive != "" && call.SensitiveValue(md.Get(key.Relay.Sensitive)) {
		id.Sensitive = true
	}
	return id, nil
}

func first(md metadata.MD, key string) string {
	if key == "" {
		return ""
	}
	if v := md.Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

// printable reports whether s is printable ASCII other than space.
func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}
