package alias

import (
	"fmt"
	"math/bits"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/flexway/flexway/server/config"
)

// Target is one {backend, model} of a route.
type Target struct {
	// Backend is the ai.backends key of the backend that serves it.
	Backend string
	// Model is the model id sent upstream as is: the backend's models and
	// default_model mapping does not apply to an alias's target.
	Model string
	// Arm names the target in Flexway-Route, the audit line and metrics:
	// its arm in the configuration, else its index in targets ("0", "1",
	// ...); "below" or "above" for a classifier's routes.
	Arm string
}

// Route is where an alias sends a call. Targets are tried in order under
// the fallback rules (connection error, 5xx, timeout, open circuit, before
// any content byte; never a 4xx): the first serves, the rest are its
// failover, and this list replaces the first backend's own fallback list
// for the call. Model ids are sent upstream as is (no backend models
// mapping). A tenant's or agent's backend override replaces the whole
// route; soft cap, capability and sensitivity pin apply after it.
//
// Targets is shared by every call that resolves to it: callers must not
// modify it.
type Route struct {
	// Alias is the alias name the call requested.
	Alias string
	// Strategy is the alias's strategy.
	Strategy config.AliasStrategy
	// Arm is Targets[0].Arm, the arm of the target that serves unless it
	// fails over: Flexway-Route then names the serving target's own Arm.
	Arm string
	// Targets are the route's targets in order; never empty.
	Targets []Target
	// Classifier is set for strategy classifier only: Targets is then the
	// above route, and the caller runs [Classify] with it to decide
	// whether Classifier.Below serves instead.
	Classifier *ClassifierSpec
}

// ClassifierSpec is the scorer of a classifier alias
// (ai.aliases.<name>.classifier) and the route a low score takes.
type ClassifierSpec struct {
	// URL is the scorer's http(s) endpoint.
	URL string
	// External says the scorer is outside the organisation: a sensitive
	// call's text is never sent to it.
	External bool
	// Timeout bounds the whole scorer call, body read included.
	Timeout time.Duration
	// Threshold, in [0, 1]: a score under it sends the call to Below.
	Threshold float64
	// Below is the route of a call scored under Threshold (its Classifier
	// is nil).
	Below Route
}

// Subject is what an alias's choice may depend on: the caller's identity,
// the request's "user" field and headers (sticky subjects of ab), and a
// random source (canary).
type Subject struct {
	// Tenant and Agent are the caller's identity.
	Tenant, Agent string
	// User is the OpenAI request's "user" field.
	User string
	// Header returns the request header's value, "" when absent; nil means
	// no header is available.
	Header func(name string) string
	// Rand draws canary arms; nil uses math/rand/v2's global source.
	// Tests inject a seeded source.
	Rand Rand
}

// Rand is a source of uniform random numbers; *math/rand/v2.Rand is one.
type Rand interface {
	// Uint64N returns a uniform number in [0, n); n > 0.
	Uint64N(n uint64) uint64
}

// Table is the compiled ai.aliases, built once by [Compile] and read-only
// after: safe for concurrent use.
type Table struct {
	aliases map[string]*compiled
	names   []string
}

// sticky subjects, resolved at load.
const (
	stickyTenant = iota
	stickyAgent
	stickyUser
	stickyHeader
)

// compiled is one alias ready to resolve.
type compiled struct {
	route Route // every strategy but canary and ab

	// canary and ab: routes[i] serves r in [cum[i-1], cum[i]) of [0, total).
	routes []Route
	cum    []uint64
	total  uint64

	sticky int    // ab: stickyTenant...
	header string // ab, sticky header: the header name
}

// Compile builds the table of cfg.AI.Aliases. The targets of cost, latency
// and cost_latency are sorted here, once: cost by the backend's declared
// price, price.input + price.output in nano-euros per million tokens
// (per_call and cache tiers not counted); latency by the backend's
// expected_latency, unset last; cost_latency by price, then
// expected_latency (lexicographic). Ties keep the declared order.
//
// cfg must have passed [config.Config.Validate]; Compile still returns an
// error naming the alias for what would make resolution impossible: an
// unknown strategy, no target, a target's unknown backend, canary or ab
// with no positive weight, a classifier without its scorer, an
// unrecognised sticky subject.
func Compile(cfg *config.Config) (*Table, error) {
	t := &Table{aliases: make(map[string]*compiled, len(cfg.AI.Aliases))}
	for _, name := range sortedNames(cfg.AI.Aliases) {
		c, err := compile(name, cfg.AI.Aliases[name], cfg.AI.Backends)
		if err != nil {
			return nil, fmt.Errorf("alias: ai.aliases.%s: %w", name, err)
		}
		t.aliases[name] = c
		t.names = append(t.names, name)
	}
	return t, nil
}

func sortedNames(m map[string]config.Alias) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Names returns the alias names, sorted (for GET /v1/models). The slice is
// shared: callers must not modify it.
func (t *Table) Names() []string {
	if t == nil {
		return nil
	}
	return t.names
}

// Has reports whether name is an alias: one map lookup, for callers that
// would otherwise build a [Subject] for every call.
func (t *Table) Has(name string) bool {
	if t == nil {
		return false
	}
	_, ok := t.aliases[name]
	return ok
}

// Resolve returns the route of the alias name for subject s, and false
// when name is no alias (the call is routed as before). It allocates
// nothing and never touches the network; for strategy classifier it
// returns the above route with [Route.Classifier] set.
func (t *Table) Resolve(name string, s Subject) (Route, bool) {
	if t == nil {
		return Route{}, false
	}
	c, ok := t.aliases[name]
	if !ok {
		return Route{}, false
	}
	switch c.route.Strategy {
	case config.StrategyCanary:
		var r uint64
		if s.Rand != nil {
			r = s.Rand.Uint64N(c.total)
		} else {
			r = rand.Uint64N(c.total)
		}
		return c.bucket(r), true
	case config.StrategyAB:
		return c.bucket(abPoint(name, c.subject(s), c.total)), true
	}
	return c.route, true
}

// bucket returns the route whose weight range holds r, in [0, total).
func (c *compiled) bucket(r uint64) Route {
	for i, end := range c.cum {
		if r < end {
			return c.routes[i]
		}
	}
	return c.routes[len(c.routes)-1] // unreachable: r < total = cum[last]
}

// subject returns the sticky subject of an ab call: the one the alias
// declares, else (absent or empty) the tenant.
func (c *compiled) subject(s Subject) string {
	var v string
	switch c.sticky {
	case stickyAgent:
		v = s.Agent
	case stickyUser:
		v = s.User
	case stickyHeader:
		if s.Header != nil {
			v = s.Header(c.header)
		}
	}
	if v == "" {
		return s.Tenant
	}
	return v
}

// FNV-1a 64 (http://www.isthe.com/chongo/tech/comp/fnv/).
const (
	fnvOffset64 = 14695981039346656037
	fnvPrime64  = 1099511628211
)

// abPoint is the point of subject in [0, total) for alias name:
// h = fmix64(FNV-1a 64 of name, one 0x00 byte and subject), point =
// ⌊h·total/2⁶⁴⌋ (the high word of the 128-bit product). fmix64 is
// MurmurHash3's 64-bit finalizer
// (https://github.com/aappleby/smhasher/blob/master/src/MurmurHash3.cpp):
// FNV-1a alone mixes similar subjects (agent-1, agent-2, ...) so poorly
// that a 50/50 split of 10,000 of them lands 65/35. The same on every
// replica, architecture and restart.
func abPoint(name, subject string, total uint64) uint64 {
	h := uint64(fnvOffset64)
	for i := 0; i < len(name); i++ {
		h = (h ^ uint64(name[i])) * fnvPrime64
	}
	h *= fnvPrime64 // the 0x00 separator: h ^ 0 = h
	for i := 0; i < len(subject); i++ {
		h = (h ^ uint64(subject[i])) * fnvPrime64
	}
	hi, _ := bits.Mul64(fmix64(h), total)
	return hi
}

// fmix64 is MurmurHash3's 64-bit finalizer: every input bit flips each
// output bit with probability close to 1/2.
func fmix64(h uint64) uint64 {
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}

// compile compiles one alias.
func compile(name string, a config.Alias, backends map[string]config.Backend) (*compiled, error) {
	c := &compiled{route: Route{Alias: name, Strategy: a.Strategy}}
	if a.Strategy == config.StrategyClassifier {
		return c, compileClassifier(c, a, backends)
	}
	if !a.Strategy.Valid() {
		return nil, fmt.Errorf("unknown strategy %q", a.Strategy)
	}
	if len(a.Targets) == 0 {
		return nil, fmt.Errorf("no target")
	}
	targets := make([]Target, len(a.Targets))
	for i, at := range a.Targets {
		if _, ok := backends[at.Backend]; !ok {
			return nil, fmt.Errorf("targets[%d]: no backend %q", i, at.Backend)
		}
		targets[i] = Target{Backend: at.Backend, Model: at.Model, Arm: at.Arm}
		if at.Arm == "" {
			targets[i].Arm = strconv.Itoa(i)
		}
	}
	switch a.Strategy {
	case config.StrategyCanary, config.StrategyAB:
		return c, compileWeighted(c, a, targets)
	case config.StrategyCost, config.StrategyLatency, config.StrategyCostLatency:
		sortTargets(a.Strategy, targets, backends)
	case config.StrategyDirect:
		targets = targets[:1]
	}
	c.route.Targets = targets
	c.route.Arm = targets[0].Arm
	return c, nil
}

// compileWeighted builds a canary or ab alias's buckets: one per target of
// positive weight, in declared order, each route that target followed by
// the other positive-weight targets in declared order (a weight-0 target
// is never drawn and never a failover).
func compileWeighted(c *compiled, a config.Alias, targets []Target) error {
	var on []Target
	for i, at := range a.Targets {
		if at.Weight < 0 {
			return fmt.Errorf("targets[%d]: negative weight", i)
		}
		if at.Weight > 0 {
			on = append(on, targets[i])
			c.total += uint64(at.Weight)
			c.cum = append(c.cum, c.total)
		}
	}
	if c.total == 0 {
		return fmt.Errorf("every weight is 0")
	}
	for i := range on {
		r := c.route
		r.Targets = make([]Target, 0, len(on))
		r.Targets = append(r.Targets, on[i])
		for j, t := range on {
			if j != i {
				r.Targets = append(r.Targets, t)
			}
		}
		r.Arm = on[i].Arm
		c.routes = append(c.routes, r)
	}
	if a.Strategy != config.StrategyAB {
		return nil
	}
	subject, header, ok := a.StickySubject()
	switch {
	case !ok || (subject == "header" && header == ""):
		return fmt.Errorf("unknown sticky subject %q", a.Sticky)
	case subject == config.StickyAgent:
		c.sticky = stickyAgent
	case subject == config.StickyUser:
		c.sticky = stickyUser
	case subject == "header":
		c.sticky, c.header = stickyHeader, header
	}
	return nil
}

// compileClassifier builds a classifier alias: the above route, with the
// scorer and the below route beside it.
func compileClassifier(c *compiled, a config.Alias, backends map[string]config.Backend) error {
	if a.Classifier == nil {
		return fmt.Errorf("strategy classifier without classifier")
	}
	for _, t := range []config.ClassifierTarget{a.Below, a.Above} {
		if _, ok := backends[t.Backend]; !ok {
			return fmt.Errorf("no backend %q", t.Backend)
		}
	}
	below := c.route
	below.Arm = "below"
	below.Targets = []Target{{Backend: a.Below.Backend, Model: a.Below.Model, Arm: "below"}}
	c.route.Arm = "above"
	c.route.Targets = []Target{{Backend: a.Above.Backend, Model: a.Above.Model, Arm: "above"}}
	c.route.Classifier = &ClassifierSpec{
		URL:       a.Classifier.URL,
		External:  a.Classifier.IsExternal(),
		Timeout:   a.Classifier.Timeout.Std(),
		Threshold: a.Classifier.Threshold,
		Below:     below,
	}
	return nil
}
