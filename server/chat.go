package server

import (
	"context"
	"errors"
	"io"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/call"
	"github.com/flexway/flexway/server/faults"
)

// CapabilityOf returns what a request of the core's services needs, and
// false for any other message: embeddings for an embeddings request; for a
// chat request vision when any message carries an image part, else chat.
func CapabilityOf(req any) (call.Capability, bool) {
	switch r := req.(type) {
	case *flexwayv1.CreateChatCompletionRequest:
		return capabilityOf(r), true
	case *flexwayv1.CreateEmbeddingRequest:
		return call.Embeddings, true
	}
	return "", false
}

// capabilityOf returns what a chat request needs: vision when any message
// carries an image part, else chat.
func capabilityOf(req *flexwayv1.CreateChatCompletionRequest) call.Capability {
	for _, m := range req.GetMessages() {
		for _, p := range m.GetParts().GetParts() {
			if p.GetType() == "image_url" {
				return call.Vision
			}
		}
	}
	return call.Chat
}

// CreateChatCompletion implements
// [flexwayv1.ChatServiceServer.CreateChatCompletion]: the planned backends
// are tried in order until one serves; a fallback marks the response
// Flexway-Degraded.
func (c *Core) CreateChatCompletion(ctx context.Context, req *flexwayv1.CreateChatCompletionRequest) (*flexwayv1.ChatCompletion, error) {
	st, err := state(ctx)
	if err != nil {
		return nil, err
	}
	plan, err := c.plan(st, capabilityOf(req))
	if err != nil {
		return nil, err
	}
	var last error
	for i, name := range plan {
		b, ok := c.opts.Backends[name]
		if !ok {
			return nil, faults.New(faults.Internal, "backend %q is not configured", name)
		}
		actx, span := c.startAttempt(ctx, name, i)
		resp, served, err := b.CreateChatCompletion(actx, req)
		endAttempt(span, err)
		if err != nil {
			c.attempt(ctx, st, name, err)
			st.SetOutcome(call.Outcome{Backend: name, ModelRequested: req.GetModel(), ModelServed: served.ModelSent})
			last = err
			if canFallBack(err) && ctx.Err() == nil {
				continue
			}
			return nil, err
		}
		o := call.Outcome{Backend: name, ModelRequested: req.GetModel(), ModelServed: served.ModelSent, Served: true}
		if resp.GetModel() != "" {
			o.ModelServed = resp.GetModel()
		}
		if u := resp.GetUsage(); u != nil {
			o.InputTokens, o.OutputTokens = u.GetPromptTokens(), u.GetCompletionTokens()
			o.UsageReported = true
		}
		for _, ch := range resp.GetChoices() {
			o.OutputBytes += outputBytes(ch.GetMessage())
		}
		st.SetOutcome(o)
		if i > 0 {
			st.SetFallback()
		}
		setServedHeaders(ctx, i > 0)
		return resp, nil
	}
	return nil, last
}

// StreamChatCompletion implements
// [flexwayv1.ChatServiceServer.StreamChatCompletion]. Chunks that carry no
// content (a role-only delta) are held, with the response headers, until
// the first chunk that does, so that a backend failing before any content
// is still fallen back from; after that every chunk is sent as soon as it
// is read, and a failure ends the stream with an error status (never a
// made-up end). The usage-only chunk is sent only if the request set
// stream_options.include_usage.
func (c *Core) StreamChatCompletion(req *flexwayv1.CreateChatCompletionRequest, ss flexwayv1.ChatService_StreamChatCompletionServer) error {
	ctx := ss.Context()
	st, err := state(ctx)
	if err != nil {
		return err
	}
	plan, err := c.plan(st, capabilityOf(req))
	if err != nil {
		return err
	}
	wantUsage := req.GetStreamOptions().GetIncludeUsage()
	var last error
	for i, name := range plan {
		b, ok := c.opts.Backends[name]
		if !ok {
			return faults.New(faults.Internal, "backend %q is not configured", name)
		}
		o := call.Outcome{Backend: name, ModelRequested: req.GetModel()}
		actx, span := c.startAttempt(ctx, name, i)
		stream, served, err := b.StreamChatCompletion(actx, req)
		o.ModelServed = served.ModelSent
		if err != nil {
			endAttempt(span, err)
			c.attempt(ctx, st, name, err)
			st.SetOutcome(o)
			last = err
			if canFallBack(err) && ctx.Err() == nil {
				continue
			}
			return err
		}
		sent, err := c.relay(ss, stream, &o, wantUsage, i > 0)
		stream.Close()
		endAttempt(span, err)
		st.SetOutcome(o)
		if err == nil {
			if i > 0 {
				st.SetFallback()
			}
			return nil
		}
		c.attempt(ctx, st, name, err)
		last = err
		if sent || !canFallBack(err) || ctx.Err() != nil {
			return err
		}
	}
	return last
}

// relay copies one upstream stream to the client; sent reports whether any
// chunk reached the client.
func (c *Core) relay(ss flexwayv1.ChatService_StreamChatCompletionServer, stream interface {
	Recv() (*flexwayv1.ChatCompletionChunk, error)
}, o *call.Outcome, wantUsage, fallback bool) (sent bool, err error) {
	var held []*flexwayv1.ChatCompletionChunk
	send := func(ch *flexwayv1.ChatCompletionChunk) error {
		if !sent {
			setServedHeaders(ss.Context(), fallback)
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
		for _, choice := range ch.GetChoices() {
			o.OutputBytes += outputBytes(choice.GetDelta())
		}
		return nil
	}
	for {
		ch, err := stream.Recv()
		if errors.Is(err, io.EOF) {
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
		if !sent && !hasContent(ch) {
			held = append(held, ch)
			continue
		}
		if err := send(ch); err != nil {
			return sent, err
		}
	}
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
