package gateway

import (
	"testing"

	"github.com/flexway/flexway/server/config"
	"github.com/flexway/flexway/server/ledger"
)

// TestPrices: the meter's prices are the configuration's in nano-euros,
// with cache_read and cache_write at input when unset.
func TestPrices(t *testing.T) {
	read, write := 0.30, 3.75
	cfg := &config.Config{}
	cfg.AI.Backends = map[string]config.Backend{
		"claude": {Price: config.Price{Input: 3, Output: 15, CacheRead: &read, CacheWrite: &write}},
		"gpt":    {Price: config.Price{Input: 2.5, Output: 10}},
		"agent":  {Price: config.Price{PerCall: 0.002}},
	}
	got := prices(cfg)
	want := map[string]ledger.Price{
		"claude": {Input: 3e9, Output: 15e9, CacheRead: 3e8, CacheWrite: 3.75e9},
		"gpt":    {Input: 2.5e9, Output: 10e9, CacheRead: 2.5e9, CacheWrite: 2.5e9},
		"agent":  {PerCall: 2_000_000},
	}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("%s: %+v, want %+v", name, got[name], w)
		}
	}
}
