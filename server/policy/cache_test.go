package policy

import (
	"testing"

	"github.com/flexway/flexway/server/config"
)

// TestSetCache: the most specific policy with a cache section decides,
// mode off included; a call no cache section selects has none; Cache
// allocates nothing.
func TestSetCache(t *testing.T) {
	exact := &config.PolicyCache{Mode: config.CacheExact}
	tab := MustCompile([]config.Policy{
		{Name: "faq", Match: config.PolicyMatch{Model: "fast"}, Cache: exact},
		{Name: "acme-off", Match: config.PolicyMatch{Tenant: "acme"}, Cache: &config.PolicyCache{Mode: config.CacheOff}},
		{Name: "globex-gov", Match: config.PolicyMatch{Tenant: "globex"}, Governance: gov([]string{"*"}, nil, false)},
	})
	for _, tc := range []struct {
		k    Key
		want string
	}{
		{Key{Tenant: "globex", Model: "fast"}, "faq"},
		{Key{Tenant: "acme", Model: "fast"}, "acme-off"},
		{Key{Tenant: "acme", Model: "slow"}, "acme-off"},
		{Key{Tenant: "globex", Model: "slow"}, ""},
	} {
		got := ""
		if p := tab.Resolve(tc.k).Cache(); p != nil {
			got = p.Name
		}
		if got != tc.want {
			t.Errorf("Resolve(%+v).Cache() = %q, want %q", tc.k, got, tc.want)
		}
	}
	if p := tab.Resolve(Key{Tenant: "globex", Model: "fast"}).Cache(); p.Cache() != exact {
		t.Errorf("faq's section = %+v, want the declared one", p.Cache())
	}
	s := tab.Resolve(Key{Tenant: "acme", Model: "fast"})
	if n := testing.AllocsPerRun(100, func() { s.Cache() }); n != 0 {
		t.Errorf("Cache allocates %v times", n)
	}
}
