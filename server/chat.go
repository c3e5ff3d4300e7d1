package server

import (
	"context"
	"errors"
	"io"
	"slices"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/backends"
	"github.com/flexway/flexway/server/call"
	"github.com/flexway/flexway/server/faults"
	"github.com/flexway/flexway/server/openaiwire"
)

// CreateChatCompletion implements
// [flexwayv1.ChatServiceServer.CreateChatCompletion]: the planned backends
// are tried in order until one serves ([Core.runPlan]); a fallback marks
// the response Flexway-Degraded.
func (c *Core) CreateChatCompletion(ctx context.Context, req *flexwayv1.CreateChatCompletionRequest) (*flexwayv1.ChatCompletion, error) {
	st, err := state(ctx)
	if err != nil {
		return nil, err
	}
	guard, err := c.checkedAnswerGuard(ctx, st, req)
	if err != nil {
		return nil, err
	}
	if v := st.Cache; v != nil {
		_ = grpc.SetHeader(ctx, metadata.Pairs(HeaderCache, v.Status))
		if v.Status == "hit" {
			setSimilarityHeader(ctx, v)
			// the caller's own response rules judge the stored answer:
			// another agent of the tenant may have filled it under
			// other policies
			resp := c.replayJSON(ctx, st, req.GetModel())
			if guard != nil {
				if err := guard.checkJSON(resp); err != nil {
					return nil, err
				}
			}
			return resp, nil
		}
	}
	var resp *flexwayv1.ChatCompletion
	err = c.runPlan(ctx, st, req.GetModel(), func(ctx context.Context, b backends.Backend, o call.Outcome, _ bool) (call.Outcome, bool, error) {
		r, served, err := b.CreateChatCompletion(ctx, req)
		o.ModelServed = served.ModelSent
		if err != nil {
			return o, false, err
		}
		o.Served = true
		if r.GetModel() != "" {
			o.ModelServed = r.GetModel()
		}
		if u := r.GetUsage(); u != nil {
			o.InputTokens, o.OutputTokens = u.GetPromptTokens(), u.GetCompletionTokens()
			o.CacheReadTokens, o.CacheWriteTokens = openaiwire.CacheTokens(u)
			o.UsageReported = true
		}
		for _, ch := range r.GetChoices() {
			o.OutputBytes += outputBytes(ch.GetMessage())
		}
		resp = r
		return o, false, nil
	})
	if err != nil {
		return nil, err
	}
	if guard != nil {
		if err := guard.checkJSON(resp); err != nil {
			return nil, err
		}
	}
	c.storeJSON(st, resp)
	return resp, nil
}

// StreamChatCompletion implements
// [flexwayv1.ChatServiceServer.StreamChatCompletion]. Chunks that carry no
// content (a role-only delta) are held, with the response headers, until
// the first chunk that does, so that a backend failing before any content
// is still fallen back from ([Core.runPlan]); after that every chunk is
// sent as soon as it is read, and a failure ends the stream with an error
// status (never a made-up end). The usage-only chunk is sent only if the
// request set stream_options.include_usage.
func (c *Core) StreamChatCompletion(req *flexwayv1.CreateChatCompletionRequest, ss flexwayv1.ChatService_StreamChatCompletionServer) error {
	ctx := ss.Context()
	st, err := state(ctx)
	if err != nil {
		return err
	}
	if _, err := c.checkedAnswerGuard(ctx, st, req); err != nil {
		return err
	}
	wantUsage := req.GetStreamOptions().GetIncludeUsage()
	if v := st.Cache; v != nil {
		_ = grpc.SetHeader(ctx, metadata.Pairs(HeaderCache, v.Status))
		if v.Status == "hit" {
			setSimilarityHeader(ctx, v)
			// judged by the caller's own response rules, as in unary
			return c.replayStream(ss, st, req.GetModel(), wantUsage, c.newAnswerGuard(ctx, st, req))
		}
	}
	var out flexwayv1.ChatService_StreamChatCompletionServer
	err = c.runPlan(ctx, st, req.GetModel(), func(ctx context.Context, b backends.Backend, o call.Outcome, fallback bool) (call.Outcome, bool, error) {
		stream, served, err := b.StreamChatCompletion(ctx, req)
		o.ModelServed = served.ModelSent
		if err != nil {
			return o, false, err
		}
		// One guard and one store tee per attempt: a fallback's stream
		// starts afresh.
		g := c.newAnswerGuard(ctx, st, req)
		out = newCacheTee(st, ss)
		sent, err := c.relay(out, stream, &o, wantUsage, fallback, st.OutputLimit, g)
		stream.Close()
		// A stream that ended has answered, even with no chunk.
		return o, sent || err == nil, err
	})
	if err == nil {
		c.storeStream(st, out)
	}
	return err
}

// relay copies one upstream stream to the client; sent reports whether any
// chunk reached the client. When limit is positive and a choice's relayed
// output passes it ([outputTokensAtLeast]), the stream is cut there: the
// chunk that would pass it is not relayed, a chunk with finish_reason
// "length" for every choice not yet finished is sent instead, and relay
// returns as at a normal end; the caller's Close then
// cancels the upstream request.
//
// With g (the call's response guardrails, nil when it has none) each
// chunk's texts go through g's holders and the chunk carries only what
// they release ([answerGuard.chunk]); a denial ends the stream with g's
// refusal. The output counted (o.OutputBytes, the limit) is then the
// upstream's, not what was released. With whole rules the answer is
// buffered and sent at its end, once judged.
func (c *Core) relay(ss flexwayv1.ChatService_StreamChatCompletionServer, stream interface {
	Recv() (*flexwayv1.ChatCompletionChunk, error)
}, o *call.Outcome, wantUsage, fallback bool, limit int64, g *answerGuard) (sent bool, err error) {
	var held []*flexwayv1.ChatCompletionChunk
	out := outputCounter{limit: limit}
	send := func(ch *flexwayv1.ChatCompletionChunk) error {
		if !sent {
			setServedHeaders(ss.Context(), fallback, o.Route())
			call.Served(ss.Context(), o.Backend)
			sent = true
			for _, h := range held {
				if err := ss.Send(h); err != nil {
					return faults.Wrap(faults.Canceled, err, "the client went away")
				}
			}
			held = nil
		}
		if err := ss.Send(ch); err != nil {
			return faults.Wrap(faults.Canceled, err, "the client went away")
		}
		o.Served = true
		if g == nil {
			countOutput(o, ch)
		}
		return nil
	}
	// finish ends a guarded stream (g != nil) before its end or its cut
	// (last, nil at the end): what the holders still held goes out, and a
	// buffered answer is judged and sent whole.
	finish := func(last *flexwayv1.ChatCompletionChunk) error {
		rest, err := g.end()
		if err != nil {
			return err
		}
		chunks := []*flexwayv1.ChatCompletionChunk{rest, last}
		if g.buffer {
			g.ordered = append(g.ordered, chunks...)
			if chunks, err = g.release(); err != nil {
				return err
			}
		}
		for _, ch := range chunks {
			if ch == nil {
				continue
			}
			if !sent && !hasContent(ch) && last == nil {
				held = append(held, ch)
				continue
			}
			if err := send(ch); err != nil {
				return err
			}
		}
		return nil
	}
	for {
		ch, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			if g != nil {
				if err := finish(nil); err != nil {
					return sent, err
				}
			}
			if !sent && len(held) > 0 {
				last := held[len(held)-1]
				held = held[:len(held)-1]
				return true, send(last)
			}
			return sent, nil
		}
		if err != nil {
			return sent, err
		}
		if m := ch.GetModel(); m != "" {
			o.ModelServed = m
		}
		if u := ch.GetUsage(); u != nil {
			o.InputTokens, o.OutputTokens = u.GetPromptTokens(), u.GetCompletionTokens()
			o.CacheReadTokens, o.CacheWriteTokens = openaiwire.CacheTokens(u)
			o.UsageReported = true
			if !wantUsage {
				if len(ch.GetChoices()) == 0 {
					continue
				}
				ch.Usage = nil
			}
		}
		if !wantUsage {
			// include_usage was Flexway's addition: its "usage": null in
			// every chunk is not shown to a client that did not ask.
			delete(ch.GetExtraFields(), "usage")
		}
		if g != nil {
			if out.passes(ch) {
				return true, finish(out.lengthChunk(ch))
			}
			if n := countOutput(o, ch); n > 0 {
				o.Served = true // the upstream answered: its output is charged
				if g.bytes += n; g.buffer && g.bytes > g.max {
					return sent, g.errAnswerTooLong()
				}
			}
			drop, err := g.chunk(ch)
			if err != nil {
				return sent, err
			}
			if drop {
				continue
			}
			if g.buffer {
				g.ordered = append(g.ordered, ch)
				continue
			}
		}
		if !sent && !hasContent(ch) {
			held = append(held, ch)
			continue
		}
		if g == nil && out.passes(ch) {
			return true, send(out.lengthChunk(ch))
		}
		if err := send(ch); err != nil {
			return sent, err
		}
	}
}

// countOutput adds ch's output to o (OutputBytes, and one OutputEvents
// per choice that carried some) and returns its bytes.
func countOutput(o *call.Outcome, ch *flexwayv1.ChatCompletionChunk) int64 {
	var n int64
	for _, choice := range ch.GetChoices() {
		if b := outputBytes(choice.GetDelta()); b > 0 {
			o.OutputBytes += b
			o.OutputEvents++
			n += b
		}
	}
	return n
}

// maxTokenBytes is the most bytes one token of any tokenizer Flexway
// knows stands for (the longest tokens of cl100k, o200k and Llama 3 are
// runs of spaces or symbols well under it), so that relayed bytes / 256
// is a lower bound of the tokens they took.
const maxTokenBytes = 256

// outputCounter tracks a stream's relayed output per choice against the
// request's own output limit, counting conservatively for the upstream: a
// choice has used at least one token per event that carried output for it
// (no server sends a token in two events), and at least its bytes / 256.
// Relayed bytes are no bound from below (one token may be many bytes), nor
// from above (a token may decode to no byte at all).
type outputCounter struct {
	limit    int64
	events   map[int32]int64
	bytes    map[int32]int64
	finished map[int32]bool
}

// passes counts ch and reports whether, with it, a choice's output is
// over the limit (never when the limit is 0).
func (c *outputCounter) passes(ch *flexwayv1.ChatCompletionChunk) bool {
	if c.limit <= 0 {
		return false
	}
	if c.events == nil {
		c.events, c.bytes, c.finished = map[int32]int64{}, map[int32]int64{}, map[int32]bool{}
	}
	over := false
	for _, choice := range ch.GetChoices() {
		i := choice.GetIndex()
		if b := outputBytes(choice.GetDelta()); b > 0 {
			c.events[i]++
			c.bytes[i] += b
			if max(c.events[i], c.bytes[i]/maxTokenBytes) > c.limit {
				over = true
			}
		}
	}
	for _, choice := range ch.GetChoices() {
		if choice.FinishReason != nil && !over {
			c.finished[choice.GetIndex()] = true
		}
	}
	return over
}

// lengthChunk is the chunk that ends a cut stream: finish_reason "length"
// for every choice seen and not finished, with the id, model and created
// of the chunk it replaces.
func (c *outputCounter) lengthChunk(ch *flexwayv1.ChatCompletionChunk) *flexwayv1.ChatCompletionChunk {
	end := &flexwayv1.ChatCompletionChunk{Id: ch.GetId(), Object: ch.GetObject(), Created: ch.GetCreated(), Model: ch.GetModel()}
	idx := make([]int32, 0, len(c.events))
	for i := range c.events {
		if !c.finished[i] {
			idx = append(idx, i)
		}
	}
	slices.Sort(idx)
	for _, i := range idx {
		end.Choices = append(end.Choices, &flexwayv1.ChatCompletionChunkChoice{Index: i, Delta: &flexwayv1.ChatMessage{}, FinishReason: proto.String("length")})
	}
	return end
}

// outputBytes counts the output bytes of a message or delta: its text, its
// text and refusal parts, and its other non-null fields' JSON (tool calls,
// refusal, audio transcripts), which all become output tokens.
func outputBytes(m *flexwayv1.ChatMessage) int64 {
	n := int64(len(m.GetText()))
	for _, p := range m.GetParts().GetParts() {
		n += int64(len(p.GetText()))
	}
	for _, v := range m.GetExtraFields() {
		if v != "null" {
			n += int64(len(v))
		}
	}
	return n
}

// hasContent reports whether a chunk carries anything beyond a role: text,
// a tool call or any other non-null delta field, a finish reason, or usage.
// OpenAI's first chunk, {"role":"assistant","content":"","refusal":null},
// carries none.
func hasContent(ch *flexwayv1.ChatCompletionChunk) bool {
	if ch.GetUsage() != nil {
		return true
	}
	for _, choice := range ch.GetChoices() {
		if choice.FinishReason != nil {
			return true
		}
		d := choice.GetDelta()
		if d.GetText() != "" || len(d.GetParts().GetParts()) > 0 {
			return true
		}
		for _, v := range d.GetExtraFields() {
			if v != "null" {
				return true
			}
		}
	}
	return false
}
