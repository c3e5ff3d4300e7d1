package routing_test

import (
	"errors"
	"testing"

	"github.com/flexway/flexway/server/call"
	"github.com/flexway/flexway/server/faults"
	"github.com/flexway/flexway/server/routing"
)

// TestRelayWithoutSensitiveHeaderIsExternal: a relay declared internal
// that cannot pass the sensitive flag on is external for routing, so a
// sensitive call is never planned to it; with the header, it serves.
func TestRelayWithoutSensitiveHeaderIsExternal(t *testing.T) {
	for _, tc := range []struct {
		name            string
		declared, relay bool
		sensitiveHeader string
		want            bool
	}{
		{"relay declared internal, no sensitive header", false, true, "", true},
		{"relay declared internal, with sensitive header", false, true, "X-Peer-Sensitive", false},
		{"relay declared external", true, true, "X-Peer-Sensitive", true},
		{"openai backend declared internal", false, false, "", false},
		{"openai backend declared external", true, false, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := routing.External(tc.declared, tc.relay, tc.sensitiveHeader); got != tc.want {
				t.Fatalf("External = %v, want %v", got, tc.want)
			}
			table := &routing.Table{Default: "peer", Backends: map[string]routing.Backend{
				"peer": {Capabilities: []call.Capability{call.Chat}, External: routing.External(tc.declared, tc.relay, tc.sensitiveHeader)},
			}}
			_, err := table.Plan(routing.Request{Capability: call.Chat, Sensitive: true})
			var fe *faults.Error
			refused := errors.As(err, &fe) && fe.Reason == faults.SensitiveNoInternalBackend
			if refused != tc.want {
				t.Fatalf("sensitive call: %v, want refused %v", err, tc.want)
			}
		})
	}
}
