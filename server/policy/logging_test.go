package policy

import (
	"testing"

	"github.com/flexway/flexway/server/config"
)

// TestMayLog: a call may be logged when an enabled policy without a
// model match selects it, or whenever an enabled policy names a model; a
// table without enabled logging never logs; MayLog allocates nothing.
func TestMayLog(t *testing.T) {
	on := &config.PromptLogging{Enabled: true, Path: "/tmp/p.jsonl"}
	tab := MustCompile([]config.Policy{
		{Name: "acme-log", Match: config.PolicyMatch{Tenant: "acme"}, PromptLogging: on},
		{Name: "acme-bot-off", Match: config.PolicyMatch{Tenant: "acme", Agent: "bot"}, PromptLogging: &config.PromptLogging{}},
		{Name: "globex", Match: config.PolicyMatch{Tenant: "globex"}, Governance: gov([]string{"*"}, nil, false)},
	})
	if !tab.Logs() {
		t.Error("Logs() = false with an enabled policy")
	}
	for _, tc := range []struct {
		k    Key
		want bool
	}{
		{Key{Tenant: "acme", Model: "m"}, true},
		// May: the agent's own policy turns it off, which the resolved
		// set says.
		{Key{Tenant: "acme", Agent: "bot"}, true},
		{Key{Tenant: "globex"}, false},
		{Key{Tenant: "initech"}, false},
	} {
		if got := tab.MayLog(tc.k); got != tc.want {
			t.Errorf("MayLog(%+v) = %v, want %v", tc.k, got, tc.want)
		}
	}
	if l := tab.Resolve(Key{Tenant: "acme", Agent: "bot"}).Logging(); l == nil || l.Enabled || l.Policy != "acme-bot-off" {
		t.Errorf("acme/bot's logging = %+v, want acme-bot-off's, disabled", l)
	}
	byModel := MustCompile([]config.Policy{{Name: "m-log", Match: config.PolicyMatch{Model: "m"}, PromptLogging: on}})
	if !byModel.MayLog(Key{Tenant: "anyone"}) {
		t.Error("a policy matched on a model: MayLog = false before the model is known")
	}
	off := MustCompile([]config.Policy{{Name: "off", PromptLogging: &config.PromptLogging{}}})
	if off.Logs() || off.MayLog(Key{Tenant: "acme"}) {
		t.Error("a disabled prompt_logging logs")
	}
	k := Key{Listener: "http", Operation: "ai.chatCompletions", Tenant: "initech"}
	if n := testing.AllocsPerRun(100, func() { tab.MayLog(k) }); n != 0 {
		t.Errorf("MayLog allocates %v times", n)
	}
}
