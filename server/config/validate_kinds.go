package config

import (
	"regexp"
	"strings"
)

// checkCapability reports capability c (at cpath) when the backend's kind
// cannot serve it; unknown and duplicate capabilities are reported apart.
func (b Backend) checkCapability(col *collector, cpath string, c Capability) {
	if !b.Kind.Inference() || b.Kind.Serves(c) {
		return
	}
	var served []string
	for _, s := range allCapabilities {
		if b.Kind.Serves(s) {
			served = append(served, string(s))
		}
	}
	col.errorf(cpath, "kind %s serves %s, not %s: %s", b.Kind, strings.Join(served, " and "), c, unservedWhy[b.Kind])
}

// unservedWhy says why a kind serves fewer capabilities than openai.
var unservedWhy = map[BackendKind]string{
	KindAnthropic: "Anthropic's Messages API has no embeddings endpoint",
	KindA2A:       "an A2A agent answers messages (message/send) and computes no embeddings",
}

// checkKindKeys checks the keys that belong to one kind only: api_version,
// betas and max_output_tokens (kind anthropic), and the price tiers a
// kind's upstream never reports. bpath is the backend's key path.
func (b Backend) checkKindKeys(col *collector, bpath string) {
	if b.Kind != KindAnthropic {
		notHere := "only a kind: anthropic backend %s; this one is kind %s: remove it"
		if b.APIVersion != "" {
			col.errorf(bpath+".api_version", notHere, "sends anthropic-version", b.Kind)
		}
		if b.Betas != nil {
			col.errorf(bpath+".betas", notHere, "sends anthropic-beta", b.Kind)
		}
		if b.MaxOutputTokens != 0 {
			col.errorf(bpath+".max_output_tokens", notHere+" (ai.budget.max_output_tokens bounds the calls of every kind)",
				"needs a max_tokens of its own", b.Kind)
		}
	} else {
		b.checkAnthropicKeys(col, bpath)
	}

	p, ppath := b.Price, bpath+".price"
	checkEUR(col, ppath+".per_call", p.PerCall)
	if p.CacheRead != nil {
		checkEUR(col, ppath+".cache_read", *p.CacheRead)
	}
	if p.CacheWrite != nil {
		checkEUR(col, ppath+".cache_write", *p.CacheWrite)
	}
	switch b.Kind {
	case KindGemini:
		if p.CacheWrite != nil {
			col.warnf(ppath+".cache_write", "never applied: kind gemini reports cached reads (cachedContentTokenCount) but no cache writes")
		}
	case KindA2A:
		for _, tier := range []struct {
			key string
			set bool
		}{{"cache_read", p.CacheRead != nil}, {"cache_write", p.CacheWrite != nil}} {
			if tier.set {
				col.warnf(ppath+"."+tier.key, "never applied: kind a2a reports no tokens (they are estimated, none of them cached); price it with per_call")
			}
		}
	}
}

// apiVersionDate is the shape of every anthropic-version Anthropic has
// published (https://docs.anthropic.com/en/api/versioning).
var apiVersionDate = regexp.MustCompile(`^[0-9]{4}-[0-9]{2}-[0-9]{2}$`)

func (b Backend) checkAnthropicKeys(col *collector, bpath string) {
	switch v := b.APIVersion; {
	case v == "":
		col.errorf(bpath+".api_version", "required for kind anthropic: the anthropic-version header, e.g. 2023-06-01 (the default when the key is absent)")
	case !isToken(v):
		col.errorf(bpath+".api_version", "%q is not a valid anthropic-version header value: want a version date such as 2023-06-01", v)
	case !apiVersionDate.MatchString(v):
		col.warnf(bpath+".api_version", "%q is not a version date (YYYY-MM-DD) as Anthropic's versions are: the Messages API answers 400 to an unknown anthropic-version", v)
	}
	seen := map[string]bool{}
	for i, beta := range b.Betas {
		path := indexPath(bpath+".betas", i)
		switch {
		case beta == "":
			col.errorf(path, "empty beta name")
		case !isToken(beta):
			col.errorf(path, "%q is not a valid anthropic-beta value: want one name such as interleaved-thinking-2025-05-14 (no space or comma; list each beta apart)", beta)
		case seen[beta]:
			col.errorf(path, "duplicate beta %q", beta)
		}
		seen[beta] = true
	}
	if b.MaxOutputTokens <= 0 {
		col.errorf(bpath+".max_output_tokens", "must be positive: the Messages API requires max_tokens (absent, it is 4096)")
	}
}
