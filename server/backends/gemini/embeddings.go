package gemini

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/faults"
)

// EmbeddingsPath returns the request path of an embeddings call to model,
// relative to the backend's URL: "models/<model>:batchEmbedContents", per
// https://ai.google.dev/api/embeddings#method:-models.batchembedcontents.
func EmbeddingsPath(model string) string {
	return "models/" + model + ":batchEmbedContents"
}

type gEmbedRequest struct {
	Requests []gEmbedContent `json:"requests"`
}

type gEmbedContent struct {
	Model                string   `json:"model"`
	Content              gContent `json:"content"`
	OutputDimensionality *int32   `json:"outputDimensionality,omitempty"`
}

type gEmbedResponse struct {
	Embeddings []struct {
		Values []float64 `json:"values"`
	} `json:"embeddings"`
}

// EncodeEmbeddings returns the batchEmbedContents body for req sent to
// model: one EmbedContentRequest per input string, in order, each
// {"model": "models/<model>", "content": {"parts": [{"text": ...}]}},
// dimensions sent as outputDimensionality; and the sorted names of the
// fields it dropped (user, and any field Flexway does not model).
// encoding_format is applied by [DecodeEmbeddings].
//
// Errors: invalid_request naming `input` for token-id input, which Gemini
// does not take.
func EncodeEmbeddings(req *flexwayv1.CreateEmbeddingRequest, model string) ([]byte, []string, error) {
	var texts []string
	switch in := req.GetInput().GetInput().(type) {
	case *flexwayv1.EmbeddingInput_Text:
		texts = []string{in.Text}
	case *flexwayv1.EmbeddingInput_Texts:
		texts = in.Texts.GetValues()
	default:
		return nil, nil, invalid("input", "Gemini backends embed text only, not token ids")
	}
	out := gEmbedRequest{Requests: make([]gEmbedContent, len(texts))}
	for i, t := range texts {
		out.Requests[i] = gEmbedContent{
			Model:                "models/" + model,
			Content:              gContent{Parts: []gPart{{Text: t}}},
			OutputDimensionality: req.Dimensions,
		}
	}
	drops := map[string]bool{}
	if req.User != nil {
		drops["user"] = true
	}
	for k := range req.GetExtraFields() {
		drops[k] = true
	}
	body, err := json.Marshal(&out)
	if err != nil {
		return nil, nil, faults.Wrap(faults.Internal, err, "encoding the Gemini request")
	}
	return body, sortedKeys(drops), nil
}

// DecodeEmbeddings reads a batchEmbedContents answer
// ({"embeddings": [{"values": [...]}]}) as OpenAI's embeddings list for
// model, one embedding per input in order; as floats, or as base64 of
// little-endian float32 when encodingFormat is "base64". Gemini reports no
// token count: the answer has no usage, and the gateway estimates it (a
// usage of zeros would be taken as reported, and charge nothing).
//
// Errors: upstream_error (502) when the body does not read or holds
// another count of embeddings than inputs.
func DecodeEmbeddings(body []byte, model, encodingFormat string, inputs int) (*flexwayv1.CreateEmbeddingResponse, error) {
	var r gEmbedResponse
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, faults.Wrap(faults.UpstreamError, err, "the Gemini upstream sent an unreadable embeddings answer")
	}
	if len(r.Embeddings) != inputs {
		return nil, faults.New(faults.UpstreamError, "the Gemini upstream answered %d embeddings for %d inputs", len(r.Embeddings), inputs)
	}
	out := &flexwayv1.CreateEmbeddingResponse{Object: "list", Model: model}
	for i, e := range r.Embeddings {
		em := &flexwayv1.Embedding{Object: "embedding", Index: int32(i)}
		if encodingFormat == "base64" {
			raw := make([]byte, 4*len(e.Values))
			for j, v := range e.Values {
				binary.LittleEndian.PutUint32(raw[4*j:], math.Float32bits(float32(v)))
			}
			s := base64.StdEncoding.EncodeToString(raw)
			em.Base64 = &s
		} else {
			em.Floats = e.Values
		}
		out.Data = append(out.Data, em)
	}
	return out, nil
}
