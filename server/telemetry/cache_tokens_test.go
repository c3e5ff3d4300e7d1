package telemetry

import (
	"context"
	"testing"
)

// TestCacheTokenSeries: the cache tiers are a counter of their own, by
// tier, beside the input tokens that already count them; a call without
// cached tokens adds no tier series.
func TestCacheTokenSeries(t *testing.T) {
	m := newTest(t, Options{})
	ctx := context.Background()
	m.RecordCall(ctx, chatCall())
	_, series := scrape(t, m)
	only(t, series, "flexway_inference_cache_tokens_total")

	c := chatCall()
	c.CacheReadTokens, c.CacheWriteTokens = 1000, 150
	m.RecordCall(ctx, c)
	c.CacheWriteTokens = 0
	m.RecordCall(ctx, c)
	_, series = scrape(t, m)
	only(t, series, "flexway_inference_cache_tokens_total",
		`flexway_inference_cache_tokens_total{`+chatLabels+`,tier="cache_read"} 2000`,
		`flexway_inference_cache_tokens_total{`+chatLabels+`,tier="cache_write"} 150`,
	)
	want(t, series, `flexway_inference_tokens_total{agent="bot",backend="openai-eu",capability="chat",direction="input",feature="",metered_by="local",model="gpt-4o-mini",operation="ai.chatCompletions",outcome="ok",tenant="acme"} 3600`)
}
