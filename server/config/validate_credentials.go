package config

// validateCredentials checks the pool of the backend at bpath: only kinds
// openai, anthropic, gemini and relay take one, never together with auth;
// at least one key and at most 64, names non-empty and unique, each key's
// auth a credential (not none) with its fields, weights at least 1 under
// weighted (a weight is never "off": remove the key instead) and adding up
// to at most 10000 after division by their common divisor.
func (b Backend) validateCredentials(col *collector, bpath string) {
	c := b.Credentials
	if c == nil {
		return
	}
	path := bpath + ".credentials"
	switch b.Kind {
	case KindOpenAI, KindAnthropic, KindGemini, KindRelay:
	default:
		col.errorf(path, "kind %s takes no credential pool (only openai, anthropic, gemini and relay do): use auth", b.Kind)
		return
	}
	if c.authWritten || b.Auth != (Auth{Type: AuthNone}) {
		col.errorf(path, "auth and credentials are both set: a pool replaces auth, keep one of them")
	}
	if !c.Strategy.Valid() {
		col.errorf(path+".strategy", "unknown strategy %q: want round_robin or weighted", c.Strategy)
	}
	switch n := len(c.Keys); {
	case n == 0:
		col.errorf(path+".keys", "at least one key is required")
	case n > maxCredentialKeys:
		col.errorf(path+".keys", "%d keys, at most %d", n, maxCredentialKeys)
	}
	seen := map[string]int{}
	g, total := 0, 0
	for i, k := range c.Keys {
		kpath := indexPath(path+".keys", i)
		if k.Name == "" {
			col.errorf(kpath+".name", "required: the key's name shown in the admin API, logs and metrics")
		} else if j, dup := seen[k.Name]; dup {
			col.errorf(kpath+".name", "duplicate name %q (also keys[%d])", k.Name, j)
		} else {
			seen[k.Name] = i
		}
		if k.Auth.Type == AuthNone {
			col.errorf(kpath+".auth.type", "a pool's key needs a credential: bearer, header or token_file")
		} else {
			k.Auth.validate(col, kpath+".auth")
		}
		switch {
		case c.Strategy == StrategyWeighted && k.Weight < 1:
			col.errorf(kpath+".weight", "must be at least 1 under strategy weighted (to take a key out, remove it)")
		case c.Strategy == StrategyRoundRobin && k.Weight != 1:
			col.warnf(kpath+".weight", "ignored under strategy %s: every key gets the same share", c.Strategy)
		}
		if k.Weight > 0 {
			g = gcd(g, k.Weight)
		}
	}
	if c.Strategy == StrategyWeighted && g > 0 {
		for _, k := range c.Keys {
			total += max(k.Weight, 0) / g
		}
		if total > maxCredentialWheel {
			col.errorf(path+".keys", "the weights add up to %d after division by their common divisor %d: at most %d", total, g, maxCredentialWheel)
		}
	}
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
