package a2a

import (
	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/backends/jsonscan"
)

// Member names encoding/json would match to a field of status and answer.
var (
	statusFields = []string{"state", "message"}
	answerFields = []string{"messageId", "role", "parts"}
)

// fastDecode decodes, without reflection, the common 2xx answers of
// message/send: a Message, or a Task completed (its artifacts' text, else
// its status message's) or asking for input, all of text (or file) parts,
// with o.RequestID's id.
// ok is false for anything else (errors, other states, data parts, a
// completed task answered only in its history, malformed input), which
// [Decode] reads with encoding/json to the same result (the fuzz target
// checks it).
func fastDecode(body []byte, o DecodeOptions) (c *flexwayv1.ChatCompletion, ok bool) {
	var kind, msgID, taskID, state []byte
	var msgText, artText, statusText []byte
	var seenKind, seenMsgID, seenID, seenRole, seenParts, seenStatus, seenArts, seenHist, seenState, seenStatusMsg bool
	history := false
	var scan jsonscan.Scanner
	r := &scan
	if !fastResult(r, body, requestID(o.RequestID), func() {
		r.Object(func(key []byte) {
			switch string(key) {
			case "kind":
				once(r, &seenKind)
				kind = strNoEscape(r)
			case "messageId":
				once(r, &seenMsgID)
				msgID = strNoEscape(r)
			case "id":
				once(r, &seenID)
				taskID = strNoEscape(r)
			case "role":
				once(r, &seenRole)
				strNoEscape(r)
			case "parts":
				once(r, &seenParts)
				msgText = fastParts(r, nil)
			case "status":
				once(r, &seenStatus)
				r.Object(func(key []byte) {
					switch string(key) {
					case "state":
						once(r, &seenState)
						state = strNoEscape(r)
					case "message":
						once(r, &seenStatusMsg)
						var seenI, seenR, seenP bool
						r.Object(func(key []byte) {
							switch string(key) {
							case "messageId":
								once(r, &seenI)
								strNoEscape(r)
							case "role":
								once(r, &seenR)
								strNoEscape(r)
							case "parts":
								once(r, &seenP)
								statusText = fastParts(r, statusText)
							default:
								other(r, key, answerFields)
							}
						})
					default:
						other(r, key, statusFields)
					}
				})
			case "artifacts":
				once(r, &seenArts)
				r.Array(func() {
					var seenA, seenP bool
					r.Object(func(key []byte) {
						switch string(key) {
						case "artifactId":
							once(r, &seenA)
							strNoEscape(r)
						case "parts":
							once(r, &seenP)
							artText = fastParts(r, artText)
						default:
							other(r, key, artifactFields)
						}
					})
				})
			case "history":
				once(r, &seenHist)
				history = !r.Null()
				if history {
					r.Skip()
				}
			default:
				other(r, key, resultFields)
			}
		})
	}) {
		return nil, false
	}
	var text []byte
	var id []byte
	switch {
	case string(kind) == "message" && !seenStatus:
		text, id = msgText, msgID
	case string(kind) == "task" && seenStatus && !seenParts:
		id = taskID
		switch normState(string(state)) {
		case stateCompleted:
			text = artText
			if len(text) == 0 && seenStatusMsg {
				text = statusText
			}
			if len(text) == 0 && history {
				return nil, false
			}
		case stateInputRequired:
			text = statusText
		case stateAuthRequired:
			if len(statusText) == 0 {
				return nil, false // no question to relay: an error
			}
			text = statusText
		default:
			return nil, false
		}
	default:
		return nil, false
	}
	stop := "stop"
	return &flexwayv1.ChatCompletion{
		Id: "a2a-" + string(id), Object: "chat.completion", Created: o.Created, Model: o.Model,
		Choices: []*flexwayv1.ChatCompletionChoice{{
			Message:      &flexwayv1.ChatMessage{Role: "assistant", Content: &flexwayv1.ChatMessage_Text{Text: string(text)}},
			FinishReason: &stop,
		}},
	}, true
}
