package gateway

import (
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/backends"
	"github.com/flexway/flexway/server/backends/a2a"
	"github.com/flexway/flexway/server/backends/anthropic"
	"github.com/flexway/flexway/server/backends/breaker"
	"github.com/flexway/flexway/server/backends/gemini"
	"github.com/flexway/flexway/server/backends/upstream"
	"github.com/flexway/flexway/server/config"
	"github.com/flexway/flexway/server/grpcproxy"
	"github.com/flexway/flexway/server/metering"
	"github.com/flexway/flexway/server/routing"
	"github.com/flexway/flexway/server/telemetry"
)

// withBreakers puts each backend behind its circuit breaker
// (ai.backends.NAME.circuit_breaker; defaults 5 failures, 30 s).
func withBreakers(cfg *config.Config, bs map[string]backends.Backend, onChange func(backend, state string)) {
	for name, b := range bs {
		cb := cfg.AI.Backends[name].CircuitBreaker
		bs[name] = breaker.Wrap(b, cb.Failures, cb.OpenFor.Std(), onChange)
	}
}

// backendStates reports every configured backend and its circuit's state
// for the admin API; a backend Flexway does not call itself (kind: grpc,
// proxied) reports its circuit as closed. A backend's external is the one
// routing applies, read from routes (see [routing.External]: a relay
// without identity_headers.sensitive is external whatever it declares).
// A backend in pools also reports each key of its credential pool, name
// and state, never value.
func backendStates(cfg *config.Config, routes *routing.Table, bs map[string]backends.Backend, pools map[string]*upstream.Backend) []*flexwayv1.BackendState {
	now := time.Now()
	out := make([]*flexwayv1.BackendState, 0, len(cfg.AI.Backends))
	for name, b := range cfg.AI.Backends {
		st := &flexwayv1.BackendState{Name: name, Kind: string(b.Kind), External: routes.Backends[name].External, Circuit: breaker.Closed}
		for _, c := range b.Capabilities {
			st.Capabilities = append(st.Capabilities, string(c))
		}
		slices.Sort(st.Capabilities)
		if w, ok := bs[name].(*breaker.Backend); ok {
			st.Circuit = w.State()
		}
		if p, ok := pools[name]; ok {
			for _, k := range p.Credentials(now) {
				st.Credentials = append(st.Credentials, &flexwayv1.CredentialState{Name: k.Name, State: k.String()})
			}
		}
		out = append(out, st)
	}
	return out
}

// credentialPools returns the backends of bs that hold a credential pool,
// before the breakers wrap them, for [backendStates].
func credentialPools(bs map[string]backends.Backend) map[string]*upstream.Backend {
	out := map[string]*upstream.Backend{}
	for name, b := range bs {
		if ub, ok := b.(*upstream.Backend); ok && ub.Credentials(time.Time{}) != nil {
			out[name] = ub
		}
	}
	return out
}

// buildProxy builds the specialised-model proxy of ai.grpc, nil when no
// service is routed. Its errors name the configuration key.
func buildProxy(cfg *config.Config, maxMsg int) (*grpcproxy.Proxy, error) {
	g := cfg.AI.GRPC
	if len(g.Services) == 0 && len(g.DescriptorSets) == 0 {
		return nil, nil
	}
	o := grpcproxy.Options{
		DescriptorSets:  g.DescriptorSets,
		Services:        g.Services,
		Backends:        map[string]grpcproxy.Backend{},
		MaxMessageBytes: maxMsg,
	}
	for name, b := range cfg.AI.Backends {
		if b.Kind != config.KindGRPC {
			continue
		}
		h := b.IdentityHeaders
		pb := grpcproxy.Backend{Name: name, Target: b.URL, External: b.IsExternal(),
			IdentityHeaders: grpcproxy.IdentityHeaders{Tenant: h.Tenant, Agent: h.Agent, Sensitive: h.Sensitive}}
		if b.TLS != (config.BackendTLS{}) {
			pb.TLS = &grpcproxy.TLS{CAFile: b.TLS.CAFile, CertFile: b.TLS.CertFile, KeyFile: b.TLS.KeyFile}
		}
		switch b.Auth.Type {
		case config.AuthBearer, config.AuthHeader:
			v, err := b.Auth.Secret.Resolve()
			if err != nil {
				return nil, fmt.Errorf("ai.backends.%s.auth.secret: %w", name, err)
			}
			pb.AuthHeader, pb.AuthValue = "authorization", "Bearer "+v
			if b.Auth.Type == config.AuthHeader {
				pb.AuthHeader, pb.AuthValue = strings.ToLower(b.Auth.Name), v
			}
		case config.AuthTokenFile:
			pb.TokenFile = b.Auth.Path
		}
		o.Backends[name] = pb
	}
	return grpcproxy.New(o)
}

// proxiedMetering adapts the proxy's method table to the budget
// interceptor.
func proxiedMetering(p *grpcproxy.Proxy) (func(string) (metering.Proxied, bool), func(any) (int, bool)) {
	if p == nil {
		return nil, nil
	}
	lookup := func(fullMethod string) (metering.Proxied, bool) {
		m, ok := p.Lookup(fullMethod)
		if !ok {
			return metering.Proxied{}, false
		}
		return metering.Proxied{Metering: m.Metering, NanoEURPerThousand: m.NanoEURPerThousand}, true
	}
	size := func(msg any) (int, bool) {
		f, ok := msg.(*grpcproxy.Frame)
		if !ok {
			return 0, false
		}
		return len(f.Payload), true
	}
	return lookup, size
}

// buildBackends builds every backend Flexway calls itself: kind openai
// and relay (a relay speaks the same API) natively, kinds anthropic,
// gemini and a2a through their wire format's translation
// ([backends.Wire]) over the same upstream path. kind: grpc backends are
// proxied, not built here. log receives each backend's once-per-field
// notice of request fields its wire format dropped.
// A pooled key's attempts are counted by meter.
func buildBackends(cfg *config.Config, log *slog.Logger, meter *credentialMeter) (map[string]backends.Backend, map[string][]string, error) {
	bs := map[string]backends.Backend{}
	models := map[string][]string{}
	names := make([]string, 0, len(cfg.AI.Backends))
	for n := range cfg.AI.Backends {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		b := cfg.AI.Backends[name]
		if b.Kind == config.KindGRPC {
			continue
		}
		auth, err := upstreamAuth(fmt.Sprintf("ai.backends.%s.auth", name), b.Auth)
		if err != nil {
			return nil, nil, err
		}
		creds, err := upstreamCredentials(name, b.Credentials)
		if err != nil {
			return nil, nil, err
		}
		o := upstream.Options{
			Name:          name,
			URL:           b.URL,
			Auth:          auth,
			Credentials:   creds,
			CredentialUse: meter.hook(name),
			TLS:           upstream.TLS{CAFile: b.TLS.CAFile, CertFile: b.TLS.CertFile, KeyFile: b.TLS.KeyFile},
			Models:        b.Models,
			DefaultModel:  b.DefaultModel,
			Timeout:       b.Timeout.Std(),
			IdleTimeout:   b.IdleTimeout.Std(),
			MeteredBy:     string(b.Metering),
			Log:           log,
		}
		switch b.Kind {
		case config.KindRelay:
			// Only a relay passes the caller's identity, from the call
			// state, under the names it declares.
			h := b.IdentityHeaders
			o.IdentityHeaders = upstream.IdentityHeaders{Tenant: h.Tenant, Agent: h.Agent, Sensitive: h.Sensitive}
		case config.KindAnthropic:
			// api_version defaults to 2023-06-01 at load.
			o.Header = http.Header{"Anthropic-Version": {b.APIVersion}}
			o.Wire = anthropic.Wire{Options: anthropic.Options{MaxOutputTokens: b.MaxOutputTokens}}
		case config.KindGemini:
			o.Wire = gemini.Wire{}
		case config.KindA2A:
			o.Wire = a2a.Wire{Backend: name, Images: b.Can(config.CapabilityVision)}
		}
		ub, err := upstream.New(o)
		if err != nil {
			return nil, nil, fmt.Errorf("ai.backends.%s: %w", name, err)
		}
		bs[name] = ub
		models[name] = b.Models
	}
	return bs, models, nil
}

// upstreamAuth is a's upstream form, its secret resolved; path is its key
// path, for errors.
func upstreamAuth(path string, a config.Auth) (upstream.Auth, error) {
	auth := upstream.Auth{Type: string(a.Type), Header: a.Name, TokenFile: a.Path}
	if !a.Secret.IsZero() {
		v, err := a.Secret.Resolve()
		if err != nil {
			return upstream.Auth{}, fmt.Errorf("%s.secret: %w", path, err)
		}
		auth.Secret = v
	}
	return auth, nil
}

// upstreamCredentials is the pool of ai.backends.NAME.credentials, its
// secrets resolved; nil when the backend has none.
func upstreamCredentials(name string, c *config.Credentials) (*upstream.Credentials, error) {
	if c == nil {
		return nil, nil
	}
	out := &upstream.Credentials{Strategy: string(c.Strategy), Keys: make([]upstream.CredentialKey, len(c.Keys))}
	for i, k := range c.Keys {
		auth, err := upstreamAuth(fmt.Sprintf("ai.backends.%s.credentials.keys[%d].auth", name, i), k.Auth)
		if err != nil {
			return nil, err
		}
		out.Keys[i] = upstream.CredentialKey{Name: k.Name, Auth: auth, Weight: k.Weight}
	}
	return out, nil
}

// credentialMeter counts the attempts of pooled keys
// (flexway.upstream.credential.calls) once the metrics exist: the backends
// are built before them.
type credentialMeter struct {
	m atomic.Pointer[telemetry.Metrics]
}

// hook is backend's [upstream.Options.CredentialUse].
func (c *credentialMeter) hook(backend string) func(credential, outcome string) {
	return func(credential, outcome string) {
		if m := c.m.Load(); m != nil {
			m.CredentialUsed(backend, credential, outcome)
		}
	}
}
