// Package call holds the per-call state of one inference call: who calls
// (identity), how it must be handled (sensitivity, capability), and what
// happened (served backend, model, usage). The interceptors fill it, the
// services read and complete it, and the audit line is written from it.
package call

import (
	"context"
	"sync"
	"time"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
	"github.com/flexway/flexway/server/cache"
	"github.com/flexway/flexway/server/policy"
)

// Capability is what a call needs from a backend.
type Capability string

// The capabilities of ai.backends.*.capabilities.
const (
	Chat       Capability = "chat"
	Vision     Capability = "vision"
	Embeddings Capability = "embeddings"
	// GRPC is a specialised model's call, proxied.
	GRPC Capability = "grpc"
)

// State is the per-call state. The identity interceptor creates it; fields
// above the mutex are written before the service runs and are read-only
// after; fields below are written by the service through the setters and
// may be read concurrently (the stream relay and the audit writer).
type State struct {
	// RequestID identifies the call in logs and audit lines.
	RequestID string
	// Operation is the method option's name ("ai.chatCompletions") or the
	// full gRPC method.
	Operation string
	// Start is when the call entered the gateway.
	Start time.Time
	// Tenant and Agent are the caller's identity; Agent may be empty.
	Tenant, Agent string
	// KeyName is the api key's name (never the key).
	KeyName string
	// Relay is the name of the trusted relay that passed the identity, if
	// any.
	Relay string
	// Listener is where the call came in: "http" (the OpenAI front) or
	// "grpc" (the gRPC listener), for ai.policies' match.listener.
	Listener string
	// Policies are the ai.policies that apply to the call, most specific
	// first, resolved once (stage 3 of the pipeline) by the governance
	// interceptor from the listener, operation, requested model, tenant
	// and agent; the zero Set before, and for a call no policy selects.
	Policies policy.Set
	// WouldDeny is the refusal a shadow policy would have made of the
	// call (governance.mode shadow), nil when none would: the audit line's
	// would_deny. The first one found is kept (the model rule's before
	// the backend rule's).
	WouldDeny *policy.Denial
	// Sensitive is set when the call must stay on internal backends; it
	// only ever goes from false to true.
	Sensitive bool
	// Capability is what the call needs from a backend: set once, by the
	// first interceptor that sees the decoded request ([State.NoteRequest]),
	// or to [GRPC] for a proxied specialised model's call; empty before,
	// and for a call of no inference service.
	Capability Capability
	// Admitted, when set, is the result of the budget's check made before
	// the request body was read (see [WithAdmission]); nil when none was
	// made (a gRPC caller's call).
	Admitted *Admission
	// Plan is the ordered list of backends the service tries, the first
	// one the call is priced at; the budget interceptor (server/metering)
	// sets it for every chat and embeddings call before the service runs,
	// and the service refuses a call without one.
	Plan []string
	// Alias is the alias the requested model named (ai.aliases), "" for
	// none, and AliasTargets maps each backend of Plan taken from the
	// alias's route to its target: the model id sent to it as is, and its
	// arm. A backend absent from it maps the requested model by its own
	// models and default_model.
	Alias        string
	AliasTargets map[string]AliasTarget
	// Soft is set when the caller is at or past the soft mark of a cap.
	Soft bool
	// OutputLimit, when positive, is the output in tokens per choice the
	// request itself bounds (max_tokens, max_completion_tokens and the
	// output-length fields other servers read; set by the budget
	// interceptor). A stream whose relayed output passes it is cut: the
	// upstream ignored it.
	OutputLimit int64
	// Cache is the response cache's verdict on the call (issue 18), set
	// by its lookup: nil when the cache is off for the call.
	Cache *CacheVerdict

	mu         sync.Mutex
	outcome    Outcome
	guardrails []GuardrailVerdict
}

// CacheVerdict is the response cache's verdict on a call: its
// Flexway-Cache header and audit field, and what the service replays or
// stores.
type CacheVerdict struct {
	// Status is "hit", "miss" or "bypass" (looked up not, stored not:
	// Cache-Control, a sensitive call).
	Status string
	// Entry is the stored answer a hit replays, nil otherwise; Answer
	// is what a unary call replays and Chunks what a stream replays,
	// decoded from it in the caller's mode (this call's own copies).
	Entry  *cache.Entry
	Answer *flexwayv1.ChatCompletion
	Chunks []*flexwayv1.ChatCompletionChunk
	// Store: a miss's answer is to be stored, under Key, for TTL
	// (not with Cache-Control: no-store), when it is at most MaxBytes
	// (bytes, ai.cache.max_bytes/64: a stream's tee stops past it).
	Store    bool
	MaxBytes int64
	Key      cache.StoreKey
	TTL      time.Duration
	// StoreLength and ToolCalls store answers that end on length, and
	// answers that call tools (the policy's store_length and
	// cache_tool_calls).
	StoreLength, ToolCalls bool
	// Index and Vector, in semantic mode, are the semantic index's name
	// (partition and context key) and the embedding of the last user
	// message: a miss stores its answer's vector there.
	Index  cache.Key
	Vector []float32
	// Similarity is a semantic hit's cosine similarity, 0 otherwise.
	Similarity float32
	// Flight, on a miss that leads the fill of Key, is what the identical
	// calls that miss while it runs wait for ([cache.Flights]): the store
	// lands it with the stored entry, [CacheVerdict.End] abandons it.
	Flight *cache.Flight
}

// End ends the call's fill when the call failed before an answer was
// stored or passed ([cache.Flight.Abandon]): the calls waiting for it go
// upstream themselves, and the next miss of the key leads again. The budget interceptor calls it
// once the call has ended, whatever its end; nil-safe, and a no-op after
// the store landed the fill.
func (v *CacheVerdict) End() {
	if v != nil && v.Flight != nil {
		v.Flight.Abandon()
	}
}

// GuardrailVerdict is one guardrail rule's finding on a call, for the
// audit line's guardrails list ({policy, rule, phase, action}) and the
// flexway_guardrail_matches_total metric: metadata only, never the
// matched text or the entity's value.
type GuardrailVerdict struct {
	// Policy is the name of the policy that declares the rule.
	Policy string
	// Rule is the rule's type: pii, secrets, injection, banned, regex,
	// json_schema or webhook.
	Rule string
	// Phase is prompt or response.
	Phase string
	// Action is what was done: deny, redact or log; would_deny for a
	// rule of a shadow policy, which changes nothing.
	Action string
}

// AddGuardrail records a guardrail verdict; one per rule, phase and
// action is kept (a rule matching ten card numbers is one verdict).
func (s *State) AddGuardrail(v GuardrailVerdict) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, have := range s.guardrails {
		if have == v {
			return
		}
	}
	s.guardrails = append(s.guardrails, v)
}

// Guardrails returns the verdicts recorded, in the order they were first
// found; a copy.
func (s *State) Guardrails() []GuardrailVerdict {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]GuardrailVerdict(nil), s.guardrails...)
}

// Outcome is what the service recorded of the call.
type Outcome struct {
	// Backend is the name of the backend that served (or last failed).
	Backend string
	// ModelRequested is the model the caller asked for.
	ModelRequested string
	// ModelServed is the model the upstream reported, else the one sent.
	ModelServed string
	// InputTokens and OutputTokens are the usage in tokens. InputTokens
	// counts every input token, cached ones included.
	InputTokens, OutputTokens int64
	// CacheReadTokens and CacheWriteTokens, in tokens, say how many of
	// InputTokens the provider read from or wrote to its prompt cache (the
	// usage's prompt_tokens_details.cached_tokens and
	// cache_creation_input_tokens); priced at the backend's cache_read and
	// cache_write.
	CacheReadTokens, CacheWriteTokens int64
	// UsageEstimated is set when usage was estimated, not reported.
	UsageEstimated bool
	// Served is set when an upstream's answer reached the caller: a
	// unary response, or at least one streamed chunk. A call not served
	// is never charged.
	Served bool
	// Fallback is set when a fallback backend served the call (an
	// attempt after the plan's first one succeeded); never for a call no
	// backend served.
	Fallback bool
	// UsageReported is set when the upstream reported the usage above.
	UsageReported bool
	// OutputBytes counts the bytes of output relayed (content, refusal
	// and tool call text), for an estimate when no usage was reported.
	OutputBytes int64
	// OutputEvents counts the stream events relayed that carried output
	// for a choice (each is at least one token), summed over choices.
	OutputEvents int64
	// UsageOverReservation is set when the reported usage, in tokens, is
	// more than the call's reservation (the upstream did not honour the
	// output limit, or the call set none and used more than the default).
	UsageOverReservation bool
	// CostNanoEUR is the cost committed to the budget, in nano-euros.
	CostNanoEUR int64
	// CacheSavedTokens is, for a response cache hit, the input and
	// output tokens of the call that filled the entry, in tokens: what
	// the hit did not pay.
	CacheSavedTokens int64
	// Alias is the alias the call was routed by and Arm the arm of the
	// backend that served (or last failed); both "" for a backend not
	// taken from an alias's route.
	Alias, Arm string
}

// AliasTarget is what a backend of an alias's route serves: Model, the
// model id sent as is, and Arm, the target's arm name (else its index in
// the alias's targets).
type AliasTarget struct {
	Model, Arm string
}

// Route is "<alias>/<arm>", what the Flexway-Route header says of an
// outcome served through an alias; "" for one that was not.
func (o Outcome) Route() string {
	if o.Alias == "" {
		return ""
	}
	return o.Alias + "/" + o.Arm
}

// SetOutcome records the outcome; later calls replace it.
func (s *State) SetOutcome(o Outcome) {
	s.mu.Lock()
	s.outcome = o
	s.mu.Unlock()
}

// Outcome returns the recorded outcome.
func (s *State) Outcome() Outcome {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.outcome
}

type stateKey struct{}

// NewContext returns ctx carrying s.
func NewContext(ctx context.Context, s *State) context.Context {
	return context.WithValue(ctx, stateKey{}, s)
}

// FromContext returns the call's state, or nil when ctx carries none (a
// call that did not pass the identity interceptor).
func FromContext(ctx context.Context) *State {
	s, _ := ctx.Value(stateKey{}).(*State)
	return s
}
