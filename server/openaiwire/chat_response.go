package openaiwire

import (
	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
)

// ParseChatCompletion parses an upstream's `chat.completion` response body.
//
// id, object, created, model, choices (index, message, finish_reason) and
// usage (prompt_tokens, completion_tokens, total_tokens) are typed; every
// other member (system_fingerprint, service_tier, a choice's logprobs, a
// message's tool_calls and refusal, usage details, vendor fields) is kept
// raw in extra_fields. A message's content keeps its form: a string, an
// array of parts, or null. A null id, object, model, created or token count
// reads as the zero value, a null choices as no choices.
//
// It returns a plain error, wrapping the cause, when data is not valid
// UTF-8, not one JSON object, or has a typed field of the wrong type.
func ParseChatCompletion(data []byte) (*flexwayv1.ChatCompletion, error) {
	c, err := parseChatCompletion(data)
	if err != nil {
		return nil, upstreamError("chat completion", err)
	}
	return c, nil
}

func parseChatCompletion(data []byte) (*flexwayv1.ChatCompletion, error) {
	d := decoder{data: data}
	c := &flexwayv1.ChatCompletion{}
	f := responseFields{id: &c.Id, object: &c.Object, created: &c.Created, model: &c.Model, usage: &c.Usage, extra: &c.ExtraFields}
	if err := chatResponse(&d, "a chat completion", f, &c.Choices, d.choice); err != nil {
		return nil, err
	}
	return c, nil
}

// ParseChatCompletionChunk parses the JSON of one upstream SSE event of a
// streamed completion, a `chat.completion.chunk` (the caller strips the
// "data: " framing and handles "[DONE]").
//
// It types what [ParseChatCompletion] types, with each choice's delta in
// place of its message: a tool_calls delta stays raw in the delta's
// extra_fields exactly as sent (`"index": 0` included), an absent
// finish_reason or a null one is unset, and `"usage": null` (sent in every
// chunk but the last when include_usage is on) is kept as a null extra
// field. It returns a plain error, wrapping the cause, on input that is not
// a chunk.
func ParseChatCompletionChunk(data []byte) (*flexwayv1.ChatCompletionChunk, error) {
	c, err := parseChatCompletionChunk(data)
	if err != nil {
		return nil, upstreamError("chat completion chunk", err)
	}
	return c, nil
}

func parseChatCompletionChunk(data []byte) (*flexwayv1.ChatCompletionChunk, error) {
	d := decoder{data: data}
	c := &flexwayv1.ChatCompletionChunk{}
	f := responseFields{id: &c.Id, object: &c.Object, created: &c.Created, model: &c.Model, usage: &c.Usage, extra: &c.ExtraFields}
	if err := chatResponse(&d, "a chat completion chunk", f, &c.Choices, d.chunkChoice); err != nil {
		return nil, err
	}
	return c, nil
}

// responseFields points at the fields of a chat completion or chunk but
// its choices.
type responseFields struct {
	id, object, model *string
	created           *int64
	usage             **flexwayv1.Usage
	extra             *map[string]string
}

// chatResponse parses d's document, a chat completion or chunk (what
// names it in errors), into f and *choices, parsing each choice, of type
// C, with choice (a method value of d, see nullable).
func chatResponse[C any](d *decoder, what string, f responseFields, choices *[]*C, choice func() (*C, error)) error {
	return d.document(what, func(key []byte) (err error) {
		switch string(key) {
		case "id":
			*f.id, err = d.optStr()
		case "object":
			*f.object, err = d.optStr()
		case "created":
			*f.created, err = d.optInt64()
		case "model":
			*f.model, err = d.optStr()
		case "choices":
			*choices = (*choices)[:0]
			err = d.array(func(int) error {
				ch, err := choice()
				if err == nil {
					*choices = append(*choices, ch)
				}
				return err
			})
		case "usage":
			*f.usage, err = nullable(d, f.extra, "usage", d.usage)
		default:
			err = d.extra(f.extra, key)
		}
		return err
	})
}

// optStr reads a string at d.pos; null reads as "".
func (d *decoder) optStr() (string, error) {
	if null, err := d.isNull(); err != nil || null {
		return "", err
	}
	return d.str()
}

// optInt64 reads an integer at d.pos; null reads as 0.
func (d *decoder) optInt64() (int64, error) {
	if null, err := d.isNull(); err != nil || null {
		return 0, err
	}
	return d.int64()
}

// optInt32 reads an int32 at d.pos; null reads as 0.
func (d *decoder) optInt32() (int32, error) {
	if null, err := d.isNull(); err != nil || null {
		return 0, err
	}
	return d.int32()
}

// finishReason reads a finish_reason at d.pos: a string, or null (nil).
func (d *decoder) finishReason() (*string, error) {
	if null, err := d.isNull(); err != nil || null {
		return nil, err
	}
	s, err := d.str()
	if err != nil {
		return nil, err
	}
	return &s, nil
}

// choice parses one choice of a chat completion at d.pos.
func (d *decoder) choice() (*flexwayv1.ChatCompletionChoice, error) {
	ch := &flexwayv1.ChatCompletionChoice{}
	if err := d.choiceMembers("message", &ch.Index, &ch.Message, &ch.FinishReason, &ch.ExtraFields); err != nil {
		return nil, err
	}
	return ch, nil
}

// chunkChoice parses one choice of a chunk at d.pos.
func (d *decoder) chunkChoice() (*flexwayv1.ChatCompletionChunkChoice, error) {
	ch := &flexwayv1.ChatCompletionChunkChoice{}
	if err := d.choiceMembers("delta", &ch.Index, &ch.Delta, &ch.FinishReason, &ch.ExtraFields); err != nil {
		return nil, err
	}
	return ch, nil
}

// choiceMembers parses a choice or chunk choice object at d.pos into the
// fields given; msgKey is "message" or "delta", and a null message is kept
// in *extra.
func (d *decoder) choiceMembers(msgKey string, index *int32, msg **flexwayv1.ChatMessage, finish **string, extra *map[string]string) error {
	return d.members(func(key []byte) (err error) {
		switch string(key) {
		case "index":
			*index, err = d.optInt32()
		case msgKey:
			*msg, err = nullable(d, extra, msgKey, func() (*flexwayv1.ChatMessage, error) { return d.message(false) })
		case "finish_reason":
			*finish, err = d.finishReason()
		default:
			err = d.extra(extra, key)
		}
		return err
	})
}

// usage parses a chat usage object at d.pos.
func (d *decoder) usage() (*flexwayv1.Usage, error) {
	u := &flexwayv1.Usage{}
	if err := d.usageMembers(&u.PromptTokens, &u.CompletionTokens, &u.TotalTokens, &u.ExtraFields); err != nil {
		return nil, err
	}
	return u, nil
}

// usageMembers parses a chat or embeddings usage object at d.pos into the
// fields given: the token counts prompt_tokens, completion_tokens and
// total_tokens, every other member into *extra. A nil completion (an
// embeddings usage) keeps completion_tokens in *extra.
func (d *decoder) usageMembers(prompt, completion, total *int64, extra *map[string]string) error {
	return d.members(func(key []byte) (err error) {
		var count *int64
		switch string(key) {
		case "prompt_tokens":
			count = prompt
		case "completion_tokens":
			count = completion
		case "total_tokens":
			count = total
		}
		if count == nil {
			return d.extra(extra, key)
		}
		*count, err = d.optInt64()
		return err
	})
}

// AppendChatCompletion appends c as a `chat.completion` JSON object to dst
// and returns the extended slice: id, object, created, model and choices
// always, usage when set, then extra_fields sorted by key. Each choice
// writes index (even 0), message when set, finish_reason (null when unset),
// then its extra fields; a message writes role when not empty, content when
// set (null for the null member, an array for parts), name when set, then
// its extra fields. An extra_fields value that is not valid JSON is written
// as null.
func AppendChatCompletion(dst []byte, c *flexwayv1.ChatCompletion) []byte {
	if c == nil {
		c = &flexwayv1.ChatCompletion{}
	}
	return appendResponse(dst, c.GetId(), c.GetObject(), c.GetCreated(), c.GetModel(), c.GetChoices(),
		func(dst []byte, ch *flexwayv1.ChatCompletionChoice) []byte {
			if ch == nil {
				ch = &flexwayv1.ChatCompletionChoice{}
			}
			return appendChoice(dst, ch.GetIndex(), ch.GetMessage(), "message", ch.FinishReason, ch.GetExtraFields())
		}, c.GetUsage(), c.GetExtraFields())
}

// AppendChatCompletionChunk appends c as a `chat.completion.chunk` JSON
// object to dst and returns the extended slice, without SSE framing; it
// writes what [AppendChatCompletion] writes, with each choice's delta in
// place of its message. A usage-only chunk writes `"choices": []`.
func AppendChatCompletionChunk(dst []byte, c *flexwayv1.ChatCompletionChunk) []byte {
	if c == nil {
		c = &flexwayv1.ChatCompletionChunk{}
	}
	return appendResponse(dst, c.GetId(), c.GetObject(), c.GetCreated(), c.GetModel(), c.GetChoices(),
		func(dst []byte, ch *flexwayv1.ChatCompletionChunkChoice) []byte {
			if ch == nil {
				ch = &flexwayv1.ChatCompletionChunkChoice{}
			}
			return appendChoice(dst, ch.GetIndex(), ch.GetDelta(), "delta", ch.FinishReason, ch.GetExtraFields())
		}, c.GetUsage(), c.GetExtraFields())
}

// appendResponse writes what a completion and a chunk share: id, object,
// created, model, the choices (each written by choice, which writes a nil
// one as an empty one), usage when set, then extra.
func appendResponse[C any](dst []byte, id, object string, created int64, model string, choices []C,
	choice func([]byte, C) []byte, usage *flexwayv1.Usage, extra map[string]string) []byte {
	o := open(dst)
	o.str("id", id)
	o.str("object", object)
	o.int("created", created)
	o.str("model", model)
	o.key("choices")
	o.dst = append(o.dst, '[')
	for i, ch := range choices {
		if i > 0 {
			o.dst = append(o.dst, ',')
		}
		o.dst = choice(o.dst, ch)
	}
	o.dst = append(o.dst, ']')
	if usage != nil {
		o.key("usage")
		o.dst = appendUsage(o.dst, usage)
	}
	_ = o.extras(extra, func(k string) bool {
		return responseKey(k) || k == "usage" && usage != nil
	}, false)
	return o.close()
}

// responseKey reports whether k is a member a completion or chunk always
// writes.
func responseKey(k string) bool {
	switch k {
	case "id", "object", "created", "model", "choices":
		return true
	}
	return false
}

// appendChoice writes a choice or a chunk choice; msgKey is "message" or
// "delta".
func appendChoice(dst []byte, index int32, msg *flexwayv1.ChatMessage, msgKey string, finish *string, extra map[string]string) []byte {
	o := open(dst)
	o.int("index", int64(index))
	if msg != nil {
		o.key(msgKey)
		o.dst, _ = appendMessage(o.dst, msg, false)
	}
	if finish != nil {
		o.str("finish_reason", *finish)
	} else {
		o.null("finish_reason")
	}
	_ = o.extras(extra, func(k string) bool {
		return k == "index" || k == "finish_reason" || k == msgKey && msg != nil
	}, false)
	return o.close()
}

// appendUsage writes a chat usage object: the three token counts, then its
// extra fields.
func appendUsage(dst []byte, u *flexwayv1.Usage) []byte {
	o := open(dst)
	o.int("prompt_tokens", u.GetPromptTokens())
	o.int("completion_tokens", u.GetCompletionTokens())
	o.int("total_tokens", u.GetTotalTokens())
	_ = o.extras(u.GetExtraFields(), func(k string) bool {
		return k == "prompt_tokens" || k == "completion_tokens" || k == "total_tokens"
	}, false)
	return o.close()
}
