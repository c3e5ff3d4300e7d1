// Flexway console: reads the budgets, the backends and /metrics through
// the console's same-origin proxy every few seconds and draws them. No
// framework, no build step; the DOM is built with createElement and
// textContent only (names come from the configuration, but nothing here
// is ever parsed as HTML).
'use strict';

(function () {
  const body = document.body;
  const softFraction = body.dataset.soft === '' ? NaN : Number(body.dataset.soft);
  const refreshMs = Math.max(100, Number(body.dataset.refreshMs) || 2000);
  const NANO = 1000000000n;
  const THIN = '\u202f'; // narrow no-break space, between groups of digits

  // ---- formatting: exact, from integers ----

  // group puts a narrow space between groups of three digits.
  function group(digits) {
    return digits.replace(/\B(?=(\d{3})+(?!\d))/g, THIN);
  }

  // fmtInt formats an integer (BigInt) exactly: "1 234 567".
  function fmtInt(n) {
    const neg = n < 0n;
    const s = group((neg ? -n : n).toString());
    return neg ? '-' + s : s;
  }

  // fmtEUR formats nano-euros (BigInt) as euros with as many decimals as
  // needed, at least two: 5000000000 → "5.00", 26000 → "0.000026".
  function fmtEUR(nano) {
    const neg = nano < 0n;
    const u = neg ? -nano : nano;
    let frac = (u % NANO).toString().padStart(9, '0').replace(/0+$/, '');
    while (frac.length < 2) frac += '0';
    const s = group((u / NANO).toString()) + '.' + frac;
    return neg ? '-' + s : s;
  }

  function big(v) {
    try { return BigInt(v || '0'); } catch (e) { return 0n; }
  }

  // ---- DOM helpers ----

  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === 'class') e.className = v;
      else if (k.startsWith('data-')) e.dataset[k.slice(5).replace(/-([a-z])/g, (_, c) => c.toUpperCase())] = v;
      else e.setAttribute(k, v);
    }
    for (const c of children) {
      if (c === null || c === undefined) continue;
      e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return e;
  }

  function pct(x) {
    if (!isFinite(x) || x < 0) x = 0;
    if (x > 1) x = 1;
    return (x * 100).toFixed(4) + '%';
  }

  // ---- /metrics (Prometheus text) ----

  const labelRe = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;

  function parseLabels(s) {
    const out = {};
    let m;
    labelRe.lastIndex = 0;
    while ((m = labelRe.exec(s)) !== null) {
      out[m[1]] = m[2].replace(/\\(.)/g, (_, c) => (c === 'n' ? '\n' : c));
    }
    return out;
  }

  // backendTotals sums, per backend, the calls, the euros (in nano-euros,
  // each series rounded to the nano-euro) and the errors (outcome
  // upstream_error or error) of the per-call series.
  function backendTotals(text) {
    const totals = {};
    const get = (b) => (totals[b] = totals[b] || { calls: 0n, nano: 0n, errors: 0n });
    for (const line of text.split('\n')) {
      if (line === '' || line[0] === '#') continue;
      const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)/.exec(line);
      if (!m) continue;
      const name = m[1];
      if (name !== 'flexway_inference_calls_total' && name !== 'flexway_inference_cost_EUR_total') continue;
      const labels = parseLabels(m[2] || '');
      if (!labels.backend) continue;
      const v = Number(m[3]);
      if (!isFinite(v)) continue;
      const t = get(labels.backend);
      if (name === 'flexway_inference_calls_total') {
        const n = BigInt(Math.round(v));
        t.calls += n;
        if (labels.outcome === 'upstream_error' || labels.outcome === 'error') t.errors += n;
      } else {
        t.nano += BigInt(Math.round(v * 1e9));
      }
    }
    return totals;
  }

  // ---- rendering ----

  function capView(c) {
    const limit = big(c.limit), committed = big(c.committed), reserved = big(c.reserved), remaining = big(c.remaining);
    const eur = c.unit === 'nano_eur';
    const fmt = eur ? fmtEUR : fmtInt;
    const unit = eur ? '€' : c.unit;
    let scale = limit;
    if (committed + reserved > scale) scale = committed + reserved;
    const frac = (n) => (scale > 0n ? Number(n) / Number(scale) : 0);
    const full = remaining <= 0n; // no room for another call
    const state = full ? 'full' : c.soft ? 'soft' : 'ok';

    const used = el('div', { class: 'seg used' });
    used.style.width = pct(frac(committed));
    const res = el('div', { class: 'seg reserved' });
    res.style.left = pct(frac(committed));
    res.style.width = pct(frac(reserved));
    const limitMark = el('div', { class: 'mark limit', title: 'limit ' + fmt(limit) + ' ' + unit });
    limitMark.style.left = pct(frac(limit));
    const gauge = el('div', {
      class: 'gauge', role: 'img',
      'aria-label': c.cap + ': ' + fmt(committed) + ' used and ' + fmt(reserved) + ' reserved of ' + fmt(limit) + ' ' + unit,
    }, used, res, limitMark);
    if (softFraction > 0 && softFraction < 1) {
      const softMark = el('div', { class: 'mark soft', title: 'soft mark: ' + (softFraction * 100) + ' % of the limit' });
      softMark.style.left = pct(frac(limit) * softFraction);
      gauge.append(softMark);
    }
    const badges = el('span', { class: 'badges' });
    if (full) badges.append(el('span', { class: 'badge full', title: 'no room left for another call' }, 'full'));
    else if (c.soft) badges.append(el('span', { class: 'badge soft', title: 'past the soft mark' }, 'soft'));

    return el('div', {
      class: 'cap ' + state,
      'data-cap': c.cap, 'data-unit': c.unit, 'data-period': c.period,
      'data-limit': limit.toString(), 'data-committed': committed.toString(),
      'data-reserved': reserved.toString(), 'data-remaining': remaining.toString(),
      'data-soft': String(!!c.soft), 'data-state': state,
    },
    el('div', { class: 'cap-head' },
      el('span', { class: 'cap-name' }, c.cap),
      badges,
      el('span', { class: 'cap-figures' },
        el('span', { class: 'v-committed' }, fmt(committed)), ' used + ',
        el('span', { class: 'v-reserved' }, fmt(reserved)), ' reserved of ',
        el('span', { class: 'v-limit' }, fmt(limit)), ' ' + unit)),
    gauge);
  }

  function renderAccounts(usage) {
    const root = document.getElementById('accounts');
    const accounts = (usage && usage.accounts) || [];
    const tenants = new Map();
    for (const a of accounts) {
      if (!tenants.has(a.tenant)) tenants.set(a.tenant, []);
      tenants.get(a.tenant).push(a);
    }
    const out = [];
    for (const [tenant, list] of tenants) {
      const card = el('article', { class: 'tenant', 'data-tenant': tenant }, el('h3', {}, tenant));
      for (const a of list) {
        const caps = a.caps || [];
        const acc = el('div', { class: 'account', 'data-tenant': a.tenant, 'data-agent': a.agent || '' },
          el('h4', {}, a.agent ? el('span', {}, 'agent ', el('strong', {}, a.agent)) : 'tenant total'));
        if (caps.length === 0) acc.append(el('p', { class: 'muted nocaps' }, 'no cap of its own'));
        for (const c of caps) acc.append(capView(c));
        card.append(acc);
      }
      out.push(card);
    }
    if (out.length === 0) out.push(el('p', { class: 'muted' }, 'No account: no tenant or agent is configured.'));
    root.replaceChildren(...out);
  }

  const circuitLabel = { closed: 'closed', open: 'open', half_open: 'half open' };

  function renderBackends(list, totals) {
    const tbody = document.querySelector('#backends tbody');
    const rows = [];
    for (const b of (list && list.backends) || []) {
      const t = totals[b.name] || { calls: 0n, nano: 0n, errors: 0n };
      const share = t.calls > 0n ? Number(t.errors) / Number(t.calls) : 0;
      const bar = el('div', { class: 'seg err' });
      bar.style.width = pct(share);
      const circuit = b.circuit || 'unknown';
      const caps = (b.capabilities || []).join(', ');
      rows.push(el('tr', {
        class: 'backend', 'data-backend': b.name, 'data-circuit': circuit,
        'data-calls': t.calls.toString(), 'data-nano-eur': t.nano.toString(), 'data-errors': t.errors.toString(),
      },
      el('th', { scope: 'row' }, el('span', { class: 'name' }, b.name),
        el('span', { class: 'muted detail' }, [b.kind, b.external ? 'external' : 'internal', caps].filter(Boolean).join(' · '))),
      el('td', {}, el('span', { class: 'circuit ' + circuit }, circuitLabel[circuit] || circuit),
        ...(b.credentials || []).map((k) => el('span', { class: 'muted detail credential', 'data-credential': k.name, 'data-state': k.state }, k.name + ': ' + k.state))),
      el('td', { class: 'num v-calls' }, fmtInt(t.calls)),
      el('td', { class: 'num' }, el('span', { class: 'v-euros' }, fmtEUR(t.nano)), ' €'),
      el('td', { class: 'num v-errors' }, fmtInt(t.errors)),
      el('td', {}, el('div', { class: 'gauge small', role: 'img', 'aria-label': 'errors: ' + (share * 100).toFixed(1) + ' % of calls' }, bar))));
    }
    if (rows.length === 0) rows.push(el('tr', {}, el('td', { colspan: '6', class: 'muted' }, 'No backend.')));
    tbody.replaceChildren(...rows);
  }

  // ---- refresh loop ----

  class HTTPError extends Error {
    constructor(status, detail) { super(detail); this.status = status; }
  }

  async function get(path, asText) {
    const r = await fetch(path, { credentials: 'same-origin', cache: 'no-store', headers: { Accept: asText ? 'text/plain' : 'application/json' } });
    if (!r.ok) {
      let detail = r.status + ' ' + r.statusText;
      try {
        const p = await r.json();
        if (p && p.detail) detail = p.detail;
      } catch (e) { /* not problem details */ }
      throw new HTTPError(r.status, path + ': ' + detail);
    }
    return asText ? r.text() : r.json();
  }

  const stateEl = document.getElementById('state');
  const updatedEl = document.getElementById('updated');
  const errorEl = document.getElementById('error');
  let updates = 0;

  function setState(state, text) {
    stateEl.dataset.state = state;
    stateEl.textContent = text;
  }

  function showError(msg, link) {
    errorEl.replaceChildren(msg);
    if (link) errorEl.append(' ', el('a', { href: '/console' }, 'Sign in again'));
    errorEl.hidden = false;
  }

  async function refresh() {
    let again = true;
    try {
      const [usage, backends, metrics] = await Promise.all([
        get('/console/api/usage'), get('/console/api/backends'), get('/console/api/metrics', true),
      ]);
      renderAccounts(usage);
      renderBackends(backends, backendTotals(metrics));
      const now = new Date();
      updatedEl.dateTime = now.toISOString();
      updatedEl.textContent = now.toLocaleTimeString();
      updates++;
      body.dataset.updates = String(updates);
      errorEl.hidden = true;
      setState('live', 'live, every ' + (refreshMs / 1000) + ' s');
    } catch (e) {
      if (e instanceof HTTPError && e.status === 401) {
        again = false;
        setState('signed-out', 'signed out');
        showError('The console is signed out (the admin key changed or the cookie was cleared).', true);
      } else {
        setState('stale', 'stale: the numbers below are from the last update');
        showError(String(e.message || e), false);
      }
    }
    if (again) setTimeout(refresh, refreshMs);
  }

  if (softFraction > 0 && softFraction < 1) {
    document.getElementById('soft-fraction').textContent = ' (' + (softFraction * 100) + ' % of each cap)';
  }
  refresh();
})();
