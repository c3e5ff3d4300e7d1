package call

import (
	"context"

	"github.com/flexway/flexway/server/config"
)

type listenerKey struct{}

// WithListener returns ctx marking the call made with it as come in on
// listener (config.ListenerHTTP for the HTTP front's calls on the
// in-process channel); the identity interceptor records it as
// [State.Listener].
//
// Security: like [WithAdmission], a context value exists only in this
// process: a remote gRPC caller cannot set it, and nothing a client sends
// (a header, metadata) ever fills it. A policy matched on listener http
// therefore holds only the OpenAI front's calls.
func WithListener(ctx context.Context, listener string) context.Context {
	return context.WithValue(ctx, listenerKey{}, listener)
}

// ListenerFrom returns the listener ctx was marked with by
// [WithListener], else config.ListenerGRPC: a call no code of the gateway
// marked came in on the gRPC listener.
func ListenerFrom(ctx context.Context) string {
	if l, _ := ctx.Value(listenerKey{}).(string); l != "" {
		return l
	}
	return config.ListenerGRPC
}
