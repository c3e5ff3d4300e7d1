package call

import "context"

// ServedHook is told the name of the backend (its key in ai.backends) whose
// streamed answer a call relays, once, before the first chunk of it is
// sent to the caller. The HTTP front bounds each write of the stream to
// its client by that backend's idle_timeout with it. It runs in the
// goroutine that sends the stream.
type ServedHook func(backend string)

type servedHookKey struct{}

// WithServedHook returns ctx carrying h, for the core to call through
// [Served]. A caller sets it on the context of the call it makes; it
// reaches the core through the in-process channel, never over the
// network.
func WithServedHook(ctx context.Context, h ServedHook) context.Context {
	return context.WithValue(ctx, servedHookKey{}, h)
}

// Served tells ctx's [ServedHook], if any, that backend serves the stream.
func Served(ctx context.Context, backend string) {
	if h, ok := ctx.Value(servedHookKey{}).(ServedHook); ok && h != nil {
		h(backend)
	}
}
