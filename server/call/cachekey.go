package call

import (
	"context"

	"github.com/flexway/flexway/server/cache"
)

type cacheKeyKey struct{}

// WithCacheKey returns ctx carrying the response cache's key of the
// call's request, computed by the HTTP front from the body the caller
// sent ([cache.Keyer]: the canonical form, a body sent again byte for
// byte costing one hash of it), so that the cache's lookup does not
// encode the request again. Like [WithListener], a context value: only
// code of this process sets it.
func WithCacheKey(ctx context.Context, k cache.Key) context.Context {
	return context.WithValue(ctx, cacheKeyKey{}, k)
}

// CacheKeyFrom returns the key [WithCacheKey] put in ctx, ok false when
// none (a gRPC caller's call).
func CacheKeyFrom(ctx context.Context) (cache.Key, bool) {
	k, ok := ctx.Value(cacheKeyKey{}).(cache.Key)
	return k, ok
}
