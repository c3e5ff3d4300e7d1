package openaiwire

import (
	"cmp"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
)

// ParseChatCompletionRequest parses a client's `POST /v1/chat/completions`
// body.
//
// model, messages, stream, stream_options.include_usage, max_tokens,
// max_completion_tokens, n and user are typed; every other member of the
// request, of stream_options, of each message, content part and image_url
// is kept raw in the extra_fields of its message (tools, response_format,
// seed, logprobs, a message's tool_calls, vendor objects). Content is kept
// as it was given: a string, an array of parts (never flattened) or null.
//
// It fails with a [*faults.Error] of reason [faults.InvalidRequest] whose
// Param names the offending field in OpenAI's notation:
//   - invalid UTF-8 or malformed JSON (Param empty; the message gives the
//     byte offset), or a body that is not a JSON object (Param empty);
//   - a typed field of the wrong type (`messages`, `messages[0].content`,
//     `max_tokens`, `stream_options.include_usage`, ...);
//   - `model` missing or empty; `messages` missing or empty; a message that
//     is not an object (`messages[i]`) or has no non-empty string role
//     (`messages[i].role`);
//   - a content part that is not an object (`messages[i].content[j]`), has
//     no type or a type other than "text", "image_url" and "refusal"
//     (`messages[i].content[j].type`), a text part without a string text
//     (`...text`), an image_url part without an image_url object holding a
//     string url (`...image_url` or `...image_url.url`), a refusal part
//     without a string refusal (`...refusal`; the refusal is kept raw in
//     the part's extra_fields);
//   - n outside 1..128 (`n`); a negative or non-integer max_tokens or
//     max_completion_tokens;
//   - a break of [CheckChatCompletionRequest]'s rules: a model over
//     [MaxModelBytes] or with a control character (`model`), a role that is
//     not OpenAI's (`messages[i].role`), a member that names a modelled field
//     in another case or an image-bearing member (named as the client
//     wrote it: `N`, `messages[i].content[j].IMAGE_URL`,
//     `messages[i].images`).
func ParseChatCompletionRequest(data []byte) (*flexwayv1.CreateChatCompletionRequest, error) {
	return clientResult(parseChatCompletionRequest(data))
}

func parseChatCompletionRequest(data []byte) (*flexwayv1.CreateChatCompletionRequest, error) {
	d := decoder{data: data}
	req := &flexwayv1.CreateChatCompletionRequest{}
	err := d.request(&req.Model, &req.User, &req.ExtraFields, func(key []byte) (modelled bool, err error) {
		switch string(key) {
		case "messages":
			req.Messages = req.Messages[:0]
			err = d.elements(func(int) error {
				m, err := d.message(true)
				if err == nil {
					req.Messages = append(req.Messages, m)
				}
				return err
			})
		case "stream":
			req.Stream, err = nullable(&d, &req.ExtraFields, "stream", d.boolPtr)
		case "stream_options":
			req.StreamOptions, err = nullable(&d, &req.ExtraFields, "stream_options", d.streamOptions)
		case "max_tokens":
			req.MaxTokens, err = d.tokenCap(&req.ExtraFields, "max_tokens")
		case "max_completion_tokens":
			req.MaxCompletionTokens, err = d.tokenCap(&req.ExtraFields, "max_completion_tokens")
		case "n":
			req.N, err = nullable(&d, &req.ExtraFields, "n", d.choiceCount)
		default:
			return false, nil
		}
		return true, err
	})
	if err != nil {
		return nil, err
	}
	if len(req.Messages) == 0 {
		return nil, fieldErr("messages", "you must provide at least one message")
	}
	if err := checkChat(req, openAINotation); err != nil {
		return nil, err
	}
	return req, nil
}

// tokenCap reads the member key of a request, max_tokens or
// max_completion_tokens: a non-negative integer, or null (kept in *m, nil
// returned). Errors are relative to the value, as members wants them.
func (d *decoder) tokenCap(m *map[string]string, key string) (*int64, error) {
	return nullable(d, m, key, func() (*int64, error) {
		v, err := d.int64()
		if err != nil {
			return nil, err
		}
		if v < 0 {
			return nil, fieldErr("", "must not be negative, got %d", v)
		}
		return &v, nil
	})
}

// choiceCount reads a request's n: 1 to 128.
func (d *decoder) choiceCount() (*int32, error) { return d.int32In(1, 128, "between 1 and 128") }

// streamOptions parses a stream_options object at d.pos.
func (d *decoder) streamOptions() (*flexwayv1.StreamOptions, error) {
	so := &flexwayv1.StreamOptions{}
	err := d.members(func(key []byte) error {
		if string(key) != "include_usage" {
			return d.extra(&so.ExtraFields, key)
		}
		var err error
		so.IncludeUsage, err = nullable(d, &so.ExtraFields, "include_usage", d.boolPtr)
		return err
	})
	if err != nil {
		return nil, err
	}
	return so, nil
}

// Upstream says how [AppendChatCompletionRequest] adapts a client's request
// for the upstream that serves it.
type Upstream struct {
	// Model replaces the request's model; when empty, the request's model
	// is kept.
	Model string
	// Stream true writes "stream": true and stream_options with
	// include_usage true (the request's other stream_options members are
	// kept), so that the upstream ends the stream with a usage-only chunk.
	// Stream false (a unary call) writes "stream": false only if the
	// request had a stream member (a null is kept as null), and drops
	// stream_options.
	Stream bool
}

// AppendChatCompletionRequest appends the JSON body of the upstream request
// for req to dst and returns the extended slice: the request as the client
// sent it, typed fields first, extra_fields sorted by key, except for model
// and stream as [Upstream] says.
//
// It fails with a [*faults.Error] of reason [faults.InvalidRequest], and
// returns dst unchanged, when req is nil, when no model is left, or when an
// extra_fields value anywhere in req is not one valid JSON value (a request
// built by a gRPC caller); Param names the field. Passing a dst with
// capacity for the request (the client's body length, say) spares the
// copies of a large image.
func AppendChatCompletionRequest(dst []byte, req *flexwayv1.CreateChatCompletionRequest, u Upstream) ([]byte, error) {
	out, err := appendChatCompletionRequest(dst, req, u)
	if err != nil {
		return dst, clientError(err)
	}
	return out, nil
}

func appendChatCompletionRequest(dst []byte, req *flexwayv1.CreateChatCompletionRequest, u Upstream) ([]byte, error) {
	if req == nil {
		return nil, fieldErr("", "no request")
	}
	o, err := openRequest(dst, cmp.Or(u.Model, req.GetModel()))
	if err != nil {
		return nil, err
	}
	o.key("messages")
	o.dst = append(o.dst, '[')
	for i, m := range req.GetMessages() {
		if i > 0 {
			o.dst = append(o.dst, ',')
		}
		if o.dst, err = appendMessage(o.dst, m, true); err != nil {
			return nil, nestKey(nestIndex(err, i), "messages")
		}
	}
	o.dst = append(o.dst, ']')
	if req.MaxTokens != nil {
		o.int("max_tokens", *req.MaxTokens)
	}
	if req.MaxCompletionTokens != nil {
		o.int("max_completion_tokens", *req.MaxCompletionTokens)
	}
	if req.N != nil {
		o.int("n", int64(*req.N))
	}
	switch {
	case u.Stream:
		o.bool("stream", true)
		o.key("stream_options")
		so := open(o.dst)
		so.bool("include_usage", true)
		err := so.extras(req.GetStreamOptions().GetExtraFields(), func(k string) bool { return k == "include_usage" }, true)
		if err != nil {
			return nil, nestKey(err, "stream_options")
		}
		o.dst = so.close()
	case req.Stream != nil:
		o.bool("stream", false)
	}
	return o.closeRequest(req.User, req.GetExtraFields(), func(k string) bool {
		switch k {
		case "messages", "stream_options":
			return true
		case "max_tokens":
			return req.MaxTokens != nil
		case "max_completion_tokens":
			return req.MaxCompletionTokens != nil
		case "n":
			return req.N != nil
		case "stream":
			return u.Stream || req.Stream != nil
		}
		return false
	})
}
