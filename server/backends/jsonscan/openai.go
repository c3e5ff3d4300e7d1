package jsonscan

import "unicode/utf8"

// The readers below take the raw JSON of the OpenAI request members the
// encoders map (https://platform.openai.com/docs/api-reference/chat/create),
// as the request's extra_fields hold it. They read what json.Unmarshal
// into the matching struct read (unknown members skipped, null as the
// zero value, last duplicate wins), member names matched exactly; ok is
// false when the JSON is not of the member's shape.

// Text reads a string, or null as "".
func (s *Scanner) Text() string {
	if s.Null() {
		return ""
	}
	raw, escaped := s.Raw()
	if !escaped && utf8.Valid(raw) {
		if s.inPlace {
			return s.view(raw)
		}
		return intern(raw)
	}
	var buf [128]byte
	return string(Unescape(buf[:0], raw))
}

// intern is string(b), without an allocation for the values that recur
// in every request and answer.
func intern(b []byte) string {
	switch string(b) {
	case "function":
		return "function"
	case "text":
		return "text"
	case "object":
		return "object"
	case "string":
		return "string"
	case "message":
		return "message"
	case "assistant":
		return "assistant"
	case "tool_use":
		return "tool_use"
	case "thinking":
		return "thinking"
	case "end_turn":
		return "end_turn"
	}
	return string(b)
}

// ToolCall is one element of an assistant message's tool_calls:
// {"id", "type", "function": {"name", "arguments"}}.
type ToolCall struct {
	ID, Type, Name, Arguments string
}

// ToolCalls reads an assistant message's tool_calls (an array, or null).
func ToolCalls(raw string) (calls []ToolCall, ok bool) {
	var s Scanner
	s.resetString(raw)
	if s.Null() {
		return nil, s.Done()
	}
	calls = make([]ToolCall, 0, 4)
	s.Array(func() {
		var c ToolCall
		if !s.Null() {
			s.Object(func(key []byte) {
				switch string(key) {
				case "id":
					c.ID = s.Text()
				case "type":
					c.Type = s.Text()
				case "function":
					s.fields(func(key []byte) {
						switch string(key) {
						case "name":
							c.Name = s.Text()
						case "arguments":
							c.Arguments = s.Text()
						default:
							s.Skip()
						}
					})
				default:
					s.Skip()
				}
			})
		}
		calls = append(calls, c)
	})
	return calls, s.Done()
}

// fields reads an object or null.
func (s *Scanner) fields(member func(key []byte)) {
	if !s.Null() {
		s.Object(member)
	}
}

// Tool is one element of the request's tools: {"type", "function":
// {"name", "description", "parameters", "strict"}}; Parameters and Strict
// are the raw JSON as written (null included), "" when absent.
type Tool struct {
	Type, Name, Description string
	Parameters, Strict      string
}

// Tools reads the request's tools (an array, or null).
func Tools(raw string) (tools []Tool, ok bool) {
	var s Scanner
	s.resetString(raw)
	if s.Null() {
		return nil, s.Done()
	}
	tools = make([]Tool, 0, 4)
	s.Array(func() {
		var t Tool
		s.fields(func(key []byte) {
			switch string(key) {
			case "type":
				t.Type = s.Text()
			case "function":
				s.fields(func(key []byte) {
					switch string(key) {
					case "name":
						t.Name = s.Text()
					case "description":
						t.Description = s.Text()
					case "parameters":
						t.Parameters = s.view(s.Value())
					case "strict":
						t.Strict = s.view(s.Value())
					default:
						s.Skip()
					}
				})
			default:
				s.Skip()
			}
		})
		tools = append(tools, t)
	})
	return tools, s.Done()
}

// Strings reads stop: one string (one true) or an array of strings (null
// elements as "").
func Strings(raw string) (list []string, one bool, ok bool) {
	var s Scanner
	s.resetString(raw)
	if s.Peek() == '"' {
		list = []string{s.Text()}
		return list, true, s.Done()
	}
	if s.Null() {
		return nil, false, s.Done()
	}
	list = []string{}
	s.Array(func() { list = append(list, s.Text()) })
	return list, false, s.Done()
}

// ToolChoice is the request's tool_choice: a mode string ("auto",
// "required", "none") or {"type": "function", "function": {"name"}}.
type ToolChoice struct {
	Mode     string // the string form
	IsString bool
	Type     string // the object form's type
	Name     string // and its function.name
}

// ReadToolChoice reads tool_choice.
func ReadToolChoice(raw string) (tc ToolChoice, ok bool) {
	var s Scanner
	s.resetString(raw)
	if s.Peek() == '"' {
		tc.Mode, tc.IsString = s.Text(), true
		return tc, s.Done()
	}
	s.fields(func(key []byte) {
		switch string(key) {
		case "type":
			tc.Type = s.Text()
		case "function":
			s.fields(func(key []byte) {
				if string(key) == "name" {
					tc.Name = s.Text()
				} else {
					s.Skip()
				}
			})
		default:
			s.Skip()
		}
	})
	return tc, s.Done()
}

// String reads one JSON string (null as ""); ok is false for anything
// else.
func String(raw string) (string, bool) {
	var s Scanner
	s.resetString(raw)
	v := s.Text()
	return v, s.Done()
}
