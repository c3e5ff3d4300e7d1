package gateway

import (
	"testing"

	"github.com/flexway/flexway/server/config"
)

// The admin API's external is routing's: a relay that cannot pass the
// sensitive flag on is external whatever it declares (routing.External).
func TestBackendStatesExternalIsRoutings(t *testing.T) {
	internal := false
	cfg := &config.Config{}
	cfg.AI.Backends = map[string]config.Backend{
		"local":      {Kind: config.KindOpenAI, External: &internal},
		"cloud":      {Kind: config.KindOpenAI},
		"blind-peer": {Kind: config.KindRelay, External: &internal},
		"peer":       {Kind: config.KindRelay, External: &internal, IdentityHeaders: config.IdentityHeaders{Tenant: "Flexway-Tenant", Sensitive: "Flexway-Sensitive"}},
	}
	want := map[string]bool{"local": false, "cloud": true, "blind-peer": true, "peer": false}
	states := backendStates(cfg, routingTable(cfg), nil, nil)
	if len(states) != len(want) {
		t.Fatalf("%d states, want %d", len(states), len(want))
	}
	for _, st := range states {
		if st.GetExternal() != want[st.GetName()] {
			t.Errorf("%s: external %v, want %v", st.GetName(), st.GetExternal(), want[st.GetName()])
		}
	}
}
