// Package governance is the interceptor of stages 3 and 4 of the AI
// pipeline (DESIGN.md): it resolves, once per call, the ai.policies whose
// match selects the call into [call.State].Policies, and applies their
// model rules (governance.models) before any stage that costs: a refused
// call reaches neither the image checks, nor the budget, nor a backend,
// and reserves nothing.
//
// The key a call is matched on is its listener (http or grpc), its
// operation (ai.chatCompletions, ai.embeddings, ai.listModels, or for a
// proxied specialised-model method its service's full name,
// "acme.ocr.v1.OcrService"), the requested model (chat and embeddings;
// "" otherwise), its tenant and its agent. A requested model that no
// alias names and that the call's first backend does not list is
// matched as the model that backend serves it as, its default_model
// ([Config.ServedModel]): a policy matched on a model holds every call
// served as that model, whatever name the caller spelled it with. The
// model rules (governance.models) still check the name as sent.
//
// A model rule that refuses is PERMISSION_DENIED with ErrorInfo reason
// model_not_allowed and metadata param "model" (HTTP 403 in the OpenAI
// envelope), naming the refusing policy and the model, nothing else. A
// shadow policy that would refuse refuses nothing: the call's
// State.WouldDeny records it, for the audit line and the metric.
//
// A proxied specialised-model call names no model: model rules do not
// apply to it (a policy matched on a model never selects it either). Its
// service is served by one backend (ai.grpc.services), which the
// backend rules (governance.backends) must allow: otherwise the call is
// PERMISSION_DENIED, reason backend_not_allowed, before the budget. The
// backend rules of chat and embeddings calls apply in routing, over the
// whole plan (server/metering, server/routing).
//
// A streaming call is resolved when its request is received (RecvMsg),
// as the validate and vision interceptors check it; a proxied call when
// it starts. A call without a [call.State] (one that did not pass
// identity) passes untouched.
package governance

import (
	"context"
	"strings"

	"google.golang.org/grpc"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/call"
	"github.com/flexway/flexway/server/faults"
	"github.com/flexway/flexway/server/policy"
)

// Config is what the interceptors need.
type Config struct {
	// Policies is the compiled ai.policies. Required.
	Policies *policy.Table
	// ProxiedBackend, when set, returns the backend that serves a proxied
	// specialised-model method by its full name
	// ("/acme.ocr.v1.OcrService/Recognize"), false for any other method.
	ProxiedBackend func(fullMethod string) (backend string, ok bool)
	// ServedModel, when set, returns the model a chat or embeddings call
	// of st naming model is matched on: model itself when an alias names
	// it or its plan's first backend lists it (or lists no models), else
	// that backend's default_model, which serves it. Nil matches on
	// model as sent.
	ServedModel func(st *call.State, model string) string
}

// UnaryServerInterceptor resolves the policies of unary calls and applies
// their model rules before the handler runs. It panics when c.Policies
// is nil: an ungoverned gateway is a wiring choice (leave the interceptor
// out), not an accident.
func UnaryServerInterceptor(c Config) grpc.UnaryServerInterceptor {
	mustTable(c)
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if st := call.FromContext(ctx); st != nil {
			if err := c.govern(st, req); err != nil {
				return nil, err
			}
		}
		return handler(ctx, req)
	}
}

// StreamServerInterceptor resolves the policies of streaming calls: a
// proxied call's when it starts (its backend rule applied before the
// handler runs), any other's when its first request is received (RecvMsg
// returns the refusal in place of the message, so the service never
// starts on a refused request). It panics when c.Policies is nil.
func StreamServerInterceptor(c Config) grpc.StreamServerInterceptor {
	mustTable(c)
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		st := call.FromContext(ss.Context())
		if st == nil {
			return handler(srv, ss)
		}
		if c.ProxiedBackend != nil {
			if backend, ok := c.ProxiedBackend(info.FullMethod); ok {
				if err := c.governProxied(st, info.FullMethod, backend); err != nil {
					return err
				}
				return handler(srv, ss)
			}
		}
		return handler(srv, &stream{ServerStream: ss, c: c, st: st})
	}
}

// stream resolves the call's policies when its first request is received.
type stream struct {
	grpc.ServerStream
	c        Config
	st       *call.State
	resolved bool
}

// RecvMsg implements [grpc.ServerStream.RecvMsg]; see
// [StreamServerInterceptor].
func (s *stream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if s.resolved {
		return nil
	}
	s.resolved = true
	return s.c.govern(s.st, m)
}

// govern resolves the policies of the call of st, a call of one of
// Flexway's own methods (its operation is st.Operation) whose request is
// req, and applies their model rule.
func (c Config) govern(st *call.State, req any) error {
	model, named := requestedModel(req)
	matched := model
	if named && c.ServedModel != nil {
		matched = c.ServedModel(st, model)
	}
	st.Policies = c.Policies.Resolve(policy.Key{
		Listener: st.Listener, Operation: st.Operation, Model: matched, Tenant: st.Tenant, Agent: st.Agent,
	})
	if !named || len(st.Policies.Policies) == 0 {
		return nil
	}
	deny, shadow := st.Policies.CheckModel(model)
	if deny != nil {
		// The refusal's audit line names the model refused, as a served
		// call's does.
		st.SetOutcome(call.Outcome{ModelRequested: model})
		fe := faults.New(faults.ModelNotAllowed, "model %.64q is not allowed for this caller by policy %.64q", model, deny.Policy)
		fe.Param = "model"
		return fe
	}
	if shadow != nil && st.WouldDeny == nil {
		st.WouldDeny = shadow
	}
	return nil
}

// governProxied resolves the policies of a proxied call of fullMethod,
// served by backend, and applies their backend rule.
func (c Config) governProxied(st *call.State, fullMethod, backend string) error {
	st.Policies = c.Policies.Resolve(policy.Key{
		Listener: st.Listener, Operation: Service(fullMethod), Tenant: st.Tenant, Agent: st.Agent,
	})
	if len(st.Policies.Policies) == 0 {
		return nil
	}
	plan := []string{backend}
	if !st.Policies.AllowBackend(backend) {
		name := ""
		if d := st.Policies.BackendDenial(plan); d != nil {
			name = d.Policy
		}
		return faults.New(faults.BackendNotAllowed, "%s is served by backend %.64q, which policy %.64q does not allow for this caller",
			Service(fullMethod), backend, name)
	}
	if d := st.Policies.ShadowBackends(plan); d != nil && st.WouldDeny == nil {
		st.WouldDeny = d
	}
	return nil
}

// requestedModel is the model a chat or embeddings request names, and
// whether req is one (a request naming no model names "").
func requestedModel(req any) (string, bool) {
	switch r := req.(type) {
	case *flexwayv1.CreateChatCompletionRequest:
		return r.GetModel(), true
	case *flexwayv1.CreateEmbeddingRequest:
		return r.GetModel(), true
	}
	return "", false
}

// Service is the full name of a gRPC method's service, the operation a
// policy matches a proxied call on: "acme.ocr.v1.OcrService" for
// "/acme.ocr.v1.OcrService/Recognize"; fullMethod itself when it has no
// service part.
func Service(fullMethod string) string {
	m := strings.TrimPrefix(fullMethod, "/")
	if i := strings.LastIndexByte(m, '/'); i > 0 {
		return m[:i]
	}
	return fullMethod
}

func mustTable(c Config) {
	if c.Policies == nil {
		panic("interceptors/governance: nil Policies")
	}
}
