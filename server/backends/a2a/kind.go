package a2a

import (
	"fmt"
	"io"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/backends"
	"github.com/flexway/flexway/server/faults"
)

// Wire is the `a2a` kind's [backends.Wire]: JSON-RPC 2.0 message/send (or
// message/stream for a stream) posted to the backend's URL itself,
// translated by [Encode], [Decode], [StreamDecoder] and [DecodeError].
type Wire struct {
	// Backend is the backend's name, for error messages.
	Backend string
	// Images says the agent takes image input (the backend declares the
	// vision capability).
	Images bool
}

var _ backends.Wire = Wire{}

// Chat implements [backends.Wire.Chat] with [Encode], the call's request
// id as the JSON-RPC id.
func (w Wire) Chat(req *flexwayv1.CreateChatCompletionRequest, c backends.WireCall, stream bool) (backends.WireRequest, error) {
	body, dropped, err := Encode(req, c.Model, Options{Stream: stream, RequestID: c.RequestID, Images: w.Images})
	if err != nil {
		return backends.WireRequest{}, err
	}
	return backends.WireRequest{Body: body, Dropped: dropped}, nil
}

// DecodeChat implements [backends.Wire.DecodeChat] with [Decode], the
// call's request id (the JSON-RPC id [Wire.Chat] sent) as the id the
// answer must carry.
func (w Wire) DecodeChat(body []byte, c backends.WireCall) (*flexwayv1.ChatCompletion, error) {
	return Decode(body, DecodeOptions{Backend: w.Backend, Model: c.Model, Created: c.Created, RequestID: c.RequestID})
}

// NewChatStream implements [backends.Wire.NewChatStream] with
// [StreamDecoder], every event checked against the call's request id.
func (w Wire) NewChatStream(c backends.WireCall) backends.WireStream {
	return wireStream{NewStreamDecoder(DecodeOptions{Backend: w.Backend, Model: c.Model, Created: c.Created, RequestID: c.RequestID})}
}

// DecodeError implements [backends.Wire.DecodeError] with [DecodeError].
func (w Wire) DecodeError(status int, retryAfter int64, body []byte) *faults.Error {
	return DecodeError(w.Backend, status, body, retryAfter)
}

// CheckChat implements [backends.Checker] with [Check].
func (w Wire) CheckChat(req *flexwayv1.CreateChatCompletionRequest) error {
	if err := Check(req, w.Images); err != nil {
		return err
	}
	return nil
}

// Check reports, cheaply, whether an agent can be asked req: nil, or the
// *faults.Error of reason invalid_request [Encode] would return for n
// above 1 or, when images is false, an image part.
func Check(req *flexwayv1.CreateChatCompletionRequest, images bool) *faults.Error {
	if req.N != nil && req.GetN() > 1 {
		return &faults.Error{Reason: faults.InvalidRequest, Param: "n", Message: "an A2A agent gives one answer: n must be 1"}
	}
	if images {
		return nil
	}
	for i, m := range req.GetMessages() {
		for j, p := range m.GetParts().GetParts() {
			if p.GetType() == "image_url" {
				return &faults.Error{Reason: faults.InvalidRequest, Param: fmt.Sprintf("messages[%d].content[%d].image_url", i, j),
					Message: "this A2A agent takes no image input"}
			}
		}
	}
	return nil
}

// wireStream adapts [StreamDecoder] to [backends.WireStream].
type wireStream struct{ d *StreamDecoder }

func (w wireStream) Event(name, data []byte) (*flexwayv1.ChatCompletionChunk, bool, error) {
	ch, err := w.d.Feed(name, data)
	if err == io.EOF {
		return nil, true, nil
	}
	return ch, err == nil && w.d.Done(), err
}

func (w wireStream) End() (*flexwayv1.ChatCompletionChunk, error) { return nil, w.d.End() }
