package metering

import (
	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/money"
)

// Estimate is what a request may cost, in tokens, before it is served:
// the reservation.
type Estimate struct {
	// Input is an upper bound of the prompt no honest tokenizer exceeds
	// (see [InputBound]): for chat, one token per UTF-8 byte of every text
	// the model reads (roles, names, content, tool definitions and every
	// other carried field's JSON), plus [MessageOverheadTokens] per message,
	// plus the planned backends' prompt_overhead_tokens, plus
	// ReserveTokensPerImage per image; for embeddings, the token ids given,
	// or one token per text byte, plus [EmbeddingInputOverheadTokens] per
	// input.
	Input int64
	// Output is the per-choice output bound times n: the largest of
	// max_completion_tokens, max_tokens and the output-length fields other
	// servers read ([OutputLengthFields]); when the request sets neither
	// max_completion_tokens nor max_tokens, ReserveOutputTokens (or
	// MaxOutputTokens, which is then sent as max_tokens) joins the
	// largest. 0 for embeddings.
	Output int64
	// InputCharge is the input charged for a call served without reported
	// usage (a stream cut after output began): an estimate of the truth,
	// not a bound — text bytes / 3, rounded up, plus 4 tokens per message
	// and 3 (English averages about 4 bytes a token). For embeddings it
	// equals Input.
	InputCharge int64
	// OutputLimit is the output, in tokens per choice, the request itself
	// bounds: the largest of max_completion_tokens, max_tokens and the
	// output-length fields; 0 when it sets none. A stream whose relayed
	// output passes it is cut (the upstream ignored it).
	OutputLimit int64
}

// Template overheads of the input bound.
const (
	// MessageOverheadTokens is reserved per chat message for the tokens a
	// chat template wraps it in: ChatML's <|im_start|>, role line end,
	// <|im_end|> and newline are 4 or 5 tokens; Llama 3's
	// <|start_header_id|>, <|end_header_id|>, "\n\n" and <|eot_id|> are 4;
	// the role itself is counted as text. 8 leaves room for templates a
	// little more verbose (Gemma, Mistral).
	MessageOverheadTokens = 8
	// DefaultPromptOverheadTokens is the per-call template overhead of a
	// backend that declares no prompt_overhead_tokens: Llama 3.1's
	// <|begin_of_text|> (1), its default system header with the knowledge
	// and today's dates (about 22) and the assistant priming (4) make 27;
	// ChatML's priming is 3.
	DefaultPromptOverheadTokens = 32
	// EmbeddingInputOverheadTokens is reserved per embeddings input for the
	// tokens an encoder adds ([CLS] and [SEP], or BOS and EOS).
	EmbeddingInputOverheadTokens = 2
)

// TokensForBytes is the charged token estimate of n bytes of text: one
// token per 3 bytes, rounded up. English averages about 4 bytes a token,
// so the estimate errs on the side of charging more; it is no bound.
func TokensForBytes(n int64) int64 { return (n + 2) / 3 }

// InputBound is the most tokens n bytes of UTF-8 text can be: every
// byte-level BPE token (GPT, Llama 3, Qwen) and every SentencePiece token
// with byte fallback (Llama 2, Mistral, Gemma) stands for at least one
// byte, so no honest tokenizer makes more tokens than bytes.
func InputBound(n int64) int64 { return n }

// Estimate returns the estimate of a chat or embeddings request planned
// on backends it knows nothing of (each one's prompt overhead is
// [DefaultPromptOverheadTokens]), and false for any other message.
func (m *Meter) Estimate(req any) (Estimate, bool) { return m.EstimateFor(req, nil) }

// EstimateFor returns the estimate of a chat or embeddings request whose
// plan is backends (the first serves, the others are its fallbacks): the
// input bound counts the largest prompt overhead among them. Output-length
// fields whose value is no non-negative integer are left out here (see
// [OutputLengthFields]). It returns false for any other message.
func (m *Meter) EstimateFor(req any, backends []string) (Estimate, bool) {
	switch r := req.(type) {
	case *flexwayv1.CreateChatCompletionRequest:
		var textBytes, images int64
		for _, msg := range r.GetMessages() {
			textBytes += int64(len(msg.GetRole()) + len(msg.GetText()) + len(msg.GetName()))
			for _, p := range msg.GetParts().GetParts() {
				if p.GetType() == "image_url" {
					images++
					continue
				}
				textBytes += int64(len(p.GetText()))
			}
			textBytes += extraBytes(msg.GetExtraFields())
		}
		// Tools, response formats and other request fields the model reads.
		textBytes += extraBytes(r.GetExtraFields())
		msgs := int64(len(r.GetMessages()))
		imageTokens := images * m.cfg.ReserveTokensPerImage
		e := Estimate{
			Input:       money.AddSat(money.AddSat(InputBound(textBytes)+MessageOverheadTokens*msgs, m.promptOverhead(backends)), imageTokens),
			InputCharge: money.AddSat(TokensForBytes(textBytes)+4*msgs+3, imageTokens),
		}
		aliases, _ := OutputLengthFields(r.GetExtraFields())
		switch {
		case r.MaxCompletionTokens != nil || r.MaxTokens != nil:
			// Both go upstream, and an upstream may honour either: the
			// larger one is what the call may use.
			e.OutputLimit = max(r.GetMaxCompletionTokens(), r.GetMaxTokens(), aliases)
			e.Output = e.OutputLimit
		default:
			e.OutputLimit = aliases
			e.Output = max(m.cfg.ReserveOutputTokens, aliases)
			for _, b := range backends {
				// A backend that sends its own max_tokens may be asked
				// for that much.
				e.Output = max(e.Output, m.cfg.BackendOutputTokens[b])
			}
		}
		if n := int64(r.GetN()); n > 1 {
			e.Output = money.MulSat(e.Output, n)
		}
		return e, true
	case *flexwayv1.CreateEmbeddingRequest:
		in := r.GetInput()
		var e Estimate
		switch {
		case in.GetTokens() != nil:
			e.Input = int64(len(in.GetTokens().GetValues())) + EmbeddingInputOverheadTokens
		case in.GetTokenArrays() != nil:
			for _, a := range in.GetTokenArrays().GetValues() {
				e.Input += int64(len(a.GetValues())) + EmbeddingInputOverheadTokens
			}
		case in.GetTexts() != nil:
			for _, t := range in.GetTexts().GetValues() {
				e.Input += InputBound(int64(len(t))) + EmbeddingInputOverheadTokens
			}
		default:
			e.Input = InputBound(int64(len(in.GetText()))) + EmbeddingInputOverheadTokens
		}
		e.InputCharge = e.Input
		return e, true
	}
	return Estimate{}, false
}

// promptOverhead is the largest per-call template overhead among backends
// ([Config.PromptOverheadTokens]); [DefaultPromptOverheadTokens] for none.
func (m *Meter) promptOverhead(backends []string) int64 {
	if len(backends) == 0 {
		return DefaultPromptOverheadTokens
	}
	var most int64
	for _, b := range backends {
		v, ok := m.cfg.PromptOverheadTokens[b]
		if !ok {
			v = DefaultPromptOverheadTokens
		}
		most = max(most, v)
	}
	return most
}

// extraBytes sums the JSON of the non-null fields Flexway carries without
// reading them.
func extraBytes(extra map[string]string) int64 {
	var n int64
	for _, v := range extra {
		if v != "null" {
			n += int64(len(v))
		}
	}
	return n
}
