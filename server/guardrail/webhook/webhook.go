// Package webhook is the guardrails' webhook rule (issue 17): the texts of
// a call, with their role and location, the request's tools and the call's
// metadata are POSTed to an operator's service, whose answer allows the
// call, denies it with a reason, or replaces some texts (a redaction). It
// is pure of configuration: a [Client] is built from plain values.
//
// # The contract (public: operators' services implement it)
//
// Request, POST to the rule's url, Content-Type application/json:
//
//	{
//	  "phase": "prompt" | "response",
//	  "texts": [{"role": "user", "location": "messages[1].content", "text": "…"}, …],
//	  "tools": <the request's tools array as the caller sent it, or null>,
//	  "metadata": {"tenant": "…", "agent": "…", "policy": "…",
//	               "operation": "ai.chatCompletions", "phase": "prompt",
//	               "request_id": "…"}
//	}
//
// role is the OpenAI message role (system, user, assistant, tool; "" for
// an embeddings input); location names where the text is, in the caller's
// request (prompt) or the answer (response), as the caller of [Client.Check]
// writes it (e.g. messages[2].content[0].text,
// messages[3].tool_calls[0].function.arguments, input[1],
// choices[0].message.content). Never sent: the API key, any header of the
// caller, the upstream's credentials.
//
// Answer, a 2xx with a JSON body of at most [MaxAnswerBytes]:
//
//	{"action": "allow"}
//	{"action": "deny", "reason": "…"}
//	{"action": "replace", "texts": [{"location": "…", "text": "…"}, …]}
//
// replace is a redaction: each listed location's text is replaced by the
// given one (a location that was not sent, or listed twice, makes the
// answer garbage). Anything else — another status (redirects are not
// followed), a body that is not that JSON or is longer, no answer within
// the timeout — is an error, and the call gets the rule's on_error verdict
// (deny or allow).
//
// A sensitive call's text never goes to an external webhook (one not
// declared `external: false`): [Client.Check] then sends nothing and
// returns the on_error verdict with [ErrSensitive].
//
// Nothing is logged here; errors name the webhook's URL without its user
// info and query, and never a text.
package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"
	"unicode/utf8"

	"github.com/flexway/flexway/server/guardrail"
)

// MaxAnswerBytes bounds the webhook's answer body read, in bytes (1 MiB):
// a longer answer is garbage.
const MaxAnswerBytes = 1 << 20

// MaxReasonBytes bounds a deny's reason kept from the answer, in bytes;
// a longer one is cut on a rune boundary.
const MaxReasonBytes = 256

// DefaultTimeout bounds an exchange when [Client.Timeout] is not set.
const DefaultTimeout = time.Second

// Action is a [Verdict]'s decision.
type Action uint8

// The actions.
const (
	// Allow lets the call go on unchanged.
	Allow Action = iota + 1
	// Deny refuses it (403 guardrail_violation).
	Deny
	// Replace substitutes [Verdict.Texts] for the texts at their locations.
	Replace
)

// String is the action's name in the contract: allow, deny or replace.
func (a Action) String() string {
	switch a {
	case Allow:
		return "allow"
	case Deny:
		return "deny"
	case Replace:
		return "replace"
	}
	return "unknown"
}

// Errors of [Client.Check], wrapped; each comes with the on_error verdict.
var (
	// ErrSensitive: a sensitive call and an external webhook; nothing was
	// sent.
	ErrSensitive = errors.New("sensitive call: text not sent to an external webhook")
	// ErrTimeout: no whole answer within the timeout.
	ErrTimeout = errors.New("webhook timed out")
	// ErrUnreachable: the request could not be sent (or the caller's
	// context ended).
	ErrUnreachable = errors.New("webhook unreachable")
	// ErrStatus: the webhook answered a status other than 2xx.
	ErrStatus = errors.New("webhook answered an error status")
	// ErrGarbage: the answer is not the contract's JSON within
	// [MaxAnswerBytes].
	ErrGarbage = errors.New("webhook answer is not a verdict")
)

// Client calls one webhook rule's service. Its fields are set once; it is
// safe for concurrent use.
type Client struct {
	// URL is the http or https URL the request is POSTed to.
	URL string
	// Timeout bounds the whole exchange, connection and answer body
	// included; ≤ 0 is [DefaultTimeout].
	Timeout time.Duration
	// OnError is the verdict when the exchange fails or is not made:
	// Allow or Deny (anything else is Deny).
	OnError Action
	// External is set unless the rule says `external: false`: a
	// sensitive call's text is then never sent.
	External bool
	// HTTP is the client used; nil is one that follows no redirect (the
	// text goes to URL only). A client given should not follow redirects
	// either.
	HTTP *http.Client
}

// Text is one text of a call, as sent to the webhook.
type Text struct {
	// Role is the message's role (system, user, assistant, tool), "" when
	// the text is not a message's (an embeddings input).
	Role string `json:"role"`
	// Location says where the text is; a replace answer names it.
	Location string `json:"location"`
	// Text is the text, as the rule sees it (earlier redactions applied).
	Text string `json:"text"`
}

// Metadata is the call's, as sent to the webhook: configuration names and
// the request id, never a secret.
type Metadata struct {
	Tenant    string `json:"tenant"`
	Agent     string `json:"agent"`
	Policy    string `json:"policy"`
	Operation string `json:"operation"`
	Phase     string `json:"phase"`
	RequestID string `json:"request_id"`
}

// Request is what [Client.Check] asks about.
type Request struct {
	// Phase is the phase the rule runs in.
	Phase guardrail.Phase
	// Texts are the texts checked, in order.
	Texts []Text
	// Tools is the request's tools JSON as the caller sent it; nil or
	// empty is sent as null.
	Tools json.RawMessage
	// Metadata is the call's; its Phase is set from Phase.
	Metadata Metadata
	// Sensitive is the call's sensitivity (not sent): with an External
	// client nothing is.
	Sensitive bool
}

// Replacement is one text a replace verdict substitutes.
type Replacement struct {
	// Location is one of the request's Text.Location.
	Location string `json:"location"`
	// Text replaces the text there.
	Text string `json:"text"`
}

// Verdict is the webhook's decision.
type Verdict struct {
	// Action is Allow, Deny or Replace.
	Action Action
	// Reason is a deny's reason from the answer (at most
	// [MaxReasonBytes]), or, for the on_error verdict of a failed
	// exchange, "webhook error"; the operator's words, never a text.
	Reason string
	// Texts are a replace's substitutions, each at a location the request
	// sent, at most once each.
	Texts []Replacement
}

// Check asks the webhook about req. It returns the webhook's verdict and a
// nil error; or, when the exchange fails (see the package doc) or is not
// made (a sensitive call, an external webhook: [ErrSensitive]), the
// on_error verdict and an error wrapping one of the Err* values. Its time
// is bounded by the Timeout (and ctx). It logs nothing.
func (c *Client) Check(ctx context.Context, req Request) (Verdict, error) {
	if req.Sensitive && c.External {
		return c.onError(), ErrSensitive
	}
	v, err := c.exchange(ctx, req)
	if err != nil {
		return c.onError(), err
	}
	return v, nil
}

// onError is the verdict of a failed exchange.
func (c *Client) onError() Verdict {
	if c.OnError == Allow {
		return Verdict{Action: Allow}
	}
	return Verdict{Action: Deny, Reason: "webhook error"}
}

// wireRequest is the request body (the package doc's contract).
type wireRequest struct {
	Phase    string          `json:"phase"`
	Texts    []Text          `json:"texts"`
	Tools    json.RawMessage `json:"tools"`
	Metadata Metadata        `json:"metadata"`
}

// wireAnswer is the answer body.
type wireAnswer struct {
	Action string        `json:"action"`
	Reason string        `json:"reason"`
	Texts  []Replacement `json:"texts"`
}

func (c *Client) exchange(ctx context.Context, req Request) (Verdict, error) {
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	w := wireRequest{Phase: req.Phase.String(), Texts: req.Texts, Tools: req.Tools, Metadata: req.Metadata}
	w.Metadata.Phase = w.Phase
	if w.Texts == nil {
		w.Texts = []Text{}
	}
	if len(w.Tools) == 0 {
		w.Tools = json.RawMessage("null")
	}
	var body bytes.Buffer
	enc := json.NewEncoder(&body)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(w); err != nil {
		return Verdict{}, fmt.Errorf("%w: the request cannot be encoded (tools is not JSON)", ErrUnreachable)
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, c.URL, &body)
	if err != nil {
		return Verdict{}, fmt.Errorf("%w: %s: bad URL", ErrUnreachable, redactURL(c.URL))
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Accept", "application/json")
	client := c.HTTP
	if client == nil {
		client = noRedirect
	}
	resp, err := client.Do(hr)
	if err != nil {
		return Verdict{}, c.failed(ctx, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10)) // keep the connection if small
		return Verdict{}, fmt.Errorf("%w: %s answered %d", ErrStatus, redactURL(c.URL), resp.StatusCode)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, MaxAnswerBytes+1))
	if err != nil {
		return Verdict{}, c.failed(ctx, err)
	}
	if len(data) > MaxAnswerBytes {
		return Verdict{}, fmt.Errorf("%w: %s answered more than %d bytes", ErrGarbage, redactURL(c.URL), MaxAnswerBytes)
	}
	v, why := parse(data, req.Texts)
	if why != "" {
		return Verdict{}, fmt.Errorf("%w: %s: %s", ErrGarbage, redactURL(c.URL), why)
	}
	return v, nil
}

// failed maps a failed send or read: a timeout once the deadline passed,
// else unreachable. The URL in err is not kept (its query may hold a
// token); only the kind of failure.
func (c *Client) failed(ctx context.Context, err error) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("%w: %s after %s", ErrTimeout, redactURL(c.URL), c.timeout())
	}
	var cause error = err
	if ue, ok := errors.AsType[*url.Error](err); ok {
		cause = ue.Err
	}
	return fmt.Errorf("%w: %s: %v", ErrUnreachable, redactURL(c.URL), cause)
}

func (c *Client) timeout() time.Duration {
	if c.Timeout <= 0 {
		return DefaultTimeout
	}
	return c.Timeout
}

// parse reads an answer; why says what is wrong with it, "" when it is a
// verdict.
func parse(data []byte, sent []Text) (Verdict, string) {
	var a wireAnswer
	d := json.NewDecoder(bytes.NewReader(data))
	if err := d.Decode(&a); err != nil {
		return Verdict{}, "not a JSON object"
	}
	if _, err := d.Token(); err != io.EOF {
		return Verdict{}, "more than one JSON value"
	}
	switch a.Action {
	case "allow":
		return Verdict{Action: Allow}, ""
	case "deny":
		return Verdict{Action: Deny, Reason: clip(a.Reason, MaxReasonBytes)}, ""
	case "replace":
		locs := make(map[string]bool, len(sent))
		for _, t := range sent {
			locs[t.Location] = true
		}
		for _, r := range a.Texts {
			if !locs[r.Location] {
				return Verdict{}, "replace names a location not sent or twice"
			}
			locs[r.Location] = false
		}
		return Verdict{Action: Replace, Texts: a.Texts}, ""
	}
	return Verdict{}, "action is not allow, deny or replace"
}

// clip cuts s to at most n bytes on a rune boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// redactURL is raw without user info, query and fragment.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path, RawPath: u.RawPath}).String()
}

// noRedirect is the client used when [Client.HTTP] is nil.
var noRedirect = &http.Client{
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}
