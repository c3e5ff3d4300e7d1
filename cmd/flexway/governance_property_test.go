package main

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	flexwayv1 "github.com/flexway/flexway/gen/flexway/v1"
)

// TestGovernanceListModelsProperty: for every key of generated
// configurations (random policies over three tenants, two agents each,
// four models and an alias; random listeners, operations, models, lists
// and modes), over HTTP and gRPC, a model is listed by /v1/models
// (ListModels) if and only if a minimal chat call to it, on the same
// listener, is not refused with model_not_allowed (real gateway, fake
// upstream).
func TestGovernanceListModelsProperty(t *testing.T) {
	universe := []string{"al", "m0", "m1", "m2", "m3"}
	var checked, refused int
	for seed := range uint64(8) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 16))
			up := newUpstream(t, usageUpstream(3, 2))
			c := baseTestConfig(up.URL)
			c.AuditPath = ""
			c.Backends[0].Models, c.Backends[0].DefaultModel = []string{"m0", "m1", "m2", "m3"}, "m0"
			type caller struct{ key, tenant, agent string }
			var callers []caller
			c.Keys = nil
			for ti := range 3 {
				tenant := fmt.Sprint("t", ti)
				tt := testTenant{Name: tenant}
				for ai, agent := range []string{"", "a0", "a1"} {
					env := fmt.Sprintf("FLEXWAY_TEST_KEY_P%d%d", ti, ai)
					key := fmt.Sprintf("sk-prop-%d-%d", ti, ai)
					t.Setenv(env, key)
					c.Keys = append(c.Keys, testKey{Name: fmt.Sprintf("k%d%d", ti, ai), Env: env, Tenant: tenant, Agent: agent})
					callers = append(callers, caller{key, tenant, agent})
					if agent != "" {
						tt.Agents = append(tt.Agents, testAgent{Name: agent})
					}
				}
				c.Tenants = append(c.Tenants, tt)
			}
			var b strings.Builder
			b.WriteString("  aliases:\n    al:\n      strategy: failover\n      targets:\n        - {backend: main, model: m1}\n  policies:\n")
			pick := func(vs ...string) string { return vs[r.IntN(len(vs))] }
			for i := range 6 + r.IntN(9) {
				var match []string
				for _, kv := range [][2]string{
					{"listener", pick("", "", "http", "grpc")},
					{"operation", pick("", "", "", "ai.chatCompletions", "ai.embeddings", "ai.listModels")},
					{"model", pick("", "", "", "al", "m0", "m1", "m2", "m3", "nope")},
					{"tenant", pick("", "t0", "t1", "t2")},
				} {
					if kv[1] != "" {
						match = append(match, kv[0]+": "+kv[1])
					}
				}
				if strings.Contains(strings.Join(match, ","), "tenant") && r.IntN(2) == 0 {
					match = append(match, "agent: "+pick("a0", "a1"))
				}
				var models []string
				switch r.IntN(5) {
				case 0:
					models = []string{`"*"`}
				case 1:
				default:
					for _, m := range append(universe, "nope") {
						if r.IntN(3) == 0 {
							models = append(models, m)
						}
					}
				}
				fmt.Fprintf(&b, "    - name: p%d\n", i)
				if len(match) > 0 {
					fmt.Fprintf(&b, "      match: {%s}\n", strings.Join(match, ", "))
				}
				fmt.Fprintf(&b, "      governance: {models: [%s], mode: %s}\n", strings.Join(models, ", "), pick("enforce", "enforce", "shadow"))
			}
			c.AI = b.String()
			g := startGateway(t, c.yaml())
			conn := grpcConn(t, g)
			chat := flexwayv1.NewChatServiceClient(conn)
			for _, cl := range callers {
				for _, listener := range []string{"http", "grpc"} {
					var listed []string
					if listener == "http" {
						listed = httpModels(t, g, cl.key)
					} else {
						listed = grpcModels(t, g, cl.key)
					}
					for _, m := range universe {
						var notAllowed bool
						if listener == "http" {
							code, body := chatAs(t, g, cl.key, m)
							notAllowed = code == 403 && openaiError(body)["code"] == "model_not_allowed"
							if !notAllowed && code != 200 {
								t.Fatalf("%s/%s %s over http: %d %v", cl.tenant, cl.agent, m, code, body)
							}
						} else {
							_, err := chat.CreateChatCompletion(withKey(t, cl.key), &flexwayv1.CreateChatCompletionRequest{Model: m, Messages: []*flexwayv1.ChatMessage{userMessage("hi")}})
							_, reason, _, _ := grpcReason(err)
							notAllowed = reason == "model_not_allowed"
							if !notAllowed && err != nil {
								t.Fatalf("%s/%s %s over grpc: %v", cl.tenant, cl.agent, m, err)
							}
						}
						isListed := false
						for _, l := range listed {
							isListed = isListed || l == m
						}
						if isListed == notAllowed {
							t.Errorf("%s/%s over %s: %s listed %v but refused with model_not_allowed %v\n%s", cl.tenant, cl.agent, listener, m, isListed, notAllowed, c.AI)
						}
						checked++
						if notAllowed {
							refused++
						}
					}
				}
			}
		})
	}
	// The property means something only if both sides were exercised.
	t.Logf("%d (key, listener, model) checked, %d refused", checked, refused)
	if refused < checked/10 || refused > checked*9/10 {
		t.Errorf("%d of %d refused: the generated configurations exercise one side only", refused, checked)
	}
}
