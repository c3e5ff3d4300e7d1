package openaiwire

import (
	"bytes"
	"cmp"
	"math"
	"strconv"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/jsonstring"
)

// ParseEmbeddingRequest parses a client's `POST /v1/embeddings` body.
//
// model, input, encoding_format, dimensions and user are typed; every other
// member is kept raw in extra_fields. input takes its four OpenAI forms: a
// string, an array of strings, an array of token ids, an array of arrays of
// token ids.
//
// It fails with a [*faults.Error] of reason [faults.InvalidRequest] whose
// Param names the offending field: malformed JSON, invalid UTF-8 or a body
// that is not an object (Param empty); `model` missing or empty; `input`
// missing, null, an empty string, an empty array or of another type;
// `input[i]` an element whose type differs from the first element's, an
// empty string or a negative token id; `input[i][j]` a negative or
// non-integer token id in a token array (an empty token array is
// `input[i]`); `dimensions` not a positive integer; `encoding_format`
// neither "float" nor "base64"; a break of [CheckEmbeddingRequest]'s rules
// (`model` over [MaxModelBytes] or with a control character, a member
// naming a modelled field in another case, named as the client wrote it:
// `Input`). The size of input is not limited here.
func ParseEmbeddingRequest(data []byte) (*flexwayv1.CreateEmbeddingRequest, error) {
	return clientResult(parseEmbeddingRequest(data))
}

func parseEmbeddingRequest(data []byte) (*flexwayv1.CreateEmbeddingRequest, error) {
	d := decoder{data: data}
	req := &flexwayv1.CreateEmbeddingRequest{}
	err := d.request(&req.Model, &req.User, &req.ExtraFields, func(key []byte) (modelled bool, err error) {
		switch string(key) {
		case "input":
			req.Input, err = d.embeddingInput()
		case "encoding_format":
			req.EncodingFormat, err = nullable(&d, &req.ExtraFields, "encoding_format", d.encodingFormat)
		case "dimensions":
			req.Dimensions, err = nullable(&d, &req.ExtraFields, "dimensions", d.dimensions)
		default:
			return false, nil
		}
		return true, err
	})
	if err != nil {
		return nil, err
	}
	if req.Input == nil {
		return nil, fieldErr("input", "you must provide an input")
	}
	if err := checkEmbedding(req, openAINotation); err != nil {
		return nil, err
	}
	return req, nil
}

// encodingFormat reads an embeddings request's encoding_format: "float" or
// "base64".
func (d *decoder) encodingFormat() (*string, error) {
	s, err := d.str()
	if err != nil {
		return nil, err
	}
	if s != "float" && s != "base64" {
		return nil, fieldErr("", "must be \"float\" or \"base64\", got %q", s)
	}
	return &s, nil
}

// dimensions reads an embeddings request's dimensions: a positive int32.
func (d *decoder) dimensions() (*int32, error) {
	return d.int32In(1, math.MaxInt32, "a positive integer")
}

// embeddingInput parses an embeddings input at d.pos; the first element of
// an array decides its form.
func (d *decoder) embeddingInput() (*flexwayv1.EmbeddingInput, error) {
	switch d.peek() {
	case 'n':
		if err := d.literal("null"); err != nil {
			return nil, err
		}
		return nil, fieldErr("", "you must provide an input")
	case '"':
		s, err := d.str()
		if err != nil {
			return nil, err
		}
		if s == "" {
			return nil, fieldErr("", "must not be an empty string")
		}
		return &flexwayv1.EmbeddingInput{Input: &flexwayv1.EmbeddingInput_Text{Text: s}}, nil
	case '[':
	default:
		return nil, d.typeErr("a string or an array")
	}
	d.pos++
	if ok, err := d.element(true); err != nil {
		return nil, err
	} else if !ok {
		return nil, fieldErr("", "must not be an empty array")
	}
	switch c := d.peek(); {
	case c == '"':
		texts := &flexwayv1.Texts{}
		for i, ok := 0, true; ok; i++ {
			s, err := d.str()
			if err != nil {
				return nil, nestIndex(err, i)
			}
			if s == "" {
				return nil, fieldErr("["+strconv.Itoa(i)+"]", "must not be an empty string")
			}
			texts.Values = append(texts.Values, s)
			var err2 error
			if ok, err2 = d.element(false); err2 != nil {
				return nil, err2
			}
		}
		return &flexwayv1.EmbeddingInput{Input: &flexwayv1.EmbeddingInput_Texts{Texts: texts}}, nil
	case c == '[':
		arrays := &flexwayv1.TokenArrays{}
		for i, ok := 0, true; ok; i++ {
			t, err := d.tokens()
			if err != nil {
				return nil, nestIndex(err, i)
			}
			arrays.Values = append(arrays.Values, t)
			var err2 error
			if ok, err2 = d.element(false); err2 != nil {
				return nil, err2
			}
		}
		return &flexwayv1.EmbeddingInput{Input: &flexwayv1.EmbeddingInput_TokenArrays{TokenArrays: arrays}}, nil
	case c == '-' || '0' <= c && c <= '9':
		t, err := d.tokenList()
		if err != nil {
			return nil, err
		}
		return &flexwayv1.EmbeddingInput{Input: &flexwayv1.EmbeddingInput_Tokens{Tokens: t}}, nil
	}
	return nil, nestIndex(d.typeErr("a string, a token id or an array of token ids"), 0)
}

// tokens parses a non-empty array of token ids at d.pos.
func (d *decoder) tokens() (*flexwayv1.Tokens, error) {
	if err := d.openArray(); err != nil {
		return nil, err
	}
	if ok, err := d.element(true); err != nil {
		return nil, err
	} else if !ok {
		return nil, fieldErr("", "a token array must not be empty")
	}
	return d.tokenList()
}

// tokenList parses the token ids of an array whose '[' is consumed and
// whose first element is at d.pos.
func (d *decoder) tokenList() (*flexwayv1.Tokens, error) {
	t := &flexwayv1.Tokens{}
	for i, ok := 0, true; ok; i++ {
		v, err := d.int64()
		if err != nil {
			return nil, nestIndex(err, i)
		}
		if v < 0 {
			return nil, fieldErr("["+strconv.Itoa(i)+"]", "a token id must not be negative, got %d", v)
		}
		t.Values = append(t.Values, v)
		if ok, err = d.element(false); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// AppendEmbeddingRequest appends the JSON body of the upstream request for
// req to dst and returns the extended slice: model replaced by model (kept
// when model is empty), input in the form it was given, encoding_format,
// dimensions and user when set, then extra_fields sorted by key.
//
// It fails with a [*faults.Error] of reason [faults.InvalidRequest], and
// returns dst unchanged, when req is nil, when no model is left, when the
// input is unset, or when an extra_fields value is not one valid JSON value.
func AppendEmbeddingRequest(dst []byte, req *flexwayv1.CreateEmbeddingRequest, model string) ([]byte, error) {
	out, err := appendEmbeddingRequest(dst, req, model)
	if err != nil {
		return dst, clientError(err)
	}
	return out, nil
}

func appendEmbeddingRequest(dst []byte, req *flexwayv1.CreateEmbeddingRequest, model string) ([]byte, error) {
	if req == nil {
		return nil, fieldErr("", "no request")
	}
	o, err := openRequest(dst, cmp.Or(model, req.GetModel()))
	if err != nil {
		return nil, err
	}
	o.key("input")
	var ok bool
	if o.dst, ok = appendEmbeddingInput(o.dst, req.GetInput()); !ok {
		return nil, fieldErr("input", "you must provide an input")
	}
	if req.EncodingFormat != nil {
		o.str("encoding_format", *req.EncodingFormat)
	}
	if req.Dimensions != nil {
		o.int("dimensions", int64(*req.Dimensions))
	}
	return o.closeRequest(req.User, req.GetExtraFields(), func(k string) bool {
		switch k {
		case "input":
			return true
		case "encoding_format":
			return req.EncodingFormat != nil
		case "dimensions":
			return req.Dimensions != nil
		}
		return false
	})
}

// appendEmbeddingInput writes in as a request's input member holds it;
// false, and dst unchanged, when in is unset.
func appendEmbeddingInput(dst []byte, in *flexwayv1.EmbeddingInput) ([]byte, bool) {
	// The getters, not the oneof wrappers, read the values: a wrapper may be
	// a nil pointer.
	switch in.GetInput().(type) {
	case *flexwayv1.EmbeddingInput_Text:
		dst = jsonstring.Append(dst, in.GetText())
	case *flexwayv1.EmbeddingInput_Texts:
		dst = append(dst, '[')
		for i, s := range in.GetTexts().GetValues() {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = jsonstring.Append(dst, s)
		}
		dst = append(dst, ']')
	case *flexwayv1.EmbeddingInput_Tokens:
		dst = appendInts(dst, in.GetTokens().GetValues())
	case *flexwayv1.EmbeddingInput_TokenArrays:
		dst = append(dst, '[')
		for i, t := range in.GetTokenArrays().GetValues() {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendInts(dst, t.GetValues())
		}
		dst = append(dst, ']')
	default:
		return dst, false
	}
	return dst, true
}

// appendInts writes an array of integers.
func appendInts(dst []byte, vs []int64) []byte {
	dst = append(dst, '[')
	for i, v := range vs {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendInt(dst, v, 10)
	}
	return append(dst, ']')
}

// ParseEmbeddingResponse parses an upstream's embeddings response, an
// `object: "list"` of embeddings.
//
// object, data, model and usage (prompt_tokens, total_tokens) are typed;
// each embedding types object, index and embedding: an array of numbers
// fills floats, a string (encoding_format "base64") fills base64, passed
// untouched. Every other member is kept raw in extra_fields. It returns a
// plain error, wrapping the cause, on input that is not such a response.
func ParseEmbeddingResponse(data []byte) (*flexwayv1.CreateEmbeddingResponse, error) {
	r, err := parseEmbeddingResponse(data)
	if err != nil {
		return nil, upstreamError("embedding response", err)
	}
	return r, nil
}

func parseEmbeddingResponse(data []byte) (*flexwayv1.CreateEmbeddingResponse, error) {
	d := decoder{data: data}
	r := &flexwayv1.CreateEmbeddingResponse{}
	err := d.document("an embedding response", func(key []byte) (err error) {
		switch string(key) {
		case "object":
			r.Object, err = d.optStr()
		case "model":
			r.Model, err = d.optStr()
		case "data":
			r.Data = r.Data[:0]
			err = d.array(func(int) error {
				e, err := d.embedding()
				if err == nil {
					r.Data = append(r.Data, e)
				}
				return err
			})
		case "usage":
			r.Usage, err = nullable(&d, &r.ExtraFields, "usage", d.embeddingUsage)
		default:
			err = d.extra(&r.ExtraFields, key)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return r, nil
}

// embedding parses one embedding object at d.pos.
func (d *decoder) embedding() (*flexwayv1.Embedding, error) {
	e := &flexwayv1.Embedding{}
	err := d.members(func(key []byte) (err error) {
		switch string(key) {
		case "object":
			e.Object, err = d.optStr()
		case "index":
			e.Index, err = d.optInt32()
		case "embedding":
			err = d.vector(e)
		default:
			err = d.extra(&e.ExtraFields, key)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return e, nil
}

// vector reads an embedding's vector at d.pos into e: an array of numbers,
// a base64 string, or null (kept in e's extra_fields).
func (d *decoder) vector(e *flexwayv1.Embedding) error {
	e.Floats, e.Base64 = nil, nil
	switch d.peek() {
	case 'n':
		_, err := d.keptNull(&e.ExtraFields, "embedding")
		return err
	case '"':
		s, err := d.str()
		if err != nil {
			return err
		}
		e.Base64 = &s
		delete(e.ExtraFields, "embedding")
		return nil
	case '[':
	default:
		return d.typeErr("an array of numbers or a base64 string")
	}
	// Size the vector from the commas before the first ']': exact for an
	// array of numbers, and only a capacity hint for anything else.
	d.pos++
	size := 0
	if end := bytes.IndexByte(d.data[d.pos:], ']'); end >= 0 {
		size = bytes.Count(d.data[d.pos:d.pos+end], []byte{','}) + 1
	}
	floats := make([]float64, 0, size)
	for i := 0; ; i++ {
		ok, err := d.element(i == 0)
		if err != nil {
			return err
		}
		if !ok {
			break
		}
		f, err := d.float64()
		if err != nil {
			return nestIndex(err, i)
		}
		floats = append(floats, f)
	}
	e.Floats = floats
	delete(e.ExtraFields, "embedding")
	return nil
}

// embeddingUsage parses an embeddings usage object at d.pos.
func (d *decoder) embeddingUsage() (*flexwayv1.EmbeddingUsage, error) {
	u := &flexwayv1.EmbeddingUsage{}
	if err := d.usageMembers(&u.PromptTokens, nil, &u.TotalTokens, &u.ExtraFields); err != nil {
		return nil, err
	}
	return u, nil
}

// AppendEmbeddingResponse appends r as an embeddings response JSON object
// to dst and returns the extended slice: object, data and model always,
// usage when set, then extra_fields sorted by key. Each embedding writes
// object, index (even 0) and embedding, the base64 string when set and the
// float array otherwise, then its extra fields. Floats are written in the
// shortest form that reads back as the same float64.
func AppendEmbeddingResponse(dst []byte, r *flexwayv1.CreateEmbeddingResponse) []byte {
	if r == nil {
		r = &flexwayv1.CreateEmbeddingResponse{}
	}
	o := open(dst)
	o.str("object", r.GetObject())
	o.key("data")
	o.dst = append(o.dst, '[')
	for i, e := range r.GetData() {
		if i > 0 {
			o.dst = append(o.dst, ',')
		}
		o.dst = appendEmbedding(o.dst, e)
	}
	o.dst = append(o.dst, ']')
	o.str("model", r.GetModel())
	if u := r.GetUsage(); u != nil {
		o.key("usage")
		uo := open(o.dst)
		uo.int("prompt_tokens", u.GetPromptTokens())
		uo.int("total_tokens", u.GetTotalTokens())
		_ = uo.extras(u.GetExtraFields(), func(k string) bool {
			return k == "prompt_tokens" || k == "total_tokens"
		}, false)
		o.dst = uo.close()
	}
	_ = o.extras(r.GetExtraFields(), func(k string) bool {
		return k == "object" || k == "data" || k == "model" || k == "usage" && r.GetUsage() != nil
	}, false)
	return o.close()
}

// appendEmbedding writes one embedding object. An embedding with neither
// floats nor base64 but an "embedding" extra field (a null from upstream)
// lets the extra field write it.
func appendEmbedding(dst []byte, e *flexwayv1.Embedding) []byte {
	if e == nil {
		e = &flexwayv1.Embedding{}
	}
	o := open(dst)
	o.str("object", e.GetObject())
	o.int("index", int64(e.GetIndex()))
	_, extraVector := e.GetExtraFields()["embedding"]
	typedVector := e.Base64 != nil || len(e.Floats) > 0 || !extraVector
	switch {
	case e.Base64 != nil:
		o.str("embedding", *e.Base64)
	case typedVector:
		o.key("embedding")
		o.dst = append(o.dst, '[')
		for i, f := range e.Floats {
			if i > 0 {
				o.dst = append(o.dst, ',')
			}
			o.dst = appendFloat(o.dst, f)
		}
		o.dst = append(o.dst, ']')
	}
	_ = o.extras(e.GetExtraFields(), func(k string) bool {
		return k == "object" || k == "index" || k == "embedding" && typedVector
	}, false)
	return o.close()
}

// AppendModelList appends r as OpenAI's model list to dst and returns the
// extended slice: `{"object":"list","data":[{"id","object","created",
// "owned_by"}, ...]}`, every member always written, models in r's order. An
// empty object is written as "list" for the list and "model" for a model.
func AppendModelList(dst []byte, r *flexwayv1.ListModelsResponse) []byte {
	o := open(dst)
	o.str("object", cmp.Or(r.GetObject(), "list"))
	o.key("data")
	o.dst = append(o.dst, '[')
	for i, m := range r.GetData() {
		if i > 0 {
			o.dst = append(o.dst, ',')
		}
		o.dst = AppendModel(o.dst, m)
	}
	o.dst = append(o.dst, ']')
	return o.close()
}

// AppendModel appends OpenAI's `model` object (GET /v1/models/{model}):
// id, object "model", created (Unix seconds) and owned_by.
func AppendModel(dst []byte, m *flexwayv1.Model) []byte {
	mo := open(dst)
	mo.str("id", m.GetId())
	mo.str("object", cmp.Or(m.GetObject(), "model"))
	mo.int("created", m.GetCreated())
	mo.str("owned_by", m.GetOwnedBy())
	return mo.close()
}
