package gateway

import (
	"context"
	"net/http"
	"time"

	"google.golang.org/grpc/metadata"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/call"
	"github.com/flexway/flexway/server/routing"
	"github.com/flexway/flexway/server/routing/alias"
)

// aliasResolver is the meter's [metering.Config.ResolveAlias] over the
// compiled ai.aliases: the requested model of a chat or embeddings call,
// when it names an alias, becomes the call's default route; a classifier
// alias asks its scorer (bounded by its timeout, never with a sensitive
// call's text when the scorer is external) and takes its below route on a
// low score. Nil when no alias is declared.
//
// A caller whose tenant or agent has a backend override is not routed by
// aliases (routes.Overridden): nothing is resolved and no scorer is asked.
func aliasResolver(t *alias.Table, routes *routing.Table) func(context.Context, *call.State, any) *routing.AliasRoute {
	if t == nil || len(t.Names()) == 0 {
		return nil
	}
	// The scorer's client: no redirect is followed (the text would be
	// sent elsewhere); each call's own timeout bounds it.
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Transport: &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 90 * time.Second}}
	return func(ctx context.Context, st *call.State, req any) *routing.AliasRoute {
		if routes.Overridden(st.Tenant, st.Agent) {
			return nil
		}
		var model, user string
		var chat *flexwayv1.CreateChatCompletionRequest
		switch r := req.(type) {
		case *flexwayv1.CreateChatCompletionRequest:
			model, user, chat = r.GetModel(), r.GetUser(), r
		case *flexwayv1.CreateEmbeddingRequest:
			model, user = r.GetModel(), r.GetUser()
		default:
			return nil
		}
		if !t.Has(model) {
			// Most calls name a model: no metadata, no subject.
			return nil
		}
		md, _ := metadata.FromIncomingContext(ctx)
		route, ok := t.Resolve(model, alias.Subject{Tenant: st.Tenant, Agent: st.Agent, User: user, Header: func(name string) string {
			if v := md.Get(name); len(v) > 0 {
				return v[0]
			}
			return ""
		}})
		if !ok {
			return nil
		}
		if spec := route.Classifier; spec != nil {
			text, msgs := classifierText(chat)
			if alias.Classify(ctx, *spec, text, msgs, st.Sensitive, client) {
				route = spec.Below
			}
		}
		out := &routing.AliasRoute{Name: route.Alias, Targets: make([]routing.AliasTarget, len(route.Targets))}
		for i, tg := range route.Targets {
			out.Targets[i] = routing.AliasTarget{Backend: tg.Backend, Model: tg.Model, Arm: tg.Arm}
		}
		if out.Name == "" {
			out.Name = model
		}
		return out
	}
}

// classifierText is what a classifier scores of a chat request: the last
// user message's text, and every message's role and text (image parts
// left out); nothing for another call.
func classifierText(r *flexwayv1.CreateChatCompletionRequest) (string, []alias.Msg) {
	var last string
	var msgs []alias.Msg
	for _, m := range r.GetMessages() {
		text := m.GetText()
		for _, p := range m.GetParts().GetParts() {
			if p.GetType() == "text" {
				if text != "" {
					text += "\n"
				}
				text += p.GetText()
			}
		}
		msgs = append(msgs, alias.Msg{Role: m.GetRole(), Text: text})
		if m.GetRole() == "user" {
			last = text
		}
	}
	return last, msgs
}
