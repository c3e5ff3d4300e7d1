package config

import (
	"cmp"
	"net/url"
	"strings"
)

func (ai AI) validate(col *collector) {
	// ref checks that name (at path) is a backend that serves inference.
	ref := func(path, name string) (Backend, bool) {
		b, ok := ai.Backends[name]
		switch {
		case !ok:
			col.errorf(path, "no backend %q in ai.backends", name)
		case b.Kind == KindGRPC:
			col.errorf(path, "backend %q is kind grpc: it serves no chat, vision or embeddings", name)
			ok = false
		}
		return b, ok
	}

	switch {
	case len(ai.Backends) == 0:
		col.errorf("ai.backends", "at least one backend is required")
	case ai.Backend == "":
		col.errorf("ai.backend", "required: the default backend, one of %s", strings.Join(sortedKeys(ai.Backends), ", "))
	default:
		ref("ai.backend", ai.Backend)
	}
	if ai.SensitiveHeader == "" {
		col.errorf("ai.sensitive_header", "required")
	}
	checkHeader(col, "ai.sensitive_header", ai.SensitiveHeader)
	if ai.SensitiveBackend != "" {
		if b, ok := ref("ai.sensitive_backend", ai.SensitiveBackend); ok && b.IsExternal() {
			col.errorf("ai.sensitive_backend", "backend %q is external: sensitive calls stay inside; set external: false on it or name an internal backend", ai.SensitiveBackend)
		}
	}
	for _, capa := range sortedKeys(ai.Capabilities) {
		path, name := keyPath("ai.capabilities", string(capa)), ai.Capabilities[capa]
		if !capa.Valid() {
			col.errorf(path, "unknown capability %q: want chat, vision or embeddings", capa)
			continue
		}
		if b, ok := ref(path, name); ok && !b.Can(capa) {
			col.errorf(path, "backend %q does not list capability %s", name, capa)
		}
	}
	ai.Budget.validate(col, ref)
	for _, tname := range sortedKeys(ai.Tenants) {
		t, path := ai.Tenants[tname], keyPath("ai.tenants", tname)
		if tname == "" {
			col.errorf(path, "a tenant needs a name")
		}
		if t.Backend != "" {
			ref(path+".backend", t.Backend)
		}
		t.Budget.validate(col, path+".budget")
		for _, aname := range sortedKeys(t.Agents) {
			a, apath := t.Agents[aname], keyPath(path+".agents", aname)
			if aname == "" {
				col.errorf(apath, "an agent needs a name")
			}
			if a.Backend != "" {
				ref(apath+".backend", a.Backend)
			}
			a.Budget.validate(col, apath+".budget")
		}
	}
	ai.checkSensitiveRoutes(col)
	ai.Vision.validate(col)
	for _, name := range sortedKeys(ai.Backends) {
		ai.Backends[name].validate(col, name, ai.Backends)
	}
	ai.validateAliases(col)
	for i, p := range ai.GRPC.DescriptorSets {
		if p == "" {
			col.errorf(indexPath("ai.grpc.descriptor_sets", i), "empty path")
		}
	}
	for _, svc := range sortedKeys(ai.GRPC.Services) {
		path, name := keyPath("ai.grpc.services", svc), ai.GRPC.Services[svc]
		b, ok := ai.Backends[name]
		switch {
		case svc == "":
			col.errorf(path, "a service needs its full name, e.g. acme.ocr.v1.OcrService")
		case !ok:
			col.errorf(path, "no backend %q in ai.backends", name)
		case b.Kind != KindGRPC:
			col.errorf(path, "backend %q is kind %s: a gRPC service must name a kind: grpc backend", name, b.Kind)
		}
	}
}

// checkSensitiveRoutes warns, when ai.sensitive_backend is not set, about a
// tenant or agent that is sensitive by configuration while its calls route
// (agent backend, else tenant backend, else ai.backend) to an external
// backend: routing refuses every such call. An agent of a sensitive tenant
// is reported only when it routes elsewhere than its tenant.
func (ai AI) checkSensitiveRoutes(col *collector) {
	if ai.SensitiveBackend != "" {
		return
	}
	// external reports whether backend name is an external inference
	// backend; a missing or grpc one is an error reported apart.
	external := func(name string) bool {
		b, ok := ai.Backends[name]
		return ok && b.Kind != KindGRPC && b.IsExternal()
	}
	warn := func(path, who, name string) {
		col.warnf(path, "every call of this %s is sensitive but routes to external backend %s and ai.sensitive_backend is not set: its calls will be refused (403)", who, name)
	}
	for _, tname := range sortedKeys(ai.Tenants) {
		t, path := ai.Tenants[tname], keyPath("ai.tenants", tname)
		route := cmp.Or(t.Backend, ai.Backend)
		if t.Sensitive && external(route) {
			warn(path+".sensitive", "tenant", route)
		}
		for _, aname := range sortedKeys(t.Agents) {
			a, apath := t.Agents[aname], keyPath(path+".agents", aname)
			aroute := cmp.Or(a.Backend, route)
			switch {
			case !external(aroute):
			case a.Sensitive && !(t.Sensitive && aroute == route):
				warn(apath+".sensitive", "agent", aroute)
			case t.Sensitive && aroute != route:
				// Sensitive through its tenant, routed apart from it.
				warn(apath+".backend", "agent (its tenant is sensitive)", aroute)
			}
		}
	}
}

func (v Vision) validate(col *collector) {
	if v.MaxImageBytes <= 0 {
		col.errorf("ai.vision.max_image_bytes", "must be positive")
	}
	if v.MaxBodyBytes <= 0 {
		col.errorf("ai.vision.max_body_bytes", "must be positive")
	}
	if v.MaxBodyBytes > 0 && v.MaxImageBytes > v.MaxBodyBytes {
		col.warnf("ai.vision.max_image_bytes", "%v exceeds max_body_bytes (%v): images are bounded by the body limit", v.MaxImageBytes, v.MaxBodyBytes)
	}
	if v.ReserveTokensPerImage < 0 {
		col.errorf("ai.vision.reserve_tokens_per_image", "must not be negative")
	}
	for i, o := range v.AllowedOrigins {
		u, err := url.Parse(o)
		if err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil ||
			u.Path != "" || u.RawQuery != "" || u.Fragment != "" || strings.HasSuffix(o, "?") {
			col.errorf(indexPath("ai.vision.allowed_origins", i), "%q is not an https origin: want https://host or https://host:port", o)
		}
	}
}
