package openaiwire

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
)

// MaxModelBytes is the longest `model` a request may name, in bytes of
// UTF-8. Model ids are short (OpenAI's longest is under 64 bytes); the
// bound keeps a caller's model out of the audit line and the logs at any
// length.
const MaxModelBytes = 256

// roles are the message roles of OpenAI's chat completions API
// (`messages[].role`), as OpenAI spells them; any other role, a case
// variant included, is refused, as OpenAI refuses it.
var roles = []string{"system", "developer", "user", "assistant", "tool", "function"}

// CheckChatCompletionRequest applies to a chat request the rules that
// every way in shares, whatever built the message (the HTTP parser, a gRPC
// caller): the rules protovalidate cannot express, beside the proto's
// buf.validate constraints, which the gRPC chain checks on every call.
//
//   - model is 1 to [MaxModelBytes] bytes of valid UTF-8 with no control
//     character (unicode.IsControl: C0, DEL, C1);
//   - every message's role is one of OpenAI's: system, developer, user,
//     assistant, tool, function (a case variant is refused, as OpenAI
//     refuses it);
//   - no extra_fields key, at any level (request, stream_options, message,
//     content part, image_url), names a field that the level's message
//     models, in any case (Unicode simple folding, as encoding/json
//     matches keys: `N`, `MAX_TOKENS`, `ſtream`): such a key would reach
//     the upstream beside, or instead of, the typed field Flexway checks
//     and meters. The one exception is the exact name of a field with
//     presence holding exactly `null`, which is how the parser keeps a
//     typed field the client gave as JSON null (see the package doc);
//   - no extra_fields key of the request, a message or a content part
//     names an image-bearing field (one whose name holds "image" in any
//     case: Ollama's message `images`, llama.cpp's `image_data`, an
//     `image_url` outside an image_url part, a part's `image`): images
//     reach a backend only as image_url parts, which pass the vision
//     checks and are reserved for.
//
// Modelled names are the messages' own field names, read from their
// descriptors (a oneof counts by its name: ChatMessage's `content`), so
// that a field added to the proto is covered at once.
//
// It returns nil, or a [*faults.Error] of reason [faults.InvalidRequest]
// whose Param names the first offending field in the proto's notation, as
// protovalidate names fields: `model`, `messages[1].role`,
// `extra_fields.n`, `messages[0].parts.parts[2].extra_fields.IMAGE_URL`,
// `stream_options.extra_fields.include_usage`. Of several offending keys
// of one map, the smallest is named, so that the answer is stable.
// [ParseChatCompletionRequest] applies the same rules and names the field
// in OpenAI's notation instead (`N`, `messages[0].content[2].IMAGE_URL`).
func CheckChatCompletionRequest(req *flexwayv1.CreateChatCompletionRequest) error {
	if err := checkChat(req, protoNotation); err != nil {
		return clientError(err)
	}
	return nil
}

// CheckEmbeddingRequest is [CheckChatCompletionRequest] for an embeddings
// request: model as there, and no extra_fields key naming one of the
// request's fields (model, input, encoding_format, dimensions, user) in
// any case, a null under a field's exact name aside. Param is in the
// proto's notation (`model`, `extra_fields.Input`).
func CheckEmbeddingRequest(req *flexwayv1.CreateEmbeddingRequest) error {
	if err := checkEmbedding(req, protoNotation); err != nil {
		return clientError(err)
	}
	return nil
}

// notation says how a rule names the field it refuses: as the proto
// names it (gRPC callers) or as the OpenAI JSON does (HTTP callers).
type notation bool

const (
	openAINotation notation = false
	protoNotation  notation = true
)

// part is the path of content part j of message i.
func (n notation) part(i, j int) string {
	if n == protoNotation {
		return fmt.Sprintf("messages[%d].parts.parts[%d]", i, j)
	}
	return fmt.Sprintf("messages[%d].content[%d]", i, j)
}

// extra is the path of the extra field key of the object at prefix
// (empty for the request).
func (n notation) extra(prefix, key string) string {
	if n == protoNotation {
		key = "extra_fields." + key
	}
	if prefix == "" {
		return key
	}
	return prefix + "." + key
}

// level is what one object's extra fields are checked against.
type level struct {
	// fields are the names the object's message models; nullable is true
	// for a field with presence, which the parser keeps as "null" in
	// extra_fields when the client gives it as JSON null.
	fields []modelled
	// images refuses image-bearing keys.
	images bool
	// name is the message's name, for errors.
	name string
}

type modelled struct {
	name     string
	nullable bool
}

// levelOf reads the modelled names of m's message from its descriptor.
func levelOf(m proto.Message, images bool) level {
	md := m.ProtoReflect().Descriptor()
	l := level{images: images, name: string(md.Name())}
	seen := map[string]bool{}
	fs := md.Fields()
	for i := 0; i < fs.Len(); i++ {
		f := fs.Get(i)
		if f.Name() == "extra_fields" {
			continue
		}
		f1 := modelled{name: string(f.Name()), nullable: f.HasPresence()}
		if o := f.ContainingOneof(); o != nil && !o.IsSynthetic() {
			// A oneof is one JSON member under the oneof's name: content.
			f1 = modelled{name: string(o.Name())}
		}
		if !seen[f1.name] {
			seen[f1.name] = true
			l.fields = append(l.fields, f1)
		}
	}
	return l
}

var (
	requestLevel       = levelOf((*flexwayv1.CreateChatCompletionRequest)(nil), true)
	streamOptionsLevel = levelOf((*flexwayv1.StreamOptions)(nil), false)
	messageLevel       = levelOf((*flexwayv1.ChatMessage)(nil), true)
	partLevel          = levelOf((*flexwayv1.ContentPart)(nil), true)
	imageURLLevel      = levelOf((*flexwayv1.ImageUrl)(nil), false)
	embeddingLevel     = levelOf((*flexwayv1.CreateEmbeddingRequest)(nil), false)
)

// refusal returns why key, holding the raw value, may not be carried at
// l, "" when it may.
func (l level) refusal(key, value string) string {
	for _, f := range l.fields {
		if !strings.EqualFold(key, f.name) {
			continue
		}
		if key != f.name {
			return fmt.Sprintf("unrecognized field %s: it differs from the field %q only in case; send %q once, under that name", quoteKey(key), f.name, f.name)
		}
		if f.nullable && value == "null" {
			return ""
		}
		return fmt.Sprintf("%q is a field of %s and cannot be carried in extra_fields; set the field itself", key, l.name)
	}
	if l.images && strings.Contains(strings.ToLower(key), "image") {
		return fmt.Sprintf("unsupported field %s: images are accepted only as content parts of type \"image_url\"", quoteKey(key))
	}
	return ""
}

// check returns the error for the first key of extra, in key order, that
// l refuses; prefix is the object's path.
func (l level) check(extra map[string]string, prefix string, n notation) error {
	bad, why := "", ""
	for k, v := range extra {
		if bad != "" && k >= bad {
			continue
		}
		if r := l.refusal(k, v); r != "" {
			bad, why = k, r
		}
	}
	if why == "" {
		return nil
	}
	return fieldErr(n.extra(prefix, shortKey(bad)), "%s", why)
}

// maxQuotedKey is how much of a refused key an error quotes, in bytes.
const maxQuotedKey = 128

// shortKey is key cut to maxQuotedKey bytes at a rune boundary, "…"
// marking the cut.
func shortKey(key string) string {
	if len(key) <= maxQuotedKey {
		return key
	}
	cut := maxQuotedKey
	for cut > 0 && !utf8.RuneStart(key[cut]) {
		cut--
	}
	return key[:cut] + "…"
}

func quoteKey(key string) string { return fmt.Sprintf("%q", shortKey(key)) }

// checkModel applies the model rule; the message never quotes the model.
func checkModel(model string) error {
	switch {
	case model == "":
		return fieldErr("model", "you must provide a model")
	case len(model) > MaxModelBytes:
		return fieldErr("model", "must be at most %d bytes, got %d", MaxModelBytes, len(model))
	case !utf8.ValidString(model):
		return fieldErr("model", "must be valid UTF-8")
	case strings.IndexFunc(model, unicode.IsControl) >= 0:
		return fieldErr("model", "must not contain control characters")
	}
	return nil
}

// checkRole applies the role rule to message i.
func checkRole(role string, i int) error {
	for _, r := range roles {
		if role == r {
			return nil
		}
	}
	return fieldErr(fmt.Sprintf("messages[%d].role", i), "invalid value %s: supported values are %s", quoteKey(role), strings.Join(roles, ", "))
}

// checkChat applies [CheckChatCompletionRequest]'s rules with params in
// notation n.
func checkChat(req *flexwayv1.CreateChatCompletionRequest, n notation) error {
	if err := checkModel(req.GetModel()); err != nil {
		return err
	}
	if err := requestLevel.check(req.GetExtraFields(), "", n); err != nil {
		return err
	}
	if err := streamOptionsLevel.check(req.GetStreamOptions().GetExtraFields(), "stream_options", n); err != nil {
		return err
	}
	for i, m := range req.GetMessages() {
		if err := checkRole(m.GetRole(), i); err != nil {
			return err
		}
		if err := messageLevel.check(m.GetExtraFields(), fmt.Sprintf("messages[%d]", i), n); err != nil {
			return err
		}
		for j, p := range m.GetParts().GetParts() {
			if len(p.GetExtraFields()) == 0 && len(p.GetImageUrl().GetExtraFields()) == 0 {
				continue
			}
			at := n.part(i, j)
			if err := partLevel.check(p.GetExtraFields(), at, n); err != nil {
				return err
			}
			if err := imageURLLevel.check(p.GetImageUrl().GetExtraFields(), at+".image_url", n); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkEmbedding applies [CheckEmbeddingRequest]'s rules with params in
// notation n.
func checkEmbedding(req *flexwayv1.CreateEmbeddingRequest, n notation) error {
	if err := checkModel(req.GetModel()); err != nil {
		return err
	}
	return embeddingLevel.check(req.GetExtraFields(), "", n)
}
