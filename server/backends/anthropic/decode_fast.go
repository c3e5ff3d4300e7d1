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
		switch string(key) {
		case "id":
			text(&s, &seen, 1, &m.ID)
		case "type":
			text(&s, &seen, 2, &m.Type)
		case "role":
			text(&s, &seen, 4, &m.Role)
		case "model":
			text(&s, &seen, 8, &m.Model)
		case "stop_reason":
			text(&s, &seen, 16, &m.StopReason)
		case "content":
			once(&s, &seen, 32)
			if !s.Null() {
				m.Content = make([]wireContent, 0, 4)
				s.Array(func() {
					m.Content = append(m.Content, wireContent{})
					scanContent(&s, &m.Content[len(m.Content)-1])
				})
			}
		case "usage":
			once(&s, &seen, 64)
			if !s.Null() {
				m.Usage = &wireUsage{}
				scanUsage(&s, m.Usage)
			}
		default:
			other(&s, key)
		}
	})
	return s.Done()
}

// once marks bit seen, failing s when it was: encoding/json would merge
// a member given twice.
func once(s *jsonscan.Scanner, seen *uint, bit uint) {
	if *seen&bit != 0 {
		s.Fail()
	}
	*seen |= bit
}

// text reads a string member (once) into dst; null leaves dst as it is,
// as encoding/json does.
func text(s *jsonscan.Scanner, seen *uint, bit uint, dst *string) {
	once(s, seen, bit)
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
		switch string(key) {
		case "type":
			text(s, &seen, 1, &b.Type)
		case "text":
			text(s, &seen, 2, &b.Text)
		case "thinking":
			text(s, &seen, 4, &b.Thinking)
		case "id":
			text(s, &seen, 8, &b.ID)
		case "name":
			text(s, &seen, 16, &b.Name)
		case "input":
			once(s, &seen, 32)
			b.Input = s.Value()
		default:
			other(s, key)
		}
	})
}

func scanUsage(s *jsonscan.Scanner, u *wireUsage) {
	var seen uint
	s.Object(func(key []byte) {
		var dst **int64
		switch string(key) {
		case "input_tokens":
			once(s, &seen, 1)
			dst = &u.InputTokens
		case "output_tokens":
			once(s, &seen, 2)
			dst = &u.OutputTokens
		case "cache_creation_input_tokens":
			once(s, &seen, 4)
			dst = &u.CacheCreationInputTokens
		case "cache_read_input_tokens":
			once(s, &seen, 8)
			dst = &u.CacheReadInputTokens
		default:
			other(s, key)
			return
		}
		if s.Null() {
			*dst = nil
			return
		}
		n := s.Int()
		*dst = &n
	})
}
