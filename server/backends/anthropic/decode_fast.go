package anthropic

import (
	"github.com/flexway/flexway/server/backends/jsonscan"
)

// scanAnswer reads a Message answer into m without encoding/json, the
// common case of [Decode]; ok false leaves body to json.Unmarshal, which
// decides everything this does not read exactly as it would: a member
// name that is not lower case (encoding/json matches names without regard
// to case), a member given twice, a value of another type, and every
// error.
func scanAnswer(body []byte, m *wireMessageAnswer) (ok bool) {
	var s jsonscan.Scanner
	s.Reset(body)
	var seen uint
	s.Object(func(key []byte) {
		bit, dst := uint(0), (*string)(nil)
		switch string(key) {
		case "id":
			bit, dst = 1, &m.ID
		case "type":
			bit, dst = 2, &m.Type
		case "role":
			bit, dst = 4, &m.Role
		case "model":
			bit, dst = 8, &m.Model
		case "stop_reason":
			bit, dst = 16, &m.StopReason
		case "content":
			bit = 32
			if !s.Null() {
				m.Content = make([]wireContent, 0, 4)
				s.Array(func() {
					m.Content = append(m.Content, wireContent{})
					scanContent(&s, &m.Content[len(m.Content)-1])
				})
			}
		case "usage":
			bit = 64
			if !s.Null() {
				m.Usage = &wireUsage{}
				scanUsage(&s, m.Usage)
			}
		default:
			other(&s, key)
			return
		}
		if seen&bit != 0 {
			s.Fail()
		}
		seen |= bit
		if dst != nil {
			text(&s, dst)
		}
	})
	return s.Done()
}

// text reads a string into dst; null leaves dst as it is, as
// encoding/json does.
func text(s *jsonscan.Scanner, dst *string) {
	if !s.Null() {
		*dst = s.Text()
	}
}

// other skips the value of a member the fast path does not read, giving
// up on a name encoding/json might match to one it does.
func other(s *jsonscan.Scanner, key []byte) {
	for _, c := range key {
		if (c < 'a' || c > 'z') && c != '_' {
			s.Fail()
			return
		}
	}
	s.Skip()
}

func scanContent(s *jsonscan.Scanner, b *wireContent) {
	if s.Null() {
		return
	}
	var seen uint
	s.Object(func(key []byte) {
		bit, dst := uint(0), (*string)(nil)
		switch string(key) {
		case "type":
			bit, dst = 1, &b.Type
		case "text":
			bit, dst = 2, &b.Text
		case "thinking":
			bit, dst = 4, &b.Thinking
		case "id":
			bit, dst = 8, &b.ID
		case "name":
			bit, dst = 16, &b.Name
		case "input":
			bit = 32
			b.Input = s.Value()
		default:
			other(s, key)
			return
		}
		if seen&bit != 0 {
			s.Fail()
		}
		seen |= bit
		if dst != nil {
			text(s, dst)
		}
	})
}

func scanUsage(s *jsonscan.Scanner, u *wireUsage) {
	var seen uint
	s.Object(func(key []byte) {
		bit, dst := uint(0), (**int64)(nil)
		switch string(key) {
		case "input_tokens":
			bit, dst = 1, &u.InputTokens
		case "output_tokens":
			bit, dst = 2, &u.OutputTokens
		case "cache_creation_input_tokens":
			bit, dst = 4, &u.CacheCreationInputTokens
		case "cache_read_input_tokens":
			bit, dst = 8, &u.CacheReadInputTokens
		default:
			other(s, key)
			return
		}
		if seen&bit != 0 {
			s.Fail()
		}
		seen |= bit
		if s.Null() {
			*dst = nil
			return
		}
		n := s.Int()
		*dst = &n
	})
}
