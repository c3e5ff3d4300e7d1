package server

import (
	"context"
	"io"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/cache"
	"github.com/flexway/flexway/server/cache/replay"
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
	// Mode is "exact" or "semantic" (exact first, then the nearest
	// stored question: see [Core.CacheLookup]).
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
	// MaxEntryBytes bounds what a stream's tee collects, in bytes
	// (ai.cache.max_bytes/64): a bigger answer is not stored. 0: 4 MiB.
	MaxEntryBytes int64
	// Embed, for semantic mode, embeds the last user message of st's
	// call as the caller's own embeddings call (identity, budget and
	// audit as /v1/embeddings, through ai.cache.embeddings_backend). Nil:
	// semantic mode looks up exactly only.
	Embed func(ctx context.Context, st *call.State, text string) ([]float32, error)
	// VectorBytes bounds the semantic index's vectors, in bytes (server/
	// cache/semantic). 0: 64 MiB.
	VectorBytes int64
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
// store. A request that cannot be keyed is a bypass. Semantic mode
// (after an exact miss) calls afford before it embeds the question.
// Errors: afford's (the call's budget refusal), and faults.InvalidRequest
// for a Flexway-Cache-Similarity that is not a number in (0, 1]; nothing
// of the cache's own fails a call.
func (c *Core) CacheLookup(ctx context.Context, st *call.State, req any, afford func() error) (int64, bool, error) {
	co := c.opts.Cache
	chat, ok := req.(*flexwayv1.CreateChatCompletionRequest)
	if co == nil || co.Store == nil || co.Setting == nil || !ok || len(st.Plan) == 0 {
		return 0, false, nil
	}
	m, _ := grpc.Method(ctx)
	streaming := strings.HasSuffix(m, "/StreamChatCompletion")
	set := co.Setting(st)
	if set == nil || set.Mode == "" || set.Mode == "off" {
		return 0, false, nil
	}
	if err := checkSimilarityHeader(ctx); err != nil {
		return 0, false, err
	}
	v := &call.CacheVerdict{Status: "bypass", TTL: set.TTL, StoreLength: set.StoreLength, ToolCalls: set.ToolCalls, MaxBytes: co.MaxEntryBytes}
	if v.MaxBytes <= 0 {
		v.MaxBytes = 4 << 20
	}
	st.Cache = v
	backend := st.Plan[0]
	if st.Sensitive && (!set.IncludeSensitive || co.Internal == nil || !co.Internal(backend)) {
		return 0, false, nil // a sensitive call: neither looked up nor stored
	}
	noCache, noStore := cacheControl(ctx)
	k, ok := call.CacheKeyFrom(ctx) // the HTTP front's, from the body as sent
	if !ok {
		body, err := openaiwire.AppendChatCompletionRequest(nil, chat, openaiwire.Upstream{})
		if err != nil {
			return 0, false, nil
		}
		if k, err = cache.ExactKey(body); err != nil {
			return 0, false, nil
		}
	}
	p := cache.Partition{Tenant: st.Tenant, Alias: chat.GetModel(), Backend: backend, Model: chat.GetModel(), Operation: st.Operation, Sensitive: st.Sensitive}
	if t, ok := st.AliasTargets[backend]; ok {
		p.Alias, p.Arm, p.Model = st.Alias, t.Arm, t.Model
	}
	partID := p.ID()
	v.Key = cache.MakeStoreKey(partID, k)
	v.Store = !noStore
	if noCache {
		if noStore {
			return 0, false, nil
		}
		v.Status = "miss"
		return 0, false, nil
	}
	e, ok := co.Store.Get(ctx, v.Key)
	if !ok || !c.decodeEntry(ctx, st, v, e, streaming) {
		v.Status = "miss"
		if e, ok = c.coalesce(ctx, st, v, streaming); !ok {
			if set.Mode != "semantic" {
				return 0, false, nil
			}
			hit, err := c.semanticLookup(ctx, st, v, chat, partID, set, streaming, afford)
			if err != nil || !hit {
				return 0, false, err
			}
			e = v.Entry
			if f := v.Flight; f != nil {
				// its identical followers would find what it found
				f.Land(e)
				v.Flight = nil
			}
		}
	}
	v.Status, v.Entry, v.Store = "hit", e, false
	return set.HitPriceNanoEUR, true, nil
}

// coalesce joins an exact miss to the fill of its key ([cache.Flights]):
// the first call to miss it leads (v.Flight: its store lands it); an
// identical call that misses while the leader runs waits for it, for as
// long as its own context lasts, and is answered by what the leader
// stored (the entry, decoded into v, and true). A call that would not
// store (Cache-Control: no-store) neither leads nor waits.
func (c *Core) coalesce(ctx context.Context, st *call.State, v *call.CacheVerdict, streaming bool) (*cache.Entry, bool) {
	if !v.Store {
		return nil, false
	}
	f, leader := c.flights.Join(v.Key)
	if leader {
		v.Flight = f
		return nil, false
	}
	if f == nil {
		return nil, false
	}
	e, ok := f.Wait(ctx)
	if !ok || !c.decodeEntry(ctx, st, v, e, streaming) {
		return nil, false
	}
	return e, true
}

// decodeEntry decodes e for this call's mode into v: Answer for a unary
// caller, Chunks for a streaming one, whichever mode filled it
// (server/cache/replay). An entry that does not decode is evicted and
// logged (its key, never its content); one with no counterpart in the
// caller's mode is a plain miss. Either way false.
func (c *Core) decodeEntry(ctx context.Context, st *call.State, v *call.CacheVerdict, e *cache.Entry, streaming bool) bool {
	var answer *flexwayv1.ChatCompletion
	var chunks []*flexwayv1.ChatCompletionChunk
	var err error
	switch e.Mode {
	case cache.ModeJSON:
		answer, err = openaiwire.ParseChatCompletion(e.Body)
	case cache.ModeStream:
		chunks = make([]*flexwayv1.ChatCompletionChunk, 0, len(e.Chunks))
		for _, b := range e.Chunks {
			ch, perr := openaiwire.ParseChatCompletionChunk(b)
			if perr != nil {
				err = perr
				break
			}
			chunks = append(chunks, ch)
		}
	default:
		err = cache.ErrCorrupt
	}
	if err != nil {
		c.opts.Cache.Store.Del(v.Key)
		c.log.WarnContext(ctx, "response cache entry does not decode; evicted", "request_id", st.RequestID, "key", v.Key.Key().String(), "error", err.Error())
		return false
	}
	ok := true
	switch {
	case streaming && answer != nil:
		chunks, ok = replay.Chunks(answer)
	case !streaming && chunks != nil:
		answer, ok = replay.Completion(chunks)
		chunks = nil
		if ok && answer.Usage == nil {
			// the tee keeps what the caller got: no usage chunk unless
			// asked; the entry's usage is the filling call's
			answer.Usage = entryUsage(e)
		}
	}
	v.Answer, v.Chunks = answer, chunks
	return ok
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

// replayStream answers a streaming call from a hit: the stored chunks,
// each with one fresh id and created, without any stored usage chunk,
// and with a usage chunk of the entry's usage when the request asked for
// one; through relay (g, the caller's response guardrails, judges them
// as it would an upstream's), so that the headers, the held role chunk
// and the end are those of any stream. The outcome is replayOutcome's.
func (c *Core) replayStream(ss flexwayv1.ChatService_StreamChatCompletionServer, st *call.State, model string, wantUsage bool, g *answerGuard) error {
	v := st.Cache
	id := "chatcmpl-" + strings.TrimPrefix(requestid.New(), "req_")
	now := time.Now().Unix()
	chunks := v.Chunks[:0:0]
	for _, ch := range v.Chunks {
		if len(ch.GetChoices()) == 0 && ch.GetUsage() != nil {
			continue
		}
		ch.Usage = nil
		delete(ch.GetExtraFields(), "usage")
		ch.Id, ch.Created = id, now
		chunks = append(chunks, ch)
	}
	if wantUsage {
		chunks = append(chunks, &flexwayv1.ChatCompletionChunk{Id: id, Object: "chat.completion.chunk", Created: now, Model: v.Entry.Model,
			Choices: []*flexwayv1.ChatCompletionChunkChoice{}, Usage: entryUsage(v.Entry)})
	}
	o := replayOutcome(st, model)
	_, err := c.relay(ss, &sliceStream{chunks: chunks}, &o, wantUsage, false, 0, g)
	saved := replayOutcome(st, model)
	saved.OutputBytes, saved.OutputEvents = o.OutputBytes, o.OutputEvents
	st.SetOutcome(saved) // relay read the usage chunk: a hit charges no token
	return err
}

// entryUsage is e's usage as OpenAI writes it: the filling call's
// prompt and completion tokens.
func entryUsage(e *cache.Entry) *flexwayv1.Usage {
	u := e.Usage
	return &flexwayv1.Usage{PromptTokens: u.InputTokens, CompletionTokens: u.OutputTokens, TotalTokens: u.InputTokens + u.OutputTokens}
}

// sliceStream is a recorded stream, for relay: its chunks, then io.EOF.
type sliceStream struct {
	chunks []*flexwayv1.ChatCompletionChunk
}

func (s *sliceStream) Recv() (*flexwayv1.ChatCompletionChunk, error) {
	if len(s.chunks) == 0 {
		return nil, io.EOF
	}
	ch := s.chunks[0]
	s.chunks = s.chunks[1:]
	return ch, nil
}

// cacheTee is a stream's store tee: it keeps the chunks sent to the
// caller, up to the verdict's MaxBytes (their wire size); past it the
// answer is not stored (never truncated).
type cacheTee struct {
	flexwayv1.ChatService_StreamChatCompletionServer
	chunks []*flexwayv1.ChatCompletionChunk
	bytes  int64
	max    int64
	over   bool
}

// newCacheTee wraps ss for an attempt whose answer is to be stored; ss
// itself when it is not.
func newCacheTee(st *call.State, ss flexwayv1.ChatService_StreamChatCompletionServer) flexwayv1.ChatService_StreamChatCompletionServer {
	v := st.Cache
	if v == nil || !v.Store || v.Status != "miss" {
		return ss
	}
	return &cacheTee{ChatService_StreamChatCompletionServer: ss, max: v.MaxBytes}
}

// Send implements [grpc.ServerStreamingServer.Send]: ch is kept (relay
// never modifies a chunk once sent) and sent.
func (t *cacheTee) Send(ch *flexwayv1.ChatCompletionChunk) error {
	if !t.over {
		if t.bytes += int64(proto.Size(ch)) + 32; t.bytes > t.max {
			t.over, t.chunks = true, nil
		} else {
			t.chunks = append(t.chunks, ch)
		}
	}
	return t.ChatService_StreamChatCompletionServer.Send(ch)
}

// storeStream stores what a stream's tee kept, when the stream ended
// cleanly and the verdict says to (the rules of storeJSON, over every
// choice the chunks carry); the chunks are encoded and the entry written
// on a goroutine of its own, off the call's path. A complete answer that
// may not be stored passes its fill ([passUnstored]).
func (c *Core) storeStream(st *call.State, ss flexwayv1.ChatService_StreamChatCompletionServer) {
	t, ok := ss.(*cacheTee)
	v := st.Cache
	defer passUnstored(v)
	if !ok || t.over || len(t.chunks) == 0 || v == nil || !v.Store || c.opts.Cache == nil || answerRedacted(st) {
		return
	}
	finish := map[int32]string{}
	model := ""
	for _, ch := range t.chunks {
		if ch.GetModel() != "" {
			model = ch.GetModel()
		}
		for _, choice := range ch.GetChoices() {
			if choice.FinishReason != nil {
				finish[choice.GetIndex()] = choice.GetFinishReason()
			} else if _, seen := finish[choice.GetIndex()]; !seen {
				finish[choice.GetIndex()] = ""
			}
			if _, calls := choice.GetDelta().GetExtraFields()["tool_calls"]; calls && !v.ToolCalls {
				return
			}
		}
	}
	last := ""
	for _, r := range finish {
		if !storable(r, v) {
			return
		}
		last = r
	}
	if len(finish) == 0 {
		return
	}
	o := st.Outcome()
	now := time.Now()
	e := &cache.Entry{Key: v.Key, Mode: cache.ModeStream, Model: model, FinishReason: last, Stored: now, Expires: now.Add(v.TTL),
		Usage: cache.Usage{InputTokens: o.InputTokens, OutputTokens: o.OutputTokens, CacheReadTokens: o.CacheReadTokens, CacheWriteTokens: o.CacheWriteTokens}}
	chunks, store, f := t.chunks, c.opts.Cache.Store, v.Flight
	v.Flight = nil // the goroutine lands it
	go func() {
		e.Chunks = make([][]byte, len(chunks))
		for i, ch := range chunks {
			e.Chunks[i] = openaiwire.AppendChatCompletionChunk(nil, ch)
		}
		store.Set(e, v.TTL)
		c.indexStored(v)
		f.Land(e)
	}()
}

// passUnstored ends the fill a complete answer led when the answer was
// not stored (the store took the fill otherwise): its followers go
// upstream, and the key is not coalesced for a while ([cache.Flight.Pass]).
func passUnstored(v *call.CacheVerdict) {
	if v != nil && v.Flight != nil {
		v.Flight.Pass()
		v.Flight = nil
	}
}

// storable reports whether a choice that finished on reason may be
// stored: stop, or length with store_length.
func storable(reason string, v *call.CacheVerdict) bool {
	return reason == "stop" || reason == "length" && v.StoreLength
}

// storeJSON stores a unary answer that ended cleanly, when the call's
// verdict says to: every choice finished on stop (or length with
// store_length), no tool call unless cache_tool_calls, no guardrail
// redaction or denial on the answer. The write is the store's (never
// blocking: ristretto's buffer). A complete answer that may not be
// stored passes its fill ([passUnstored]).
func (c *Core) storeJSON(st *call.State, resp *flexwayv1.ChatCompletion) {
	v := st.Cache
	defer passUnstored(v)
	if v == nil || !v.Store || c.opts.Cache == nil || answerRedacted(st) {
		return
	}
	for _, ch := range resp.GetChoices() {
		if !storable(ch.GetFinishReason(), v) {
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
	c.indexStored(v)
	v.Flight.Land(e)
	v.Flight = nil
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
