// runner ui: the runs list and one run's panels, polled from the JSON API (docs/ui.md).
"use strict";
const REFRESH_MS = 3000;
const plots = {};
let selected = null;

const el = (tag, attrs = {}, ...kids) => {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  for (const kid of kids) e.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  return e;
};
const fmt = (v, d = 4) => (v === null || v === undefined) ? "-" :
  (typeof v === "number" ? (Number.isInteger(v) ? String(v) : v.toPrecision(d)) : String(v));
const compact = (v) => v === null ? "" : Math.abs(v) >= 1e4 ?
  new Intl.NumberFormat("en", {notation: "compact", maximumSignificantDigits: 3}).format(v) : String(+v.toPrecision(3));
const when = (t) => t ? new Date(t * 1000).toLocaleTimeString() : "-";

async function getJSON(url) {
  const r = await fetch(url, {cache: "no-store"});
  const body = await r.json();
  if (!r.ok) throw new Error(body.error || r.statusText);
  return body;
}

function pickFromHash() {
  const m = location.hash.match(/^#([^/]+)\/(.+)$/);
  return m ? {team: decodeURIComponent(m[1]), run: decodeURIComponent(m[2])} : null;
}

function runRow(r, indent) {
  const bundles = (r.bundles || []).length;
  const name = indent ? `↳ ${r.learner || r.run}` : `${r.team}/${r.run}`;
  const tr = el("tr", {"data-run": `${r.team}/${r.run}`, class: indent ? "learner" : ""},
    el("td", {title: `${r.team}/${r.run}`}, name), el("td", {class: `state-${r.state}`}, r.state),
    el("td", {}, fmt(r.last_step)),
    el("td", {class: "bundle", title: (r.bundles || []).join(", ")}, bundles ? `${bundles} bundle${bundles > 1 ? "s" : ""}` : ""));
  if (selected && selected.team === r.team && selected.run === r.run) tr.classList.add("selected");
  tr.onclick = () => { location.hash = `${encodeURIComponent(r.team)}/${encodeURIComponent(r.run)}`; };
  return tr;
}

function renderRuns(runs) {
  // DiLoCo learners appear under their experiment; every other run on its own row.
  const body = document.querySelector("#runs tbody");
  const rows = [], groups = new Map();
  for (const r of runs) {
    if (!r.experiment) { rows.push(runRow(r, false)); continue; }
    const key = `${r.team}/${r.experiment}`;
    if (!groups.has(key)) {
      groups.set(key, []);
      rows.push(el("tr", {class: "experiment", "data-experiment": key},
        el("td", {colspan: "4"}, `${key} (experiment)`)));
    }
    groups.get(key).push(r);
    rows.push(runRow(r, true));
  }
  body.replaceChildren(...rows);
  if (!selected && runs.length) {
    location.hash = `${encodeURIComponent(runs[0].team)}/${encodeURIComponent(runs[0].run)}`;
  }
}

const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2",
                "#7f7f7f", "#bcbd22", "#17becf"];

function plot(id, x, series) {
  // series: [{label, values}]; uPlot wants [x, ...ys]. Re-created when the series change.
  const box = document.getElementById(id);
  const data = [x, ...series.map((s) => s.values)];
  const count = x.length ? series.reduce((n, s) => n + s.values.filter((v) => v !== null).length, 0) : 0;
  box.dataset.points = String(count);
  const key = series.map((s) => s.label).join("|");
  const old = plots[id];
  if (old && old.key === key) { old.u.setData(data); return; }
  if (old) old.u.destroy();
  const opts = {
    width: Math.max(360, box.clientWidth || 460), height: 220,
    scales: {x: {time: false}},
    series: [{label: "step"}, ...series.map((s, i) => ({label: s.label, stroke: COLORS[i % COLORS.length],
                                                       width: 1.5, spanGaps: true}))],
    axes: [{label: "step"}, {size: 56, values: (u, ticks) => ticks.map(compact)}],
    legend: {live: false},
  };
  plots[id] = {key, u: new uPlot(opts, data, box)};
}

function renderMembers(members) {
  document.querySelector("#members tbody").replaceChildren(...members.map((m) => el("tr", {},
    el("td", {}, fmt(m.rank)), el("td", {}, m.pod || "-"), el("td", {}, m.node || "-"),
    el("td", {}, m.role || "-"), el("td", {}, m.phase || "-"), el("td", {}, fmt(m.last_step)),
    el("td", {}, when(m.last_time)))));
}

const BAD = {errors: (v) => v > 0, healthy_workers: (v, f) => f.workers !== undefined && v < f.workers};

function renderAux(services) {
  const box = document.getElementById("aux");
  if (!services.length) { box.replaceChildren(el("p", {class: "empty"}, "no service reports")); return; }
  box.replaceChildren(...services.map((s) => {
    const bad = Object.entries(BAD).some(([k, test]) => s.fields[k] !== undefined && test(s.fields[k], s.fields));
    const rows = Object.entries(s.fields).map(([k, v]) => el("tr", {}, el("td", {}, k), el("td", {}, fmt(v))));
    return el("div", {class: bad ? "svc unhealthy" : "svc", "data-service": s.service},
      el("h4", {}, `${s.service}${bad ? " (unhealthy)" : ""}`), el("table", {}, ...rows),
      el("small", {}, `step ${s.step}`));
  }));
}

function heatColor(v, top) {
  if (v === null) return "#eee";
  const t = Math.max(0, Math.min(1, v / (top || 1)));
  return `hsl(${Math.round(220 - 220 * t)}, 80%, ${Math.round(92 - 45 * t)}%)`;
}

function renderHeatmap(h) {
  const box = document.getElementById("heatmap");
  if (!h.windows.length) { box.replaceChildren(el("p", {class: "empty"}, "no collective records")); return; }
  const top = Math.max(1, ...h.cells.flat().filter((v) => v !== null));
  const late = h.named.map((list) => new Set(list.map((n) => n.rank)));
  const head = el("tr", {}, el("th", {}, "rank \\ window"),
    ...h.windows.map((w, i) => el("th", {title: w}, String(i))));
  const rows = h.ranks.map((rank, r) => el("tr", {"data-rank": rank}, el("th", {}, `rank ${rank}`),
    ...h.cells[r].map((v, w) => {
      const td = el("td", {class: late[w].has(rank) ? "cell straggler" : "cell",
                           title: `rank ${rank}, window ${h.windows[w]}: ${fmt(v)} µs`});
      td.style.background = heatColor(v, top);
      return td;
    })));
  const named = el("tr", {class: "named"}, el("th", {}, "straggler"),
    ...h.named.map((list) => el("td", {class: "who"}, list.map((n) => `rank ${n.rank} (${n.node})`).join(", ") || "-")));
  const summary = el("p", {id: "straggler-summary"}, stragglerSummary(h),
    el("small", {}, ` · colour from 0 to ${compact(top)} µs; outlined: the window's straggler`));
  box.replaceChildren(summary, el("table", {}, head, ...rows, named));
}

function stragglerSummary(h) {
  const count = {};
  h.named.flat().forEach((n) => { count[`rank ${n.rank} on ${n.node}`] = (count[`rank ${n.rank} on ${n.node}`] || 0) + 1; });
  const list = Object.entries(count).sort((a, b) => b[1] - a[1]);
  if (!list.length) return "no straggler in any window";
  return "straggler: " + list.map(([who, n]) => `${who} in ${n} of ${h.windows.length} windows`).join("; ");
}

function renderRun(d) {
  document.getElementById("none").hidden = true;
  document.getElementById("run").hidden = false;
  document.getElementById("run-title").textContent = `${d.run.team}/${d.run.run}`;
  const s = d.summary || {};
  document.getElementById("run-facts").textContent =
    `${d.run.state} · source ${d.source} · ${d.members.filter((m) => m.rank !== null).length} ranks` +
    (s.final_loss !== undefined ? ` · loss ${fmt(s.first_loss)} → ${fmt(s.final_loss)}` : "") +
    (s.steps_per_s !== undefined ? ` · ${fmt(s.steps_per_s, 3)} steps/s` : "");
  const x = d.series.step;
  plot("loss-plot", x, [{label: "loss", values: d.series.loss}]);
  plot("step-plot", x, [{label: "step time", values: d.series.step_time}]);
  plot("tput-plot", x, [{label: "throughput", values: d.series.throughput}]);
  const ranks = Object.keys(d.rank_step_time.ranks).sort((a, b) => a - b);
  plot("rank-plot", d.rank_step_time.steps, ranks.map((r) => ({label: `rank ${r}`, values: d.rank_step_time.ranks[r]})));
  renderHeatmap(d.stragglers);
  renderAux(d.aux);
  const services = Object.keys(d.aux_queues.services).sort();
  document.getElementById("aux-queues").hidden = !services.length;
  if (services.length) {
    plot("queue-plot", d.aux_queues.steps, services.map((s) => ({label: s, values: d.aux_queues.services[s]})));
  }
  renderMembers(d.members);
  if (window.runShown) window.runShown(d);
}

async function refresh() {
  try {
    const {runs} = await getJSON("/api/runs");
    selected = pickFromHash();
    renderRuns(runs);
    if (selected) {
      const q = new URLSearchParams({team: selected.team, run: selected.run});
      renderRun(await getJSON(`/api/run?${q}`));
    }
    document.getElementById("status").textContent = `updated ${new Date().toLocaleTimeString()}`;
    document.body.dataset.refreshed = String(Number(document.body.dataset.refreshed || 0) + 1);
  } catch (err) {
    document.getElementById("status").textContent = `error: ${err.message}`;
  }
}

window.addEventListener("hashchange", refresh);
refresh();
setInterval(refresh, REFRESH_MS);
