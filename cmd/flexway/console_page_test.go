package main

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

type capGauge struct {
	Limit, Committed, Reserved int64
	Soft                       bool
	Unit                       string
}

type backendGauge struct {
	Circuit                string
	Calls, NanoEUR, Errors int64
}

type gauges struct {
	caps     map[string]capGauge // by tenant/agent/cap
	backends map[string]backendGauge
}

// readGauges reads GET /flexway/v1/usage, /flexway/v1/backends and
// /metrics: per backend, the calls, the euros (each series rounded to the
// nano-euro, as the page does) and the errors (outcome upstream_error or
// error) of the per-call series.
func readGauges(t *testing.T, g *testGW) gauges {
	t.Helper()
	admin := func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+testAdminKey) }
	out := gauges{caps: map[string]capGauge{}, backends: map[string]backendGauge{}}

	resp, raw := getWith(t, g, "/flexway/v1/usage", admin)
	var usage struct {
		Accounts []struct {
			Tenant, Agent string
			Caps          []struct {
				Cap, Unit                  string
				Limit, Committed, Reserved string
				Soft                       bool
			}
		}
	}
	if resp.StatusCode != 200 || json.Unmarshal([]byte(raw), &usage) != nil {
		t.Fatalf("/flexway/v1/usage: %d %s", resp.StatusCode, raw)
	}
	n := func(s string) int64 { v, _ := strconv.ParseInt(s, 10, 64); return v }
	for _, a := range usage.Accounts {
		for _, c := range a.Caps {
			out.caps[a.Tenant+"/"+a.Agent+"/"+c.Cap] = capGauge{Limit: n(c.Limit), Committed: n(c.Committed), Reserved: n(c.Reserved), Soft: c.Soft, Unit: c.Unit}
		}
	}

	resp, raw = getWith(t, g, "/flexway/v1/backends", admin)
	var bs struct {
		Backends []struct{ Name, Circuit string }
	}
	if resp.StatusCode != 200 || json.Unmarshal([]byte(raw), &bs) != nil {
		t.Fatalf("/flexway/v1/backends: %d %s", resp.StatusCode, raw)
	}
	for _, b := range bs.Backends {
		out.backends[b.Name] = backendGauge{Circuit: b.Circuit}
	}

	resp, raw = getWith(t, g, "/metrics", nil)
	if resp.StatusCode != 200 {
		t.Fatalf("/metrics: %d", resp.StatusCode)
	}
	series := regexp.MustCompile(`(?m)^(flexway_inference_calls_total|flexway_inference_cost_EUR_total)\{([^}]*)\} (\S+)`)
	label := func(labels, name string) string {
		m := regexp.MustCompile(`(?:^|,)` + name + `="([^"]*)"`).FindStringSubmatch(labels)
		if m == nil {
			return ""
		}
		return m[1]
	}
	for _, m := range series.FindAllStringSubmatch(raw, -1) {
		v, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			t.Fatalf("/metrics: %q: %v", m[0], err)
		}
		name := label(m[2], "backend")
		b, ok := out.backends[name]
		if !ok {
			t.Fatalf("/metrics names backend %q, which the admin API does not list", name)
		}
		if m[1] == "flexway_inference_calls_total" {
			b.Calls += int64(math.Round(v))
			if o := label(m[2], "outcome"); o == "upstream_error" || o == "error" {
				b.Errors += int64(math.Round(v))
			}
		} else {
			b.NanoEUR += int64(math.Round(v * 1e9))
		}
		out.backends[name] = b
	}
	return out
}

// ---- what the page shows ----

type renderedCap struct {
	Tenant, Agent, Cap, Unit   string
	Limit, Committed, Reserved string
	Soft                       bool
	Text                       struct{ Committed, Reserved, Limit string }
	// Positions on the gauge, as fractions of its width: the centre of
	// each mark, the width of the used segment. The soft mark is null
	// when none is drawn.
	SoftMark, LimitMark *float64
	UsedWidth           float64
	GaugeWidth          float64
}

type renderedBackend struct {
	Name, Circuit, Calls, NanoEUR, Errors string
	Text                                  struct{ Circuit, Calls, Euros, Errors string }
	Color                                 string
}

type renderedPage struct {
	State, Updated string
	Updates        int
	NoReload       bool
	Caps           []renderedCap
	Backends       []renderedBackend
}

// readPageJS collects the rendered gauges.
const readPageJS = `JSON.stringify((() => {
  const st = document.getElementById('state');
  const up = document.getElementById('updated');
  return {
    State: st ? st.dataset.state : '',
    Updated: up ? up.dateTime : '',
    Updates: Number(document.body.dataset.updates || 0),
    NoReload: window.flexwayNoReload === true,
    Caps: [...document.querySelectorAll('.account .cap')].map(c => {
      const a = c.closest('.account');
      const g = c.querySelector('.gauge').getBoundingClientRect();
      const centre = sel => { const m = c.querySelector(sel); if (!m) return null; const r = m.getBoundingClientRect(); return (r.left + r.width / 2 - g.left) / g.width; };
      const text = sel => c.querySelector(sel).textContent;
      return {
        Tenant: a.dataset.tenant, Agent: a.dataset.agent, Cap: c.dataset.cap, Unit: c.dataset.unit,
        Limit: c.dataset.limit, Committed: c.dataset.committed, Reserved: c.dataset.reserved, Soft: c.dataset.soft === 'true',
        Text: {Committed: text('.v-committed'), Reserved: text('.v-reserved'), Limit: text('.v-limit')},
        SoftMark: centre('.mark.soft'), LimitMark: centre('.mark.limit'),
        UsedWidth: c.querySelector('.seg.used').getBoundingClientRect().width / g.width, GaugeWidth: g.width,
      };
    }),
    Backends: [...document.querySelectorAll('tr.backend')].map(r => ({
      Name: r.dataset.backend, Circuit: r.dataset.circuit, Calls: r.dataset.calls, NanoEUR: r.dataset.nanoEur, Errors: r.dataset.errors,
      Text: {Circuit: r.querySelector('.circuit').textContent, Calls: r.querySelector('.v-calls').textContent,
             Euros: r.querySelector('.v-euros').textContent, Errors: r.querySelector('.v-errors').textContent},
      Color: getComputedStyle(r.querySelector('.circuit')).color,
    })),
  };
})())`

// checkPage compares the rendered page with the gateway's gauges.
func checkPage(t *testing.T, p renderedPage, want gauges, soft float64) {
	t.Helper()
	seen := map[string]bool{}
	for _, c := range p.Caps {
		key := c.Tenant + "/" + c.Agent + "/" + c.Cap
		seen[key] = true
		w, ok := want.caps[key]
		if !ok {
			t.Errorf("the page shows %s, which the admin API does not list", key)
			continue
		}
		fmtN := groupDigits
		if w.Unit == "nano_eur" {
			fmtN = formatNanoEUR
		}
		s := strconv.FormatInt
		if c.Unit != w.Unit || c.Limit != s(w.Limit, 10) || c.Committed != s(w.Committed, 10) || c.Reserved != s(w.Reserved, 10) || c.Soft != w.Soft {
			t.Errorf("%s: the page shows %+v, the admin API %+v", key, c, w)
		}
		if c.Text.Committed != fmtN(w.Committed) || c.Text.Reserved != fmtN(w.Reserved) || c.Text.Limit != fmtN(w.Limit) {
			t.Errorf("%s: the page reads %q used, %q reserved, %q limit; want %q, %q, %q", key,
				c.Text.Committed, c.Text.Reserved, c.Text.Limit, fmtN(w.Committed), fmtN(w.Reserved), fmtN(w.Limit))
		}
		// The gauge spans the limit (or what is used and reserved, when
		// more).
		scale := float64(max(w.Limit, w.Committed+w.Reserved))
		tol := 2 / c.GaugeWidth
		near := func(got *float64, want float64) bool { return got != nil && math.Abs(*got-want) <= tol }
		if !near(c.SoftMark, soft*float64(w.Limit)/scale) {
			t.Errorf("%s: soft mark at %v of the gauge, want %v", key, deref(c.SoftMark), soft*float64(w.Limit)/scale)
		}
		if !near(c.LimitMark, float64(w.Limit)/scale) {
			t.Errorf("%s: limit mark at %v of the gauge, want %v", key, deref(c.LimitMark), float64(w.Limit)/scale)
		}
		if used := float64(w.Committed) / scale; !near(&c.UsedWidth, used) {
			t.Errorf("%s: used segment %v of the gauge, want %v", key, c.UsedWidth, used)
		}
	}
	for key := range want.caps {
		if !seen[key] {
			t.Errorf("the page lacks %s", key)
		}
	}
	if len(p.Backends) != len(want.backends) {
		t.Errorf("the page shows %d backends, the admin API lists %d", len(p.Backends), len(want.backends))
	}
	colors := map[string]string{"closed": "rgb(30, 142, 62)", "half_open": "rgb(138, 87, 0)", "open": "rgb(198, 40, 40)"}
	labels := map[string]string{"closed": "closed", "half_open": "half open", "open": "open"}
	for _, b := range p.Backends {
		w, ok := want.backends[b.Name]
		if !ok {
			t.Errorf("the page shows backend %q, which the admin API does not list", b.Name)
			continue
		}
		s := func(v int64) string { return strconv.FormatInt(v, 10) }
		if b.Circuit != w.Circuit || b.Calls != s(w.Calls) || b.NanoEUR != s(w.NanoEUR) || b.Errors != s(w.Errors) {
			t.Errorf("backend %s: the page shows %+v, the admin API and /metrics %+v", b.Name, b, w)
		}
		if b.Text.Circuit != labels[w.Circuit] || b.Text.Calls != groupDigits(w.Calls) || b.Text.Euros != formatNanoEUR(w.NanoEUR) || b.Text.Errors != groupDigits(w.Errors) {
			t.Errorf("backend %s: the page reads %+v", b.Name, b.Text)
		}
		if b.Color != colors[w.Circuit] {
			t.Errorf("backend %s: circuit %s drawn in %s, want %s", b.Name, w.Circuit, b.Color, colors[w.Circuit])
		}
	}
}

func deref(f *float64) any {
	if f == nil {
		return nil
	}
	return *f
}

// groupDigits writes n as the page does: groups of three digits
// separated by a narrow no-break space.
func groupDigits(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteString("\u202f")
		}
		b.WriteRune(r)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// formatNanoEUR writes nano-euros as euros, as the page does: every
// decimal needed, at least two.
func formatNanoEUR(nano int64) string {
	neg := nano < 0
	if neg {
		nano = -nano
	}
	frac := strings.TrimRight(fmt.Sprintf("%09d", nano%1_000_000_000), "0")
	for len(frac) < 2 {
		frac += "0"
	}
	s := groupDigits(nano/1_000_000_000) + "." + frac
	if neg {
		return "-" + s
	}
	return s
}

// ---- a minimal DevTools protocol client ----
