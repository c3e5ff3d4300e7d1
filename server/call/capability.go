package call

import flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"

// CapabilityOf returns what a request of the core's services needs, and
// false for any other message: [Embeddings] for an embeddings request; for
// a chat request [Vision] when any message carries an image part, else
// [Chat]. It walks the chat request's content parts: a call's interceptors
// read [State.Capability] instead, set once by [State.NoteRequest].
func CapabilityOf(req any) (Capability, bool) {
	switch r := req.(type) {
	case *flexwayv1.CreateChatCompletionRequest:
		for _, m := range r.GetMessages() {
			for _, p := range m.GetParts().GetParts() {
				if p.GetType() == "image_url" {
					return Vision, true
				}
			}
		}
		return Chat, true
	case *flexwayv1.CreateEmbeddingRequest:
		return Embeddings, true
	}
	return "", false
}

// NoteRequest records in s.Capability what req, the call's decoded
// request, needs ([CapabilityOf]), unless it is already recorded: the first
// interceptor that sees the request calls it (the audit, else the budget),
// before the service runs, so that the request's parts are walked once
// per call. A message of no inference service records nothing.
func (s *State) NoteRequest(req any) {
	if s.Capability != "" {
		return
	}
	if c, ok := CapabilityOf(req); ok {
		s.Capability = c
	}
}
