// tollgate's live page: polls /ui/state every second and draws it. Every
// value goes into the page as text (never as markup), and nothing is
// fetched from anywhere else.
"use strict";

const STATE = "/ui/state";
const EVERY_MS = 1000;
// Two minutes of points a chart.
const POINTS = 120;
const SVG = "http://www.w3.org/2000/svg";

// The admin token: from the address's fragment once (`/ui#token=…`, which
// is never sent to the server), then from this tab's session storage.
function takeToken() {
  const match = /(?:^#|&)token=([^&]*)/.exec(location.hash);
  if (match) {
    sessionStorage.setItem("tollgate-token", decodeURIComponent(match[1]));
    history.replaceState(null, "", location.pathname);
  }
  return sessionStorage.getItem("tollgate-token");
}

let previous = null;
// Per policy: [{decisions, rejections, degraded}] per second, oldest first.
const history_ = new Map();

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    node.setAttribute(k, v);
  }
  for (const child of children) {
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

function setStatus(state, text) {
  const status = document.getElementById("status");
  status.dataset.state = state;
  status.textContent = text;
}

function decisions(p) {
  return p.allowed + p.rejected + p.shadow_rejected;
}

function rejections(p) {
  return p.rejected + p.shadow_rejected;
}

// Per-second rates between the last state and this one.
function record(state) {
  const seconds = previous ? (state.now_ms - previous.now_ms) / 1000 : 0;
  for (const p of state.policies) {
    const before = previous && previous.policies.find((q) => q.policy === p.policy);
    const points = history_.get(p.policy) || [];
    if (before && seconds > 0) {
      points.push({
        decisions: Math.max(0, decisions(p) - decisions(before)) / seconds,
        rejections: Math.max(0, rejections(p) - rejections(before)) / seconds,
        degraded: Math.max(0, p.degraded.total - before.degraded.total) / seconds,
      });
    }
    while (points.length > POINTS) {
      points.shift();
    }
    history_.set(p.policy, points);
  }
  previous = state;
}

function fmt(rate) {
  if (rate === undefined) {
    return "–";
  }
  return rate >= 100 ? Math.round(rate).toString() : rate.toFixed(1);
}

function chart(points) {
  const width = 600;
  const height = 90;
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("class", "chart");
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  svg.setAttribute("preserveAspectRatio", "none");
  const top = Math.max(1, ...points.map((p) => Math.max(p.decisions, p.rejections, p.degraded)));
  for (const series of ["decisions", "rejections", "degraded"]) {
    const line = document.createElementNS(SVG, "polyline");
    line.setAttribute("class", series);
    const xy = points.map((p, i) => {
      const x = width - (points.length - 1 - i) * (width / (POINTS - 1));
      const y = height - 4 - (p[series] / top) * (height - 16);
      return `${x.toFixed(1)},${y.toFixed(1)}`;
    });
    line.setAttribute("points", xy.join(" "));
    svg.append(line);
  }
  const scale = document.createElementNS(SVG, "text");
  scale.setAttribute("x", "4");
  scale.setAttribute("y", "11");
  scale.textContent = `${fmt(top)}/s`;
  svg.append(scale);
  return svg;
}

function number(kind, label, field, value) {
  return el("div", { class: `number ${kind}` },
    el("span", { class: "label" }, label),
    el("span", { class: "value", "data-field": field }, value));
}

// This minute's hot identities; early in a minute, the last whole one's.
function hotTable(title, now, last) {
  const entries = now.length > 0 ? now : last;
  const when = now.length > 0 || last.length === 0 ? "this minute" : "last minute";
  const table = el("table", {}, el("tr", {}, el("th", {}, title), el("th", { class: "count" }, when)));
  if (entries.length === 0) {
    table.append(el("tr", {}, el("td", { class: "empty", colspan: "2" }, "none")));
  }
  for (const entry of entries.slice(0, 5)) {
    const name = entry.identity === null ? "(unnamed: no identity key)" : entry.identity;
    table.append(el("tr", {},
      el("td", { class: "identity", title: name }, name),
      el("td", { class: "count" }, entry.count)));
  }
  return table;
}

function leaseTable(lease, region) {
  const table = el("table", { class: "lease" },
    el("tr", {}, el("th", {}, "region"), el("th", {}, "floor"), el("th", {}, "share here")));
  for (const f of lease.floors) {
    const here = f.region === region;
    table.append(el("tr", here ? { class: "here", "data-region": f.region } : { "data-region": f.region },
      el("td", {}, f.region),
      el("td", {}, f.floor),
      el("td", here ? { "data-field": "share" } : {}, here ? lease.share : "")));
  }
  table.append(el("tr", {}, el("td", {}, "spare (leased)"), el("td", {}, lease.spare),
    el("td", {}, `demand ${lease.demand} · unleased ${lease.unleased} · ${lease.identities} leasing`)));
  return table;
}

function policyCard(p, region) {
  const points = history_.get(p.policy) || [];
  const last = points[points.length - 1] || {};
  const tags = [p.scope, p.mode === "shadow" ? "shadow" : null, `limit ${p.limit}`].filter(Boolean).join(" · ");
  const card = el("article", { class: "policy", "data-policy": p.policy },
    el("h3", {}, p.policy, el("span", { class: "tags" }, tags)),
    el("div", { class: "numbers" },
      number("decisions", "decisions/s", "decision_rate", fmt(last.decisions)),
      number("rejections", "rejections/s", "rejection_rate", fmt(last.rejections)),
      number("degraded", "degraded/s", "degraded_rate", fmt(last.degraded)),
      number("", "since start", "decisions", decisions(p))),
    el("div", { class: "numbers" },
      number("", "allowed", "allowed", p.allowed),
      number("rejections", p.mode === "shadow" ? "would reject" : "rejected", "rejected", rejections(p)),
      number("degraded", "degraded", "degraded", p.degraded.total),
      number("", "fail open · closed · local", "degraded_paths",
        `${p.degraded.fail_open} · ${p.degraded.fail_closed} · ${p.degraded.local}`)),
    chart(points),
    el("div", { class: "columns" },
      hotTable("hot by decisions", p.hot.now.by_decisions, p.hot.last.by_decisions),
      hotTable(p.mode === "shadow" ? "hot by would-be rejections" : "hot by rejections",
        p.hot.now.by_rejections, p.hot.last.by_rejections)));
  if (p.lease) {
    card.append(leaseTable(p.lease, region));
  }
  return card;
}

function storeCard(s) {
  const name = s.region ? `${s.role} (${s.region})` : s.role;
  const circuit = s.circuit || "memory";
  return el("div", { class: "store", "data-store": s.role },
    el("span", { class: "name" }, name),
    el("span", { class: `pill ${circuit}`, "data-field": "circuit" }, s.circuit ? `circuit ${circuit.replace("_", "-")}` : "in memory: no circuit"),
    el("span", { class: "hint" }, s.shared ? ` ${s.keys} keys in this instance's fallback` : ` ${s.keys} keys`));
}

function render(state) {
  document.getElementById("stores").replaceChildren(...state.stores.map(storeCard));
  document.getElementById("policies").replaceChildren(...state.policies.map((p) => policyCard(p, state.region)));
  const region = state.region ? `region ${state.region} · ` : "";
  document.getElementById("meta").textContent =
    `${region}config ${state.config_hash.slice(0, 12)} · identities ${state.identities}`;
}

async function poll() {
  const token = takeToken();
  const headers = token ? { Authorization: `Bearer ${token}` } : {};
  try {
    // A store that hangs never hangs the page: a poll is given up after 5 s.
    const response = await fetch(STATE, { headers, cache: "no-store", signal: AbortSignal.timeout(5 * EVERY_MS) });
    if (response.status === 401) {
      setStatus("unauthorized", "needs the admin token");
      document.getElementById("token-form").hidden = false;
      return;
    }
    if (!response.ok) {
      setStatus("error", `/ui/state answered ${response.status}`);
      return;
    }
    const state = await response.json();
    document.getElementById("token-form").hidden = true;
    record(state);
    render(state);
    setStatus("live", `live · ${new Date(state.now_ms).toLocaleTimeString()}`);
  } catch (e) {
    setStatus("error", `cannot reach ${STATE}`);
  }
}

document.getElementById("token-form").addEventListener("submit", (event) => {
  event.preventDefault();
  sessionStorage.setItem("tollgate-token", document.getElementById("token").value.trim());
  document.getElementById("token").value = "";
  poll();
});

// One poll at a time, a second after the last one ended.
async function loop() {
  await poll();
  setTimeout(loop, EVERY_MS);
}

loop();
