// runner ui: a run's log lines (filtered by rank, pod, node, level, text and time; opened at
// the failure) and its post-mortem (crash bundles, the failure analysis). docs/ui.md.
"use strict";
const logs = {run: null, params: {}, timer: null};

const utc = (t) => (t === null || t === undefined) ? "" :
  new Date(t * 1000).toISOString().replace("T", " ").replace("Z", "");
const toInput = (t) => (t === null || t === undefined) ? "" : new Date(t * 1000).toISOString().slice(0, 19);
const fromInput = (v) => v ? Date.parse(`${v}Z`) / 1000 : null;

function options(select, values, keep) {
  const current = keep ?? select.value;
  select.replaceChildren(el("option", {value: ""}, "all"),
    ...values.map((v) => el("option", {value: String(v)}, String(v))));
  select.value = values.map(String).includes(String(current)) ? String(current) : "";
}

function renderLogs(d) {
  const form = document.getElementById("log-filters");
  const f = d.facets || {};
  options(form.rank, f.ranks || [], d.window && d.window.rank !== undefined && d.window.rank !== null ?
    d.window.rank : logs.params.rank);
  options(form.pod, f.pods || []);
  options(form.node, f.nodes || []);
  if (d.window && d.window.since) form.since.value = toInput(d.window.since);
  if (d.window && d.window.until) form.until.value = toInput(d.window.until);
  const where = document.getElementById("log-where");
  const fail = d.failure;
  where.textContent = d.note || (d.window && d.window.at_failure && fail ?
    `at the failure: rank ${fail.rank} at ${utc(fail.ts)} (${(fail.error || fail.line || "").slice(0, 120)})` :
    `${d.lines.length} lines`);
  document.querySelector("#logs tbody").replaceChildren(...d.lines.map((l) =>
    el("tr", {class: l.level || "", "data-rank": String(l.rank)},
      el("td", {}, utc(l.ts)), el("td", {}, l.rank >= 0 ? String(l.rank) : "-"), el("td", {}, l.pod || "-"),
      el("td", {}, l.node || "-"), el("td", {}, l.level || ""), el("td", {class: "line"}, l.line))));
  document.getElementById("logs").dataset.lines = String(d.lines.length);
}

async function loadLogs(params) {
  if (!logs.run) return;
  logs.params = params;
  const q = new URLSearchParams({team: logs.run.team, run: logs.run.run});
  for (const [k, v] of Object.entries(params)) if (v !== "" && v !== null && v !== undefined) q.set(k, v);
  try {
    renderLogs(await getJSON(`/api/logs?${q}`));
  } catch (err) {
    document.getElementById("log-where").textContent = `error: ${err.message}`;
  }
}

function formParams() {
  const form = document.getElementById("log-filters");
  return {rank: form.rank.value, pod: form.pod.value, node: form.node.value, level: form.level.value,
          text: form.text.value, since: fromInput(form.since.value), until: fromInput(form.until.value)};
}

function renderVerdict(v) {
  const who = (c) => [c.rank !== null ? `rank ${c.rank}` : "", c.pod ? `pod ${c.pod}` : "",
                      c.node ? `node ${c.node}` : ""].filter(Boolean).join(" ");
  const culprits = v.culprits.map((c) => {
    const b = el("button", {type: "button", class: "culprit"}, who(c));
    b.onclick = () => loadLogs({...formParams(), rank: c.rank ?? "", node: c.rank === null ? c.node : ""});
    return b;
  });
  document.getElementById("verdict").replaceChildren(
    el("p", {}, el("span", {class: "decision"}, `${v.decision}`), ` · ${v.category} · confidence ${fmt(v.confidence, 2)} (${v.source})`),
    el("p", {}, v.why),
    el("p", {}, "culprits: ", ...(culprits.length ? culprits : ["-"])),
    el("ul", {}, ...v.evidence.map((e) => el("li", {}, `${e.source}: ${e.line}`))),
    el("p", {}, `proposal: ${(v.proposal && v.proposal.text) || "-"}`));
}

window.runShown = (d) => {
  const same = logs.run && logs.run.team === d.run.team && logs.run.run === d.run.run;
  const box = document.getElementById("postmortem");
  const bundles = d.run.bundles || [];
  box.hidden = !(bundles.length || d.run.state === "failed");
  document.getElementById("bundles").textContent = bundles.length ? `crash bundles: ${bundles.join(", ")}` : "";
  if (same) return;
  logs.run = {team: d.run.team, run: d.run.run};
  document.getElementById("verdict").replaceChildren();
  document.getElementById("log-filters").reset();
  loadLogs({});
};

document.getElementById("log-filters").addEventListener("submit", (e) => { e.preventDefault(); loadLogs(formParams()); });
document.getElementById("log-failure").onclick = () => { document.getElementById("log-filters").reset(); loadLogs({}); };
document.getElementById("log-newest").onclick = () => loadLogs({...formParams(), since: null, until: 4e9});
document.getElementById("analyse").onclick = async () => {
  const q = new URLSearchParams(logs.run);
  try { renderVerdict(await getJSON(`/api/verdict?${q}`)); } catch (err) {
    document.getElementById("verdict").replaceChildren(el("p", {class: "empty"}, `error: ${err.message}`));
  }
};
