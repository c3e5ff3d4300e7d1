package anthropic

import (
	"strconv"
	"strings"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/backends"
	"github.com/flexway/flexway/server/faults"
	"google.golang.org/protobuf/proto"
)

// Wire is the `anthropic` kind's [backends.Wire]: chat calls posted to
// {url}/v1/messages, translated by [Encode], [Decode], [Stream] and
// [DecodeError]. The zero value needs MaxOutputTokens set for requests
// without an output limit.
type Wire struct {
	// Options are the backend's translation settings.
	Options Options
}

var _ backends.Wire = Wire{}

// messagesPath is POST /v1/messages relative to the backend's URL.
const messagesPath = "v1/messages"

// Chat implements [backends.Wire.Chat] with [Encode].
func (w Wire) Chat(req *flexwayv1.CreateChatCompletionRequest, c backends.WireCall, stream bool) (backends.WireRequest, error) {
	if stream != req.GetStream() {
		// Encode reads stream from the request; a call whose request says
		// otherwise (a gRPC caller's) is sent as the method asks.
		req = proto.CloneOf(req)
		req.Stream = &stream
	}
	body, dropped, err := Encode(req, c.Model, w.Options)
	if err != nil {
		return backends.WireRequest{}, err
	}
	return backends.WireRequest{Path: messagesPath, Body: body, Dropped: dropped}, nil
}

// DecodeChat implements [backends.Wire.DecodeChat] with [Decode].
// A Message naming no model is reported as the model sent.
func (Wire) DecodeChat(body []byte, c backends.WireCall) (*flexwayv1.ChatCompletion, error) {
	resp, _, err := Decode(body, c.Created)
	if err == nil && resp.GetModel() == "" {
		resp.Model = c.Model
	}
	return resp, err
}

// NewChatStream implements [backends.Wire.NewChatStream] with [Stream].
func (Wire) NewChatStream(c backends.WireCall) backends.WireStream {
	return wireStream{s: NewStream(c.Created), model: c.Model}
}

// DecodeError implements [backends.Wire.DecodeError] with [DecodeError].
func (Wire) DecodeError(status int, retryAfter int64, body []byte) *faults.Error {
	return DecodeError(status, retryAfter, body)
}

// CheckChat implements [backends.Checker] with [Check].
func (w Wire) CheckChat(req *flexwayv1.CreateChatCompletionRequest) error {
	if err := Check(req, w.Options); err != nil {
		return err
	}
	return nil
}

// Check reports, cheaply, whether the Messages API can express req with
// the backend's options: nil, or the *faults.Error of reason
// invalid_request [Encode] would return for n above 1, a temperature
// above 1 or no output limit at all. Deeper problems (a tool call's
// arguments) are Encode's alone.
func Check(req *flexwayv1.CreateChatCompletionRequest, opt Options) *faults.Error {
	if req.GetN() > 1 {
		return invalid("n", "this backend returns one choice; n must be 1")
	}
	if v, ok := req.GetExtraFields()["temperature"]; ok && v != "null" {
		if t, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err != nil || t < 0 || t > 1 {
			return invalid("temperature", "temperature must be a number from 0 to 1 on this backend")
		}
	}
	if req.MaxTokens == nil && req.MaxCompletionTokens == nil && opt.MaxOutputTokens <= 0 {
		return invalid("max_tokens", "this backend needs max_tokens or max_completion_tokens")
	}
	return nil
}

// wireStream adapts [Stream] to [backends.WireStream]; a chunk naming no
// model (message_start named none) is reported as the model sent.
type wireStream struct {
	s     *Stream
	model string
}

func (w wireStream) Event(name, data []byte) (*flexwayv1.ChatCompletionChunk, bool, error) {
	ch, err := w.s.Event(name, data)
	if ch != nil && ch.Model == "" {
		ch.Model = w.model
	}
	return ch, err == nil && w.s.Done(), err
}

func (w wireStream) End() (*flexwayv1.ChatCompletionChunk, error) { return nil, w.s.End() }
