package config

// BackendKind is how Flexway talks to a backend (ai.backends.*.kind).
type BackendKind string

// The backend kinds.
const (
	// KindOpenAI is an OpenAI-compatible HTTP API; the default.
	KindOpenAI BackendKind = "openai"
	// KindRelay is another Flexway, spoken to over its OpenAI-compatible
	// surface; it may receive the caller's identity under identity_headers.
	KindRelay BackendKind = "relay"
	// KindGRPC is the upstream of specialised-model gRPC services, proxied
	// as raw frames; it serves no chat, vision or embeddings.
	KindGRPC BackendKind = "grpc"
	// KindAnthropic speaks Anthropic's Messages API (POST {url}/v1/messages
	// and its Server-Sent Events,
	// https://docs.anthropic.com/en/api/messages), translated from and to
	// the OpenAI surface; it serves chat and vision, and alone reads
	// api_version, betas and max_output_tokens.
	KindAnthropic BackendKind = "anthropic"
	// KindGemini speaks Gemini's generateContent and
	// streamGenerateContent?alt=sse ({url}/models/{model}:...), and
	// batchEmbedContents for embeddings
	// (https://ai.google.dev/api/generate-content); it serves chat, vision
	// and embeddings.
	KindGemini BackendKind = "gemini"
	// KindA2A is an A2A agent, spoken to with JSON-RPC 2.0 message/send
	// and message/stream (SSE) at {url}
	// (https://a2a-protocol.org/latest/specification/); it serves chat
	// (and vision, for an agent that takes images), never embeddings.
	KindA2A BackendKind = "a2a"
)

// Translated reports whether k speaks a wire format other than OpenAI's,
// which Flexway translates: anthropic, gemini or a2a.
func (k BackendKind) Translated() bool {
	return k == KindAnthropic || k == KindGemini || k == KindA2A
}

// Inference reports whether k serves chat, vision or embeddings calls
// Flexway makes itself: every kind but grpc.
func (k BackendKind) Inference() bool { return k.Valid() && k != KindGRPC }

// Serves reports whether a backend of kind k can list capability c:
// openai, relay and gemini serve chat, vision and embeddings (gemini's
// through batchEmbedContents); anthropic and a2a chat and vision only
// (Anthropic has no embeddings endpoint, an A2A agent answers messages);
// grpc and an unknown kind none.
func (k BackendKind) Serves(c Capability) bool {
	switch k {
	case KindOpenAI, KindRelay, KindGemini:
		return c.Valid()
	case KindAnthropic, KindA2A:
		return c == CapabilityChat || c == CapabilityVision
	}
	return false
}

// Valid reports whether k is one of the kinds above.
func (k BackendKind) Valid() bool {
	switch k {
	case KindOpenAI, KindRelay, KindGRPC, KindAnthropic, KindGemini, KindA2A:
		return true
	}
	return false
}

// AuthType is how a backend authenticates Flexway (ai.backends.*.auth.type).
type AuthType string

// The auth types.
const (
	// AuthNone sends no credentials; the default.
	AuthNone AuthType = "none"
	// AuthBearer sends "Authorization: Bearer <secret>".
	AuthBearer AuthType = "bearer"
	// AuthHeader sends the secret as the value of the header named by Name.
	AuthHeader AuthType = "header"
	// AuthTokenFile sends "Authorization: Bearer <content of Path>", the
	// file re-read at every call (rotated service-account tokens).
	AuthTokenFile AuthType = "token_file"
)

// Valid reports whether t is one of the auth types above.
func (t AuthType) Valid() bool {
	switch t {
	case AuthNone, AuthBearer, AuthHeader, AuthTokenFile:
		return true
	}
	return false
}

// Capability is a kind of inference a backend serves.
type Capability string

// The capabilities.
const (
	// CapabilityChat is /v1/chat/completions with text only; the default.
	CapabilityChat Capability = "chat"
	// CapabilityVision is chat with image parts.
	CapabilityVision Capability = "vision"
	// CapabilityEmbeddings is /v1/embeddings.
	CapabilityEmbeddings Capability = "embeddings"
)

// allCapabilities are the capabilities above, in the order messages list
// them.
var allCapabilities = []Capability{CapabilityChat, CapabilityVision, CapabilityEmbeddings}

// Valid reports whether c is one of the capabilities above.
func (c Capability) Valid() bool {
	switch c {
	case CapabilityChat, CapabilityVision, CapabilityEmbeddings:
		return true
	}
	return false
}

// Metering says who meters a backend's calls (ai.backends.*.metering).
type Metering string

// The metering modes.
const (
	// MeteringLocal: this Flexway meters and bills the call; the default.
	MeteringLocal Metering = "local"
	// MeteringUpstream: the peer meters and bills; this Flexway still
	// enforces its local caps and labels the call metered_by="upstream".
	MeteringUpstream Metering = "upstream"
)

// Valid reports whether m is one of the metering modes above.
func (m Metering) Valid() bool {
	return m == MeteringLocal || m == MeteringUpstream
}

// StoreType is where the budget ledger lives (ai.budget.store.type).
type StoreType string

// The ledger stores.
const (
	// StoreEmbedded is a file on this machine; survives restarts; the default.
	StoreEmbedded StoreType = "embedded"
	// StoreRedis is a Redis server shared by replicas.
	StoreRedis StoreType = "redis"
)

// Valid reports whether t is one of the store types above.
func (t StoreType) Valid() bool {
	return t == StoreEmbedded || t == StoreRedis
}
