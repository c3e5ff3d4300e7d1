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
	d, err := topObject(data, "a chat completion")
	if err != nil {
		return nil, err
	}
	c := &flexwayv1.ChatCompletion{}
	for first := true; ; first = false {
		key, ok, err := d.member(first)
		if err != nil {
			return nil, err
		}
		if !ok {
			break
		}
		switch string(key) {
		case "id":
			c.Id, err = d.optStr()
		case "object":
			c.Object, err = d.optStr()
		case "created":
			c.Created, err = d.optInt64()
		case "model":
			c.Model, err = d.optStr()
		case "choices":
			c.Choices = c.Choices[:0]
			err = d.array(func(i int) error {
				ch, err := d.choice()
				if err == nil {
					c.Choices = append(c.Choices, ch)
				}
				return err
			})
		case "usage":
			c.Usage, err = d.usageMember(&c.ExtraFields)
		default:
			err = d.extra(&c.ExtraFields, key)
		}
		if err != nil {
			return nil, nestKey(err, string(key))
		}
	}
	if err := d.end(); err != nil {
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
	d, err := topObject(data, "a chat completion chunk")
	if err != nil {
		return nil, err
	}
	c := &flexwayv1.ChatCompletionChunk{}
	for first := true; ; first = false {
		key, ok, err := d.member(first)
		if err != nil {
			return nil, err
		}
		if !ok {
			break
		}
		switch string(key) {
		case "id":
			c.Id, err = d.optStr()
		case "object":
			c.Object, err = d.optStr()
		case "created":
			c.Created, err = d.optInt64()
		case "model":
			c.Model, err = d.optStr()
		case "choices":
			c.Choices = c.Choices[:0]
			err = d.array(func(i int) error {
				ch, err := d.chunkChoice()
				if err == nil {
					c.Choices = append(c.Choices, ch)
				}
				return err
			})
		case "usage":
			c.Usage, err = d.usageMember(&c.ExtraFields)
		default:
			err = d.extra(&c.ExtraFields, key)
		}
		if err != nil {
			return nil, nestKey(err, string(key))
		}
	}
	if err := d.end(); err != nil {
		return nil, err
	}
	return c, nil
}

// array parses an array at d.pos, calling elem with d.pos on each element;
// null reads as an empty array. Errors of elem are nested under the index.
func (d *decoder) array(elem func(i int) error) error {
	if null, err := d.isNull(); err != nil || null {
		return err
	}
	if err := d.openArray(); err != nil {
		return err
	}
	for i := 0; ; i++ {
		ok, err := d.element(i == 0)
		if err != nil || !ok {
			return err
		}
		if err := elem(i); err != nil {
			return nestIndex(err, i)
		}
	}
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
	if err := d.openObject(); err != nil {
		return nil, err
	}
	ch := &flexwayv1.ChatCompletionChoice{}
	for first := true; ; first = false {
		key, ok, err := d.member(first)
		if err != nil {
			return nil, err
		}
		if !ok {
			return ch, nil
		}
		switch string(key) {
		case "index":
			ch.Index, err = d.optInt32()
		case "message":
			ch.Message, err = d.messageMember(&ch.ExtraFields, "message")
		case "finish_reason":
			ch.FinishReason, err = d.finishReason()
		default:
			err = d.extra(&ch.ExtraFields, key)
		}
		if err != nil {
			return nil, nestKey(err, string(key))
		}
	}
}

// chunkChoice parses one choice of a chunk at d.pos.
func (d *decoder) chunkChoice() (*flexwayv1.ChatCompletionChunkChoice, error) {
	if err := d.openObject(); err != nil {
		return nil, err
	}
	ch := &flexwayv1.ChatCompletionChunkChoice{}
	for first := true; ; first = false {
		key, ok, err := d.member(first)
		if err != nil {
			return nil, err
		}
		if !ok {
			return ch, nil
		}
		switch string(key) {
		case "index":
			ch.Index, err = d.optInt32()
		case "delta":
			ch.Delta, err = d.messageMember(&ch.ExtraFields, "delta")
		case "finish_reason":
			ch.FinishReason, err = d.finishReason()
		default:
			err = d.extra(&ch.ExtraFields, key)
		}
		if err != nil {
			return nil, nestKey(err, string(key))
		}
	}
}

// messageMember reads a response message or delta at d.pos; null is kept
// in *m under key.
func (d *decoder) messageMember(m *map[string]string, key string) (*flexwayv1.ChatMessage, error) {
	if null, err := d.keptNull(m, key); err != nil || null {
		return nil, err
	}
	msg, err := d.message(false)
	if err == nil {
		delete(*m, key)
	}
	return msg, err
}

// usageMember reads a usage object at d.pos; null is kept in *m.
func (d *decoder) usageMember(m *map[string]string) (*flexwayv1.Usage, error) {
	if null, err := d.keptNull(m, "usage"); err != nil || null {
		return nil, err
	}
	if err := d.openObject(); err != nil {
		return nil, err
	}
	u := &flexwayv1.Usage{}
	for first := true; ; first = false {
		key, ok, err := d.member(first)
		if err != nil {
			return nil, err
		}
		if !ok {
			break
		}
		switch string(key) {
		case "prompt_tokens":
			u.PromptTokens, err = d.optInt64()
		case "completion_tokens":
			u.CompletionTokens, err = d.optInt64()
		case "total_tokens":
			u.TotalTokens, err = d.optInt64()
		default:
			err = d.extra(&u.ExtraFields, key)
		}
		if err != nil {
			return nil, nestKey(err, string(key))
		}
	}
	delete(*m, "usage")
	return u, nil
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
	o := open(dst)
	o.str("id", c.GetId())
	o.str("object", c.GetObject())
	o.int("created", c.GetCreated())
	o.str("model", c.GetModel())
	o.key("choices")
	o.dst = append(o.dst, '[')
	for i, ch := range c.GetChoices() {
		if i > 0 {
			o.dst = append(o.dst, ',')
		}
		if ch == nil {
			ch = &flexwayv1.ChatCompletionChoice{}
		}
		o.dst = appendChoice(o.dst, ch.GetIndex(), ch.GetMessage(), "message", ch.FinishReason, ch.GetExtraFields())
	}
	o.dst = append(o.dst, ']')
	if c.GetUsage() != nil {
		o.key("usage")
		o.dst = appendUsage(o.dst, c.GetUsage())
	}
	_ = o.extras(c.GetExtraFields(), func(k string) bool {
		return responseKey(k) || k == "usage" && c.GetUsage() != nil
	}, false)
	return o.close()
}

// AppendChatCompletionChunk appends c as a `chat.completion.chunk` JSON
// object to dst and returns the extended slice, without SSE framing; it
// writes what [AppendChatCompletion] writes, with each choice's delta in
// place of its message. A usage-only chunk writes `"choices": []`.
func AppendChatCompletionChunk(dst []byte, c *flexwayv1.ChatCompletionChunk) []byte {
	if c == nil {
		c = &flexwayv1.ChatCompletionChunk{}
	}
	o := open(dst)
	o.str("id", c.GetId())
	o.str("object", c.GetObject())
	o.int("created", c.GetCreated())
	o.str("model", c.GetModel())
	o.key("choices")
	o.dst = append(o.dst, '[')
	for i, ch := range c.GetChoices() {
		if i > 0 {
			o.dst = append(o.dst, ',')
		}
		if ch == nil {
			ch = &flexwayv1.ChatCompletionChunkChoice{}
		}
		o.dst = appendChoice(o.dst, ch.GetIndex(), ch.GetDelta(), "delta", ch.FinishReason, ch.GetExtraFields())
	}
	o.dst = append(o.dst, ']')
	if c.GetUsage() != nil {
		o.key("usage")
		o.dst = appendUsage(o.dst, c.GetUsage())
	}
	_ = o.extras(c.GetExtraFields(), func(k string) bool {
		return responseKey(k) || k == "usage" && c.GetUsage() != nil
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
