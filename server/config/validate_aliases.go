package config

import (
	"math"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"unicode"
)

// MaxAliasWeight bounds one target's weight, so that an alias's total
// weight never overflows.
const MaxAliasWeight = 1_000_000

// armName is what an arm name may hold: it is written in the
// Flexway-Route header, the audit line and metric labels.
var armName = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

// validateAliases checks ai.aliases and the backends' expected_latency.
//
// Errors: an empty alias name, or one with white space or a control
// character (it is written in Flexway-Route); an unknown strategy; a
// target (or below, above) naming no backend, a kind grpc backend, or no
// model; direct with other than one target; another strategy but
// classifier without targets; a duplicate target; a negative weight or one
// above [MaxAliasWeight]; canary or ab with every weight 0; an arm name
// that is not letters, digits, '.', '_' or '-', or is used twice; sticky
// on a strategy other than ab, an unknown sticky subject, header: without
// a name or with an invalid one; classifier without its classifier, below
// or above, or with targets; classifier, below or above on another
// strategy; a classifier url that is not http(s) (or carries user info or
// a credential in its query), a timeout not positive, a threshold outside
// [0, 1]; a negative expected_latency.
//
// Warnings: an alias named like a model a backend lists (requests for
// that model now resolve to the alias); an alias none of whose targets'
// backends lists chat or embeddings (it can serve no call); a weight on a
// strategy that reads none.
func (ai AI) validateAliases(col *collector) {
	listedBy := map[string]string{} // model → the first backend (by name) listing it
	for _, name := range sortedKeys(ai.Backends) {
		b := ai.Backends[name]
		if b.ExpectedLatency < 0 {
			col.errorf(keyPath("ai.backends", name)+".expected_latency", "must not be negative")
		}
		for _, m := range b.Models {
			if _, ok := listedBy[m]; !ok {
				listedBy[m] = name
			}
		}
	}
	for _, name := range sortedKeys(ai.Aliases) {
		path := keyPath("ai.aliases", name)
		a := ai.Aliases[name]
		switch {
		case name == "":
			col.errorf(path, "an alias needs a name: the model name clients request")
		case strings.IndexFunc(name, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0:
			col.errorf(path, "%q: an alias name holds no white space or control character (it is sent in Flexway-Route)", name)
		}
		if b, ok := listedBy[name]; ok {
			col.warnf(path, "backend %s lists a model named %q: requests for that model now resolve to this alias", b, name)
		}
		if !a.Strategy.Valid() {
			col.errorf(path+".strategy", "unknown strategy %q: want direct, failover, canary, ab, cost, latency, cost_latency or classifier", a.Strategy)
			continue
		}
		ai.checkAliasShape(col, path, a)
		if a.Strategy == StrategyAB {
			checkSticky(col, path+".sticky", a)
		} else if a.Sticky != "" {
			col.errorf(path+".sticky", "applies to strategy ab only; this alias is %s", a.Strategy)
		}
		if a.Strategy == StrategyClassifier {
			ai.checkClassifier(col, path, a)
		} else {
			ai.checkTargets(col, path, a)
		}
		if !ai.aliasServesSomething(a) {
			col.warnf(path, "no target's backend lists chat or embeddings: every call for this alias will be refused")
		}
	}
}

// checkAliasShape reports the keys of another strategy.
func (ai AI) checkAliasShape(col *collector, path string, a Alias) {
	if a.Strategy == StrategyClassifier {
		if len(a.Targets) > 0 {
			col.errorf(path+".targets", "strategy classifier routes to below and above, not targets")
		}
		return
	}
	if a.Classifier != nil {
		col.errorf(path+".classifier", "applies to strategy classifier only; this alias is %s", a.Strategy)
	}
	for _, r := range classifierRoutes(a) {
		if r.t != (ClassifierTarget{}) {
			col.errorf(path+"."+r.key, "applies to strategy classifier only; this alias is %s", a.Strategy)
		}
	}
}

// checkTargets checks the targets of every strategy but classifier.
func (ai AI) checkTargets(col *collector, path string, a Alias) {
	tpath := path + ".targets"
	switch {
	case len(a.Targets) == 0:
		col.errorf(tpath, "at least one target {backend, model} is required")
		return
	case a.Strategy == StrategyDirect && len(a.Targets) != 1:
		col.errorf(tpath, "strategy direct takes exactly one target, got %d: use failover for a list", len(a.Targets))
	}
	seen := map[AliasTarget]int{}
	arms := map[string]int{}
	var total int64
	for i, t := range a.Targets {
		ipath := indexPath(tpath, i)
		ai.checkAliasBackend(col, ipath, t.Backend, t.Model)
		key := AliasTarget{Backend: t.Backend, Model: t.Model}
		if first, dup := seen[key]; dup {
			col.errorf(ipath, "duplicate target %s/%s (first at targets[%d])", t.Backend, t.Model, first)
		} else {
			seen[key] = i
		}
		switch {
		case t.Weight < 0:
			col.errorf(ipath+".weight", "must not be negative")
		case t.Weight > MaxAliasWeight:
			col.errorf(ipath+".weight", "at most %d", MaxAliasWeight)
		case t.Weight > 0 && !a.Strategy.Weighted():
			col.warnf(ipath+".weight", "read by strategies canary and ab only; this alias is %s", a.Strategy)
		case t.Weight > 0:
			total += t.Weight
		}
		if t.Arm != "" {
			if !armName.MatchString(t.Arm) {
				col.errorf(ipath+".arm", "%q: an arm name is letters, digits, '.', '_' and '-'", t.Arm)
			}
			if first, dup := arms[t.Arm]; dup {
				col.errorf(ipath+".arm", "arm %q already names targets[%d]", t.Arm, first)
			} else {
				arms[t.Arm] = i
			}
		}
	}
	if a.Strategy.Weighted() && total == 0 {
		col.errorf(tpath, "every weight is 0 (the default): strategy %s sends no traffic; give a target a positive weight", a.Strategy)
	}
}

// checkAliasBackend checks that backend, at path.backend, exists and
// serves inference, and that model is set.
func (ai AI) checkAliasBackend(col *collector, path, backend, model string) {
	b, ok := ai.Backends[backend]
	switch {
	case backend == "":
		col.errorf(path+".backend", "required: the backend that serves the target")
	case !ok:
		col.errorf(path+".backend", "no backend %q in ai.backends", backend)
	case b.Kind == KindGRPC:
		col.errorf(path+".backend", "backend %q is kind grpc: it serves no chat, vision or embeddings", backend)
	}
	if model == "" {
		col.errorf(path+".model", "required: the model id sent upstream as is")
	}
}

// checkSticky checks the sticky subject of an ab alias.
func checkSticky(col *collector, path string, a Alias) {
	subject, header, ok := a.StickySubject()
	switch {
	case !ok:
		col.errorf(path, "unknown sticky subject %q: want tenant, agent, user or header:NAME", subject)
	case subject == "header" && header == "":
		col.errorf(path, "header: needs the header's name, e.g. header:X-Experiment-Id")
	case subject == "header" && !isToken(header):
		col.errorf(path, "%q is not a valid header name", header)
	}
}

// classifierRoutes are a's below and above, with their keys, in order.
func classifierRoutes(a Alias) [2]struct {
	key string
	t   ClassifierTarget
} {
	return [2]struct {
		key string
		t   ClassifierTarget
	}{{"below", a.Below}, {"above", a.Above}}
}

// checkClassifier checks a classifier alias's scorer and its two routes.
func (ai AI) checkClassifier(col *collector, path string, a Alias) {
	for _, r := range classifierRoutes(a) {
		if r.t == (ClassifierTarget{}) {
			col.errorf(path+"."+r.key, "required for strategy classifier: {backend, model}")
			continue
		}
		ai.checkAliasBackend(col, path+"."+r.key, r.t.Backend, r.t.Model)
	}
	cpath := path + ".classifier"
	c := a.Classifier
	if c == nil {
		col.errorf(cpath, "required for strategy classifier: {url, timeout, threshold}")
		return
	}
	checkScorerURL(col, cpath+".url", c.URL)
	if c.Timeout <= 0 {
		col.errorf(cpath+".timeout", "must be positive")
	}
	if math.IsNaN(c.Threshold) || c.Threshold < 0 || c.Threshold > 1 {
		col.errorf(cpath+".threshold", "%s is outside [0, 1]", strconv.FormatFloat(c.Threshold, 'g', -1, 64))
	}
}

// checkScorerURL checks a classifier url: http or https with a host, no
// user info, no query parameter named like a credential.
func checkScorerURL(col *collector, path, raw string) {
	if raw == "" {
		col.errorf(path, "required: the scorer's http or https URL")
		return
	}
	u, err := url.Parse(raw)
	checkHTTPURL(col, path, u, err, "", "")
}

// checkHTTPURL reports, at path, a URL (u and err from url.Parse) that is
// not http or https with a host, that carries user info, or a query
// parameter named like a credential; userHint and queryHint end those two
// messages (what to use instead). It returns false when the URL does not
// parse. Messages never repeat user info or a query.
func checkHTTPURL(col *collector, path string, u *url.URL, err error, userHint, queryHint string) bool {
	switch {
	case err != nil:
		col.errorf(path, "the value is not an http or https URL: it does not parse")
		return false
	case (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		col.errorf(path, "%q is not an http or https URL", shownURL(u))
	}
	if u.User != nil {
		col.errorf(path, "user info is not allowed in a URL%s", userHint)
	}
	if names := credentialParams(u.RawQuery); len(names) > 0 {
		col.errorf(path, "query parameter %s: credentials may not be written in a URL query%s", strings.Join(names, ", "), queryHint)
	}
	return true
}

// aliasServesSomething reports whether a target (or below, above) of a
// names a backend that lists chat or embeddings; a missing, unknown or
// grpc backend counts as serving, being reported apart.
func (ai AI) aliasServesSomething(a Alias) bool {
	names := []string{a.Below.Backend, a.Above.Backend}
	if a.Strategy != StrategyClassifier {
		names = names[:0]
		for _, t := range a.Targets {
			names = append(names, t.Backend)
		}
	}
	if len(names) == 0 {
		return true // no target: reported apart
	}
	for _, n := range names {
		b, ok := ai.Backends[n]
		if !ok || b.Kind == KindGRPC || b.Can(CapabilityChat) || b.Can(CapabilityEmbeddings) {
			return true
		}
	}
	return false
}
