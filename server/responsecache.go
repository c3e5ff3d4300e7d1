package server

import (
	"context"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/cache"
	"github.com/flexway/flexway/server/call"
	"github.com/flexway/flexway/server/guardrail"
	"github.com/flexway/flexway/server/openaiwire"
	"github.com/flexway/flexway/server/requestid"
)

// CacheStore is where the response cache keeps its entries
// (server/cache/tiered: this process's memory, and Redis for exact
// entries shared between replicas). Get returns an entry only for its
// exact key, and every failure of the store is a miss; Set and Del may
// drop the write (a full store, a dead Redis) and never block the call.
type CacheStore interface {
	Get(ctx context.Context, k cache.StoreKey) (*cache.Entry, bool)
	Set(e *cache.Entry, ttl time.Duration)
	Del(k cache.StoreKey)
}

// CacheSetting is the cache section of the policy that decides for a
// call (the most specific that sets one).
type CacheSetting struct {
	// Mode is "exact" or "semantic" (semantic is not served yet: looked
	// up as exact).
	Mode string
	// Similarity is the cosine similarity, in (0, 1], at or above which a
	// semantic lookup answers.
	Similarity float64
	// TTL is how long a stored entry answers.
	TTL time.Duration
	// HitPriceNanoEUR is what a hit is charged, in nano-euros.
	HitPriceNanoEUR int64
	// StoreLength, ToolCalls, IncludeSensitive: store_length,
	// cache_tool_calls, include_sensitive.
	StoreLength, ToolCalls, IncludeSensitive bool
}

// CacheOptions configures the core's response cache stage (stages 6 and
// 15 of the AI pipeline).
type CacheOptions struct {
	// Store holds the entries.
	Store CacheStore
	// Setting is the cache setting of the call of st, nil when its
	// policies leave the cache off.
	Setting func(st *call.State) *CacheSetting
	// Internal reports whether a backend is internal: a sensitive call
	// is looked up and stored (include_sensitive) only when its planned
	// backend is.
	Internal func(backend string) bool
}

// HeaderCache is the header metadata key of the cache's verdict
// (Flexway-Cache: hit, miss or bypass).
const HeaderCache = "flexway-cache"

// CacheLookup is the response cache's lookup, run by the meter once the
// call is planned ([metering.Config.Cache]): for a chat request whose
// policies turn the cache on, it records its verdict in st.Cache and
// reports a hit with its price in nano-euros. The partition is the
// tenant, the alias and arm, the planned backend and model, the
// operation and the sensitive flag; the key, the request's canonical
// JSON ([cache.ExactKey]): of the body the caller sent when the HTTP
// front put its key in ctx ([call.WithCacheKey]: more specific than the
// request as redacted), else of the request as it goes upstream.
// Cache-Control: no-cache skips the lookup, no-store the
// store. A request that cannot be keyed is a bypass; nothing here fails
// a call.
func (c *Core) CacheLookup(ctx context.Context, st *call.State, req any) (int64, bool) {
	co := c.opts.Cache
	chat, ok := req.(*flexwayv1.CreateChatCompletionRequest)
	if co == nil || co.Store == nil || co.Setting == nil || !ok || len(st.Plan) == 0 {
		return 0, false
	}
	if m, _ := grpc.Method(ctx); strings.HasSuffix(m, "/StreamChatCompletion") {
		return 0, false // streams are neither replayed nor stored yet
	}
	set := co.Setting(st)
	if set == nil || set.Mode == "" || set.Mode == "off" {
		return 0, false
	}
	v := &call.CacheVerdict{Status: "bypass", TTL: set.TTL, StoreLength: set.StoreLength, ToolCalls: set.ToolCalls}
	st.Cache = v
	backend := st.Plan[0]
	if st.Sensitive && (!set.IncludeSensitive || co.Internal == nil || !co.Internal(backend)) {
		return 0, false // a sensitive call: neither looked up nor stored
	}
	noCache, noStore := cacheControl(ctx)
	k, ok := call.CacheKeyFrom(ctx) // the HTTP front's, from the body as sent
	if !ok {
		body, err := openaiwire.AppendChatCompletionRequest(nil, chat, openaiwire.Upstream{})
		if err != nil {
			return 0, false
		}
		if k, err = cache.ExactKey(body); err != nil {
			return 0, false
		}
	}
	p := cache.Partition{Tenant: st.Tenant, Alias: chat.GetModel(), Backend: backend, Model: chat.GetModel(), Operation: st.Operation, Sensitive: st.Sensitive}
	if t, ok := st.AliasTargets[backend]; ok {
		p.Alias, p.Arm, p.Model = st.Alias, t.Arm, t.Model
	}
	v.Key = cache.MakeStoreKey(p.ID(), k)
	v.Store = !noStore
	if noCache {
		if noStore {
			return 0, false
		}
		v.Status = "miss"
		return 0, false
	}
	e, ok := co.Store.Get(ctx, v.Key)
	if !ok || e.Mode != cache.ModeJSON {
		v.Status = "miss"
		return 0, false
	}
	answer, err := openaiwire.ParseChatCompletion(e.Body)
	if err != nil {
		// corrupt: a miss, evicted, logged (its key, never its content)
		co.Store.Del(v.Key)
		c.log.WarnContext(ctx, "response cache entry does not decode; evicted", "request_id", st.RequestID, "key", v.Key.Key().String(), "error", err.Error())
		v.Status = "miss"
		return 0, false
	}
	v.Status, v.Entry, v.Answer, v.Store = "hit", e, answer, false
	return set.HitPriceNanoEUR, true
}

// cacheControl reads the request's Cache-Control: no-cache skips the
// lookup, no-store the store.
func cacheControl(ctx context.Context) (noCache, noStore bool) {
	md, _ := metadata.FromIncomingContext(ctx)
	for _, v := range md.Get("cache-control") {
		for _, d := range strings.Split(v, ",") {
			switch strings.ToLower(strings.TrimSpace(d)) {
			case "no-cache":
				noCache = true
			case "no-store":
				noStore = true
			}
		}
	}
	return
}

// replayJSON answers a unary call from a hit: the stored body, decoded
// by this call's lookup (its own copy), with a fresh id and created; the
// outcome is served by the entry's backend (through the alias's arm, with
// its Flexway-Route header) with no token charged and the entry's usage
// saved.
func (c *Core) replayJSON(ctx context.Context, st *call.State, model string) *flexwayv1.ChatCompletion {
	resp := st.Cache.Answer
	resp.Id = "chatcmpl-" + strings.TrimPrefix(requestid.New(), "req_")
	resp.Created = time.Now().Unix()
	o := replayOutcome(st, model)
	st.SetOutcome(o)
	setServedHeaders(ctx, false, o.Route())
	return resp
}

// replayOutcome is the outcome of a call a hit answers: the plan's first
// backend (the partition's) served it, through the alias's arm when the
// call named one, with no token charged and the entry's usage saved.
func replayOutcome(st *call.State, model string) call.Outcome {
	e := st.Cache.Entry
	backend := st.Plan[0]
	o := call.Outcome{Backend: backend, ModelRequested: model, Served: true, ModelServed: e.Model, UsageReported: true}
	if t, ok := st.AliasTargets[backend]; ok {
		o.Alias, o.Arm = st.Alias, t.Arm
	}
	o.CacheSavedTokens = e.Usage.InputTokens + e.Usage.OutputTokens
	return o
}

// storeJSON stores a unary answer that ended cleanly, when the call's
// verdict says to: every choice finished on stop (or length with
// store_length), no tool call unless cache_tool_calls, no guardrail
// redaction or denial on the answer. The write is the store's (never
// blocking: ristretto's buffer).
func (c *Core) storeJSON(st *call.State, resp *flexwayv1.ChatCompletion) {
	v := st.Cache
	if v == nil || !v.Store || c.opts.Cache == nil || answerRedacted(st) {
		return
	}
	for _, ch := range resp.GetChoices() {
		switch ch.GetFinishReason() {
		case "stop":
		case "length":
			if !v.StoreLength {
				return
			}
		default:
			return
		}
		if _, ok := ch.GetMessage().GetExtraFields()["tool_calls"]; ok && !v.ToolCalls {
			return
		}
	}
	if len(resp.GetChoices()) == 0 {
		return
	}
	o := st.Outcome()
	now := time.Now()
	e := &cache.Entry{Key: v.Key, Mode: cache.ModeJSON, Body: openaiwire.AppendChatCompletion(nil, resp), Model: resp.GetModel(),
		FinishReason: resp.GetChoices()[0].GetFinishReason(), Stored: now, Expires: now.Add(v.TTL),
		Usage: cache.Usage{InputTokens: o.InputTokens, OutputTokens: o.OutputTokens, CacheReadTokens: o.CacheReadTokens, CacheWriteTokens: o.CacheWriteTokens}}
	c.opts.Cache.Store.Set(e, v.TTL)
}

// answerRedacted reports whether a response guardrail redacted or
// denied the answer of st: such an answer is not stored.
func answerRedacted(st *call.State) bool {
	for _, g := range st.Guardrails() {
		if g.Phase == guardrail.Response.String() && (g.Action == guardrail.Redact.String() || g.Action == guardrail.Deny.String()) {
			return true
		}
	}
	return false
}
