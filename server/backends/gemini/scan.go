package gemini

import (
	"errors"

	"github.com/flexway/flexway/server/backends/jsonscan"
)

// errSyntax is the scanner's one error: the event is not the JSON it
// expects.
var errSyntax = errors.New("gemini: malformed stream event")

// eventScan is the hand-written reader of one streamGenerateContent event
// (a GenerateContentResponse, https://ai.google.dev/api/generate-content#generatecontentresponse):
// it reads only the members the stream decoder uses and skips the rest,
// reusing its buffers from event to event, so that a text event costs no
// allocation. It reads with a [jsonscan.Scanner]: strings decoded as
// encoding/json decodes them; invalid JSON is errSyntax. Where an object,
// array, string or number is expected, null reads as empty.
type eventScan struct {
	s jsonscan.Scanner

	// Per event.
	hasError    bool
	usage       gUsageMetadata
	hasUsage    bool
	blockReason []byte
	model       []byte
	responseID  []byte
	cands       []scanCandidate
	ncands      int

	strs []byte // unescaped strings of this event
}

type scanCandidate struct {
	index   int64
	finish  []byte
	text    []byte
	thought []byte
	calls   []scanCall
}

type scanCall struct {
	name, args, sig []byte
}

// scan reads data; the results hold until the next call.
func (e *eventScan) scan(data []byte) error {
	s := &e.s
	s.Reset(data)
	e.hasError, e.hasUsage, e.usage = false, false, gUsageMetadata{}
	e.blockReason, e.model, e.responseID = e.blockReason[:0], e.model[:0], e.responseID[:0]
	e.ncands = 0
	e.strs = e.strs[:0]
	e.object(func(key []byte) {
		switch string(key) {
		case "candidates":
			e.array(e.candidate)
		case "usageMetadata":
			e.hasUsage = true
			e.usageMetadata()
		case "promptFeedback":
			e.object(func(k []byte) {
				if string(k) == "blockReason" {
					e.blockReason = e.str(e.blockReason[:0])
				} else {
					s.Skip()
				}
			})
		case "modelVersion":
			e.model = e.str(e.model[:0])
		case "responseId":
			e.responseID = e.str(e.responseID[:0])
		case "error":
			if !s.Null() {
				e.hasError = true
				s.Skip()
			}
		default:
			s.Skip()
		}
	})
	if !s.Done() {
		return errSyntax
	}
	return nil
}

// object reads an object or null.
func (e *eventScan) object(member func(key []byte)) {
	if !e.s.Null() {
		e.s.Object(member)
	}
}

// array reads an array or null.
func (e *eventScan) array(elem func()) {
	if !e.s.Null() {
		e.s.Array(elem)
	}
}

// str appends a string to dst (null appends nothing).
func (e *eventScan) str(dst []byte) []byte {
	if e.s.Null() {
		return dst
	}
	return e.s.Str(dst)
}

// int reads an integer up to 2^53, or null as 0.
func (e *eventScan) int() int64 {
	if e.s.Null() {
		return 0
	}
	return e.s.Int()
}

func (e *eventScan) candidate() {
	if e.ncands == len(e.cands) {
		e.cands = append(e.cands, scanCandidate{})
	}
	c := &e.cands[e.ncands]
	e.ncands++
	c.index, c.finish, c.text, c.thought, c.calls = 0, c.finish[:0], c.text[:0], c.thought[:0], c.calls[:0]
	e.object(func(key []byte) {
		switch string(key) {
		case "index":
			c.index = e.int()
		case "finishReason":
			c.finish = e.str(c.finish[:0])
		case "content":
			e.object(func(k []byte) {
				if string(k) != "parts" {
					e.s.Skip()
					return
				}
				e.array(func() { e.part(c) })
			})
		default:
			e.s.Skip()
		}
	})
}

func (e *eventScan) part(c *scanCandidate) {
	s := &e.s
	var text []byte
	hasText, thought := false, false
	var call scanCall
	hasCall := false
	e.object(func(key []byte) {
		switch string(key) {
		case "text":
			from := len(e.strs)
			e.strs = e.str(e.strs)
			text, hasText = e.strs[from:], true
		case "thought":
			thought = !s.Null() && s.Bool()
		case "thoughtSignature":
			from := len(e.strs)
			e.strs = e.str(e.strs)
			call.sig = e.strs[from:]
		case "functionCall":
			hasCall = true
			e.object(func(k []byte) {
				switch string(k) {
				case "name":
					from := len(e.strs)
					e.strs = e.str(e.strs)
					call.name = e.strs[from:]
				case "args":
					call.args = s.Value()
				default:
					s.Skip()
				}
			})
		default:
			s.Skip()
		}
	})
	switch {
	case s.Bad():
	case hasCall:
		c.calls = append(c.calls, call)
	case hasText && thought:
		c.thought = append(c.thought, text...)
	case hasText:
		c.text = append(c.text, text...)
	}
}

func (e *eventScan) usageMetadata() {
	e.object(func(key []byte) {
		var dst *int64
		switch string(key) {
		case "promptTokenCount":
			dst = &e.usage.PromptTokenCount
		case "candidatesTokenCount":
			dst = &e.usage.CandidatesTokenCount
		case "totalTokenCount":
			dst = &e.usage.TotalTokenCount
		case "cachedContentTokenCount":
			dst = &e.usage.CachedContentTokenCount
		case "thoughtsTokenCount":
			dst = &e.usage.ThoughtsTokenCount
		case "toolUsePromptTokenCount":
			dst = &e.usage.ToolUsePromptTokenCount
		default:
			e.s.Skip()
			return
		}
		*dst = e.int()
	})
}
