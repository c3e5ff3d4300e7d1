package gemini

import (
	"net/url"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/backends"
	"github.com/flexway/flexway/server/faults"
)

// Wire is the `gemini` kind's [backends.Wire] and
// [backends.WireEmbedder]: chat calls posted to
// {url}/models/{model}:generateContent (streamGenerateContent?alt=sse for
// a stream) and embeddings to {url}/models/{model}:batchEmbedContents,
// translated by [Encode], [Decode], [Stream], [EncodeEmbeddings],
// [DecodeEmbeddings] and [DecodeError].
type Wire struct {
	// Options are the backend's translation settings.
	Options Options
}

var (
	_ backends.Wire         = Wire{}
	_ backends.WireEmbedder = Wire{}
)

// Chat implements [backends.Wire.Chat] with [Encode] and [Path], the model
// path-escaped.
func (w Wire) Chat(req *flexwayv1.CreateChatCompletionRequest, c backends.WireCall, stream bool) (backends.WireRequest, error) {
	body, dropped, err := Encode(req, w.Options)
	if err != nil {
		return backends.WireRequest{}, err
	}
	r := backends.WireRequest{Path: "models/" + url.PathEscape(c.Model) + ":generateContent", Body: body, Dropped: dropped}
	if stream {
		r.Path, r.Query = "models/"+url.PathEscape(c.Model)+":streamGenerateContent", "alt=sse"
	}
	return r, nil
}

// DecodeChat implements [backends.Wire.DecodeChat] with [Decode].
func (Wire) DecodeChat(body []byte, c backends.WireCall) (*flexwayv1.ChatCompletion, error) {
	return Decode(body, Call{Model: c.Model, Created: c.Created})
}

// NewChatStream implements [backends.Wire.NewChatStream] with [Stream].
func (Wire) NewChatStream(c backends.WireCall) backends.WireStream {
	return wireStream{NewStream(Call{Model: c.Model, Created: c.Created})}
}

// DecodeError implements [backends.Wire.DecodeError] with [DecodeError].
func (Wire) DecodeError(status int, retryAfter int64, body []byte) *faults.Error {
	return DecodeError(status, retryAfter, body)
}

// Embeddings implements [backends.WireEmbedder.Embeddings] with
// [EncodeEmbeddings].
func (Wire) Embeddings(req *flexwayv1.CreateEmbeddingRequest, c backends.WireCall) (backends.WireRequest, error) {
	body, dropped, err := EncodeEmbeddings(req, c.Model)
	if err != nil {
		return backends.WireRequest{}, err
	}
	return backends.WireRequest{Path: "models/" + url.PathEscape(c.Model) + ":batchEmbedContents", Body: body, Dropped: dropped}, nil
}

// DecodeEmbeddings implements [backends.WireEmbedder.DecodeEmbeddings]
// with [DecodeEmbeddings], one embedding per input of req.
func (Wire) DecodeEmbeddings(body []byte, req *flexwayv1.CreateEmbeddingRequest, c backends.WireCall) (*flexwayv1.CreateEmbeddingResponse, error) {
	inputs := 1
	if t, ok := req.GetInput().GetInput().(*flexwayv1.EmbeddingInput_Texts); ok {
		inputs = len(t.Texts.GetValues())
	}
	return DecodeEmbeddings(body, c.Model, req.GetEncodingFormat(), inputs)
}

// CheckChat implements [backends.Checker] with [Check].
func (Wire) CheckChat(req *flexwayv1.CreateChatCompletionRequest) error {
	if err := Check(req); err != nil {
		return err
	}
	return nil
}

// Check reports, cheaply, whether Gemini can express req: nil, or the
// *faults.Error of reason invalid_request [Encode] would return for
// logprobs or top_logprobs, which Gemini backends do not return. Deeper
// problems are Encode's alone.
func Check(req *flexwayv1.CreateChatCompletionRequest) *faults.Error {
	extra := req.GetExtraFields()
	if v, ok := extra["logprobs"]; ok && v != "null" && v != "false" {
		return invalid("logprobs", "Gemini backends do not return logprobs")
	}
	if v, ok := extra["top_logprobs"]; ok && v != "null" {
		return invalid("top_logprobs", "Gemini backends do not return logprobs")
	}
	return nil
}

// wireStream adapts [Stream] to [backends.WireStream]: Gemini's stream
// ends with the body, when [Stream.End] gives the last chunk.
type wireStream struct{ s *Stream }

func (w wireStream) Event(name, data []byte) (*flexwayv1.ChatCompletionChunk, bool, error) {
	ch, err := w.s.Feed(name, data)
	return ch, false, err
}

func (w wireStream) End() (*flexwayv1.ChatCompletionChunk, error) { return w.s.End() }
