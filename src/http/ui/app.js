// The live cluster page: reads this oracle's REST API every few seconds and draws the cluster.
// Plain browser JavaScript, no build step, no dependencies. Every value from the API reaches the
// page as text (textContent, SVG attributes), never as markup: silo ids, roles and grain ids are
// the silos' own words.
"use strict";

// `?refresh=` in ms, never below a second: each refresh is a dozen requests or more.
const REFRESH_MS = Math.max(1000, Number(new URLSearchParams(location.search).get("refresh")) || 2000);
const DISTRIBUTION_EVERY = 2; // the distribution counts the whole directory: every other refresh
const MIGRATION_SILOS = 12; // silos whose pending migrations are read per refresh, busiest first
const STORAGE = "placement-oracle.credential";
const API = "../v1";

const state = {
  cluster: "",
  paused: false,
  timer: null,
  tick: 0,
  generation: 0, // grows with every refresh begun: an older one that ends later draws nothing
  selected: null, // the silo whose grains are shown
  silos: [],
  distribution: null,
  lastUpdate: 0,
};

// ---------------------------------------------------------------- DOM helpers

/** An element with attributes and children (strings become text nodes). */
function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "class") node.className = value;
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

const SVG_NS = "http://www.w3.org/2000/svg";

/** An SVG element with attributes and children. */
function svg(tag, attrs = {}, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value !== null && value !== undefined) node.setAttribute(name, String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function fill(target, ...children) {
  const node = typeof target === "string" ? document.getElementById(target) : target;
  node.replaceChildren(...children.flat(Infinity).filter((c) => c !== null && c !== undefined));
  return node;
}

/** Bar colours by metric (SVG fills take plain colours; the sheet uses the same ones). */
const COLOURS = {
  cpu: "#d9822b",
  memory: "#2b7bd9",
  activations: "#7a4fd1",
  directory: "#2e9e6b",
  out: "#d64545",
  in: "#2e9e6b",
};

const clamp01 = (x) => (Number.isFinite(x) ? Math.min(1, Math.max(0, x)) : 0);

/**
 * A horizontal bar: `fraction` of its width filled; `tick` (a fraction too) marks a second
 * value, e.g. the smoothed CPU beside the raw one.
 */
function bar(metric, fraction, figure, { tick = null, title = "" } = {}) {
  const width = 110;
  const height = 12;
  const shape = svg(
    "svg",
    { width, height, viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": `${metric} ${figure}` },
    svg("rect", { x: 0, y: 0, width, height, rx: 2, fill: "#eef2f6" }),
    svg("rect", {
      class: "fill",
      x: 0,
      y: 0,
      width: (clamp01(fraction) * width).toFixed(1),
      height,
      rx: 2,
      fill: COLOURS[metric],
    }),
    tick === null
      ? null
      : svg("rect", { x: (clamp01(tick) * width - 1).toFixed(1), y: 0, width: 2, height, fill: "#1d2430" }),
    title ? svg("title", {}, title) : null,
  );
  return el(
    "span",
    { class: "bar", "data-metric": metric, "data-value": clamp01(fraction).toFixed(3) },
    shape,
    el("span", { class: "figure" }, figure),
  );
}

function badge(status) {
  return el("span", { class: `badge ${status}` }, status.replace("_", " "));
}

const shortSilo = (id) => id;

function bytes(n) {
  if (n === null || n === undefined) return "–";
  const units = ["B", "KB", "MB", "GB", "TB"];
  let value = n;
  let unit = 0;
  while (value >= 1000 && unit < units.length - 1) {
    value /= 1000;
    unit += 1;
  }
  return `${value.toFixed(value < 10 && unit > 0 ? 1 : 0)} ${units[unit]}`;
}

function age(ms) {
  if (ms < 1000) return `${Math.max(0, Math.round(ms))} ms`;
  if (ms < 120000) return `${(ms / 1000).toFixed(1)} s`;
  return `${Math.round(ms / 60000)} min`;
}

// ---------------------------------------------------------------- the API

class ApiError extends Error {
  constructor(status, problem) {
    super(problem && problem.detail ? problem.detail : `HTTP ${status}`);
    this.status = status;
    this.problem = problem;
  }
}

function credential() {
  return sessionStorage.getItem(STORAGE) || "";
}

async function api(method, path, body) {
  const headers = { accept: "application/json" };
  const token = credential();
  if (token) headers.authorization = `Bearer ${token}`;
  if (body !== undefined) headers["content-type"] = "application/json";
  const response = await fetch(`${API}${path}`, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    cache: "no-store",
  });
  const text = await response.text();
  let parsed = null;
  try {
    parsed = text ? JSON.parse(text) : null;
  } catch {
    parsed = null;
  }
  if (!response.ok) throw new ApiError(response.status, parsed);
  return parsed;
}

const clusterPath = (rest, cluster = state.cluster) => `/clusters/${encodeURIComponent(cluster)}${rest}`;

/** Every silo of `cluster`, following the cursor (at most ten pages of 1000). */
async function allSilos(cluster) {
  const silos = [];
  let cursor = null;
  for (let page = 0; page < 10; page += 1) {
    const query = cursor ? `?limit=1000&cursor=${encodeURIComponent(cursor)}` : "?limit=1000";
    const answer = await api("GET", clusterPath(`/silos${query}`, cluster));
    silos.push(...answer.silos);
    cursor = answer.next_cursor;
    if (!cursor) break;
  }
  return silos;
}

// ---------------------------------------------------------------- drawing

function showProblem(error) {
  const node = document.getElementById("problem");
  if (!error) {
    node.hidden = true;
    return;
  }
  let text = error.message;
  if (error.status === 401) {
    text = "This oracle asks for a credential: paste a cluster key or the admin token above. " + text;
  } else if (error.status === 403) {
    text = "This credential may not read this cluster. " + text;
  } else if (error.status === 404) {
    text = `No cluster “${state.cluster}” here (a cluster exists once a silo has sent a heartbeat).`;
  }
  node.textContent = text;
  node.hidden = false;
}

function card(label, value, detail, attrs = {}) {
  return el(
    "div",
    { class: "card", ...attrs },
    el("div", { class: "label" }, label),
    el("div", { class: "value" }, value),
    detail ? el("div", { class: "detail" }, detail) : null,
  );
}

function drawSummary(silos, distribution, rebalancer, repartitioner) {
  const byStatus = { active: 0, joining: 0, shutting_down: 0, dead: 0 };
  for (const silo of silos) byStatus[silo.status] = (byStatus[silo.status] || 0) + 1;
  const open = distribution ? distribution.migrations.reduce((sum, f) => sum + f.count, 0) : null;
  const ratio = rebalancer.max_entropy > 0 ? rebalancer.entropy / rebalancer.max_entropy : null;
  fill(
    "summary",
    card(
      "Silos",
      String(silos.length),
      `${byStatus.active} active · ${byStatus.joining} joining · ${byStatus.shutting_down} shutting down · ${byStatus.dead} dead`,
      { id: "summary-silos" },
    ),
    card(
      "Grains in the directory",
      distribution ? distribution.activations.toLocaleString() : "…",
      "registered activations",
      { id: "summary-grains" },
    ),
    card("Open migrations", open === null ? "…" : open.toLocaleString(), "moves issued, not completed yet", {
      id: "summary-migrations",
    }),
    card(
      "Rebalancer",
      rebalancer.session === null ? rebalancer.state : `session ${rebalancer.session}`,
      ratio === null
        ? "no cycle yet"
        : `cycle ${rebalancer.cycle} · entropy ${(ratio * 100).toFixed(1)} % of max · deviation ${rebalancer.deviation.toFixed(4)}`,
      { id: "summary-rebalancer" },
    ),
    card(
      "Repartitioner",
      `${repartitioner.rounds} round${repartitioner.rounds === 1 ? "" : "s"}`,
      `remote calls ${(repartitioner.estimated_remote_fraction * 100).toFixed(1)} % · ${repartitioner.tracked_edges} edges tracked`,
      { id: "summary-repartitioner" },
    ),
  );
}

function drawSilos(silos, distribution) {
  const shares = new Map((distribution ? distribution.silos : []).map((s) => [s.silo, s]));
  const maxReported = Math.max(1, ...silos.map((s) => s.load.activation_count || 0));
  const maxDirectory = Math.max(1, ...[...shares.values()].map((s) => s.activations));
  const rows = [];
  for (const silo of silos) {
    const share = shares.get(silo.silo);
    const load = silo.load;
    const cpu = load.cpu_usage;
    const smoothedCpu = silo.smoothed.cpu_usage;
    const memory = load.memory_usage_bytes;
    const limit = load.max_available_memory_bytes;
    const selected = state.selected === silo.silo;
    rows.push(
      el(
        "tr",
        {
          class: `silo ${silo.status}${selected ? " selected" : ""}`,
          "data-silo": silo.silo,
          "data-status": silo.status,
          tabindex: 0,
          onclick: () => selectSilo(silo.silo),
          onkeydown: (event) => event.key === "Enter" && selectSilo(silo.silo),
        },
        el("td", { class: "mono" }, shortSilo(silo.silo)),
        el("td", {}, badge(silo.status)),
        el("td", {}, silo.role || "–"),
        el(
          "td",
          {},
          cpu === null
            ? "–"
            : bar("cpu", cpu / 100, `${cpu.toFixed(0)} %`, {
                tick: smoothedCpu === null ? null : smoothedCpu / 100,
                title: `raw ${cpu.toFixed(1)} %, smoothed ${smoothedCpu === null ? "–" : smoothedCpu.toFixed(1)} %`,
              }),
        ),
        el(
          "td",
          {},
          memory === null
            ? "–"
            : bar("memory", limit ? memory / limit : 0, bytes(memory), {
                title: `${bytes(memory)} of ${bytes(limit)}`,
              }),
        ),
        el(
          "td",
          {},
          load.activation_count === null
            ? "–"
            : bar("activations", load.activation_count / maxReported, load.activation_count.toLocaleString()),
        ),
        el(
          "td",
          {},
          share
            ? bar("directory", share.activations / maxDirectory, share.activations.toLocaleString())
            : "–",
        ),
        el(
          "td",
          { class: "num" },
          share ? `${share.migrating_out.toLocaleString()} / ${share.migrating_in.toLocaleString()}` : "–",
        ),
        el("td", { class: "num" }, age(silo.last_heartbeat_age_ms)),
      ),
    );
    if (selected) rows.push(el("tr", { class: "detail" }, el("td", { colspan: 9, id: "silo-detail" }, "…")));
  }
  fill(document.querySelector("#silos tbody"), rows);
  // The tryout's silo list changes only when membership does: rebuilt every refresh, an open
  // list would close under the user's pointer.
  const tryoutSilo = document.getElementById("tryout-silo");
  const live = silos.filter((s) => s.status !== "dead").map((s) => s.silo);
  if (tryoutSilo.dataset.silos !== live.join(" ")) {
    const chosen = tryoutSilo.value;
    fill(
      tryoutSilo,
      el("option", { value: "" }, "(none)"),
      live.map((id) => el("option", { value: id, selected: id === chosen }, id)),
    );
    tryoutSilo.dataset.silos = live.join(" ");
  }
}

/** The selected silo's grains and migrations; `current()` says whether to draw them still. */
async function drawSiloDetail(current = () => true) {
  if (!document.getElementById("silo-detail") || !state.selected) return;
  const silo = encodeURIComponent(state.selected);
  const [grains, migrations] = await Promise.all([
    api("GET", clusterPath(`/activations?silo=${silo}&limit=60`)),
    api("GET", clusterPath(`/migrations?silo=${silo}&limit=20`)),
  ]);
  const cell = document.getElementById("silo-detail");
  if (!cell || !current()) return;
  fill(
    cell,
    el("div", {}, el("strong", {}, "Grains on this silo"), grains.next_cursor ? " (the first 60)" : ""),
    el(
      "div",
      { class: "grains", id: "silo-grains" },
      grains.activations.length === 0
        ? el("span", { class: "muted" }, "none in the directory")
        : grains.activations.map((a) => el("code", { title: `${a.strategy}, epoch ${a.epoch}` }, a.grain)),
    ),
    el("div", {}, el("strong", {}, "Migrations it should carry out"), migrations.next_cursor ? " (the first 20)" : ""),
    migrations.migrations.length === 0
      ? el("div", { class: "muted" }, "none pending")
      : el(
          "div",
          { class: "grains" },
          migrations.migrations.map((m) => el("code", {}, `${m.grain} → ${m.to} (${m.reason})`)),
        ),
  );
}

/**
 * A column per silo: its directory entries, the part open migrations take away (red, on top of
 * what stays) and what they bring (green, above), against the mean. The lopsided cluster at a
 * glance.
 */
function drawSpread(silos, distribution) {
  if (!distribution) return;
  const shares = new Map(distribution.silos.map((s) => [s.silo, s]));
  const columns = silos.filter((s) => s.status !== "dead").map((s) => ({
    silo: s.silo,
    status: s.status,
    share: shares.get(s.silo) || { activations: 0, migrating_out: 0, migrating_in: 0 },
  }));
  if (columns.length === 0) {
    fill("spread", el("p", { class: "muted" }, "No live silo."));
    return;
  }
  const height = 170;
  const top = 12;
  const bottom = columns.length <= 24 ? 62 : 8;
  const step = Math.max(4, Math.min(64, Math.floor(1100 / columns.length)));
  const width = Math.max(320, columns.length * step + 110);
  const largest = Math.max(1, ...columns.map((c) => c.share.activations + c.share.migrating_in));
  // Open migrations may outlive their entries for a moment (until the stale ones are cancelled).
  const scale = (n) => (Math.max(0, n) / largest) * (height - top - bottom);
  const base = height - bottom;
  const mean = columns.reduce((sum, c) => sum + c.share.activations, 0) / columns.length;
  const parts = columns.map((c, i) => {
    const x = 100 + i * step;
    const w = Math.max(2, step - Math.max(2, step / 5));
    const stays = Math.max(0, c.share.activations - c.share.migrating_out);
    const leaving = Math.min(c.share.migrating_out, c.share.activations);
    const label = columns.length <= 24 ? c.silo.replace(/@.*/, "") : null;
    return svg(
      "g",
      { class: "column", "data-silo": c.silo, "data-activations": c.share.activations },
      svg("rect", { x, y: base - scale(stays), width: w, height: scale(stays), fill: COLOURS.directory }),
      svg("rect", { x, y: base - scale(c.share.activations), width: w, height: scale(leaving), fill: COLOURS.out }),
      svg("rect", { x, y: base - scale(c.share.activations + c.share.migrating_in), width: w, height: scale(c.share.migrating_in), fill: COLOURS.in, "fill-opacity": 0.35 }),
      svg("title", {}, `${c.silo} (${c.status}): ${c.share.activations} grains, ${c.share.migrating_out} leaving, ${c.share.migrating_in} arriving`),
      label
        ? svg("text", { x: x + w / 2, y: base + 10, "text-anchor": "end", "font-size": 10, fill: "#6b7480", transform: `rotate(-35 ${x + w / 2} ${base + 10})` }, label)
        : null,
      step >= 28 ? svg("text", { x: x + w / 2, y: base - scale(c.share.activations + c.share.migrating_in) - 3, "text-anchor": "middle", "font-size": 10, fill: "#1d2430" }, c.share.activations) : null,
    );
  });
  fill(
    "spread",
    svg(
      "svg",
      { id: "spread-chart", width, height, viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": "grains per silo" },
      svg("line", { x1: 96, x2: width - 6, y1: base, y2: base, stroke: "#dde2e8" }),
      parts,
      svg("line", { x1: 96, x2: width - 6, y1: base - scale(mean), y2: base - scale(mean), stroke: "#1d2430", "stroke-dasharray": "4 3" }),
      svg("text", { x: 90, y: base - scale(mean) + 3, "text-anchor": "end", "font-size": 10, fill: "#1d2430" }, `mean ${Math.round(mean)}`),
    ),
  );
}

/** Pending migrations of the busiest sources, and a bar per silo pair. */
async function drawMigrations(distribution, nowMs, current) {
  const flows = distribution ? distribution.migrations : [];
  const total = flows.reduce((sum, f) => sum + f.count, 0);
  const largest = Math.max(1, ...flows.map((f) => f.count));
  fill(
    "flows",
    flows.length === 0
      ? el("p", { class: "muted" }, "No migration is open.")
      : el(
          "table",
          { id: "flow-table" },
          el("thead", {}, el("tr", {}, el("th", {}, "from → to"), el("th", {}, `open (${total})`))),
          el(
            "tbody",
            {},
            flows
              .slice()
              .sort((a, b) => b.count - a.count)
              .slice(0, 12)
              .map((f) =>
                el(
                  "tr",
                  {},
                  el("td", { class: "mono" }, `${f.from} → ${f.to}`),
                  el("td", {}, bar("out", f.count / largest, f.count.toLocaleString())),
                ),
              ),
          ),
        ),
  );
  const sources = (distribution ? distribution.silos : [])
    .filter((s) => s.migrating_out > 0)
    .sort((a, b) => b.migrating_out - a.migrating_out)
    .slice(0, MIGRATION_SILOS);
  const pages = await Promise.all(
    sources.map((s) => api("GET", clusterPath(`/migrations?silo=${encodeURIComponent(s.silo)}&limit=5`))),
  );
  if (!current()) return;
  const migrations = pages.flatMap((page) => page.migrations).sort((a, b) => a.id - b.id);
  const shown = 15;
  const more = total - Math.min(shown, migrations.length);
  fill(
    document.querySelector("#migrations tbody"),
    migrations.slice(0, shown).map((m) =>
      el(
        "tr",
        { "data-migration": m.id },
        el("td", { class: "mono" }, m.grain),
        el("td", { class: "mono" }, m.from),
        el("td", { class: "mono" }, m.to),
        el("td", {}, m.reason),
        el("td", { class: "num" }, age(nowMs - m.created_at_ms)),
      ),
    ),
    more > 0 ? el("tr", {}, el("td", { colspan: 5, class: "muted" }, `… and ${more.toLocaleString()} more (oldest first)`)) : null,
  );
}

/** Entropy over the last cycles, as a line against its maximum. */
function entropyChart(reports) {
  const width = 380;
  const height = 90;
  const pad = 24;
  if (reports.length === 0) return el("p", { class: "muted" }, "No cycle has run yet.");
  const ratios = reports.map((r) => (r.max_entropy > 0 ? r.entropy / r.max_entropy : 1));
  const low = Math.min(...ratios);
  const floor = Math.max(0, Math.min(low - 0.01, 0.99));
  const x = (i) => pad + (reports.length === 1 ? 0 : (i * (width - 2 * pad)) / (reports.length - 1));
  const y = (ratio) => height - pad / 2 - ((ratio - floor) / (1 - floor || 1)) * (height - pad);
  const points = ratios.map((r, i) => `${x(i).toFixed(1)},${y(r).toFixed(1)}`).join(" ");
  return svg(
    "svg",
    { id: "rebalancer-entropy", width, height, viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": "entropy over cycles" },
    svg("line", { x1: pad, x2: width - pad, y1: y(1), y2: y(1), stroke: "#8a8f98", "stroke-dasharray": "3 3" }),
    svg("text", { x: width - pad, y: y(1) - 3, "text-anchor": "end", "font-size": 10, fill: "#6b7480" }, "maximum (balanced)"),
    svg("polyline", { points, fill: "none", stroke: "#7a4fd1", "stroke-width": 2 }),
    ratios.map((r, i) =>
      svg("circle", { class: "cycle", cx: x(i).toFixed(1), cy: y(r).toFixed(1), r: 3, fill: "#7a4fd1" },
        svg("title", {}, `session ${reports[i].session} cycle ${reports[i].cycle}: ${(r * 100).toFixed(2)} % of max, ${reports[i].outcome}`)),
    ),
    svg("text", { x: pad, y: height - 2, "font-size": 10, fill: "#6b7480" }, `entropy ÷ maximum, last ${reports.length} cycles (from ${(floor * 100).toFixed(0)} %)`),
  );
}

function drawRebalancer(rebalancer) {
  const reports = rebalancer.reports.slice(-12);
  fill(
    "rebalancer",
    el(
      "p",
      {},
      `${rebalancer.state}${rebalancer.enabled ? ", sessions on their timers" : ", sessions only on request"}` +
        (rebalancer.session === null ? " · no session running" : ` · session ${rebalancer.session}, cycle ${rebalancer.cycle}`) +
        (rebalancer.lease ? ` · lease: ${rebalancer.lease.holder}` : ""),
    ),
    entropyChart(reports),
    reports.length === 0
      ? null
      : el(
          "table",
          { id: "cycles" },
          el("thead", {}, el("tr", {}, ["session", "cycle", "outcome", "moves", "deviation"].map((h) => el("th", {}, h)))),
          el(
            "tbody",
            {},
            reports
              .slice()
              .reverse()
              .slice(0, 6)
              .map((r) =>
                el(
                  "tr",
                  {},
                  el("td", { class: "num" }, r.session),
                  el("td", { class: "num" }, r.cycle),
                  el("td", {}, r.outcome),
                  el("td", { class: "num" }, r.moves.reduce((sum, m) => sum + m.count, 0)),
                  el("td", { class: "num" }, r.deviation.toFixed(4)),
                ),
              ),
          ),
        ),
  );
}

function drawRepartitioner(repartitioner) {
  const rounds = repartitioner.last_rounds.slice(0, 8);
  fill(
    "repartitioner",
    el(
      "p",
      {},
      `${repartitioner.enabled ? "rounds on their timer" : "rounds only on request"} · ${repartitioner.planner} planner · ` +
        `${repartitioner.tracked_edges.toLocaleString()} of ${repartitioner.max_edge_count.toLocaleString()} edges tracked · ` +
        `${repartitioner.pending_edges.toLocaleString()} reports waiting · ${repartitioner.anchored_grains} anchored`,
    ),
    rounds.length === 0
      ? el("p", { class: "muted" }, "No round has run yet.")
      : el(
          "table",
          { id: "rounds" },
          el("thead", {}, el("tr", {}, ["round", "planner", "moves", "remote calls before → after"].map((h) => el("th", {}, h)))),
          el(
            "tbody",
            {},
            rounds.map((r) =>
              el(
                "tr",
                { "data-round": r.round },
                el("td", { class: "num" }, r.round),
                el("td", {}, r.planner),
                el("td", { class: "num" }, r.moves),
                el(
                  "td",
                  {},
                  bar("out", r.remote_fraction_before, `${(r.remote_fraction_before * 100).toFixed(1)} %`),
                  " → ",
                  bar("in", r.remote_fraction_after, `${(r.remote_fraction_after * 100).toFixed(1)} %`),
                ),
              ),
            ),
          ),
        ),
  );
}

// ---------------------------------------------------------------- the tryout

const TERM_COLOURS = ["#d9822b", "#2b7bd9", "#7a4fd1", "#2e9e6b", "#d64545", "#8a8f98"];

/** Each scored candidate's score as a bar stacked from its terms; the chosen silo marked. */
function scoreChart(scores, chosen) {
  const terms = [...new Set(scores.flatMap((s) => Object.keys(s.terms)))].sort();
  const colour = (term) => TERM_COLOURS[terms.indexOf(term) % TERM_COLOURS.length];
  const rowHeight = 18;
  const labelWidth = 240;
  const barWidth = 300;
  const height = scores.length * rowHeight + 4;
  const largest = Math.max(1e-9, ...scores.map((s) => s.score));
  const rows = scores.map((score, i) => {
    const y = i * rowHeight + 2;
    let x = labelWidth;
    const parts = terms
      .filter((t) => score.terms[t] > 0)
      .map((t) => {
        const w = (score.terms[t] / largest) * barWidth;
        const part = svg("rect", { x: x.toFixed(1), y, width: w.toFixed(1), height: rowHeight - 5, fill: colour(t) },
          svg("title", {}, `${t}: ${score.terms[t].toFixed(3)}`));
        x += w;
        return part;
      });
    return svg(
      "g",
      { class: `score${score.silo === chosen ? " chosen" : ""}`, "data-silo": score.silo },
      svg("text", { x: 0, y: y + 10, "font-size": 11, "font-weight": score.silo === chosen ? 700 : 400, fill: "#1d2430" },
        (score.silo === chosen ? "▶ " : "") + score.silo),
      parts,
      svg("text", { x: (x + 4).toFixed(1), y: y + 10, "font-size": 11, fill: "#6b7480" }, score.score.toFixed(3)),
    );
  });
  return [
    el("div", { class: "legend" }, terms.map((t) => el("span", {}, el("span", { class: "swatch", "data-term": t }), t))),
    svg("svg", { id: "score-chart", width: labelWidth + barWidth + 60, height, role: "img", "aria-label": "candidate scores" }, rows),
  ];
}

async function tryPlacement(event) {
  event.preventDefault();
  const body = { grain: document.getElementById("tryout-grain").value.trim() };
  const silo = document.getElementById("tryout-silo").value;
  const strategy = document.getElementById("tryout-strategy").value;
  if (silo) body.requesting_silo = silo;
  if (strategy) body.strategy = strategy;
  const target = document.getElementById("tryout-result");
  try {
    const preview = await api("POST", clusterPath("/placements/preview"), body);
    drawPreview(preview);
  } catch (error) {
    const fields = error.problem && error.problem.errors ? error.problem.errors.map((f) => `${f.field}: ${f.message}`) : [];
    fill(target, el("p", { class: "problem", id: "tryout-problem" }, error.message, fields.length ? el("ul", {}, fields.map((f) => el("li", {}, f))) : null));
  }
}

function drawPreview(preview) {
  const explanation = preview.explanation;
  // Swatches take their colour from the chart's terms (a CSSOM property, not a style attribute).
  const parts = [
    el(
      "p",
      { class: "verdict", id: "tryout-verdict", "data-silo": preview.silo },
      `${preview.strategy} would place `,
      el("strong", {}, preview.grain),
      " on ",
      el("strong", {}, preview.silo),
      ` (rule: ${explanation.rule})`,
      preview.registers ? "" : " — a stateless worker, never registered",
    ),
    preview.existing
      ? el(
          "p",
          { id: "tryout-existing" },
          `It is already activation ${preview.existing.epoch} on ${preview.existing.silo}: a placement now answers that (outcome “existing”).`,
        )
      : null,
    explanation.hint ? el("p", {}, `Hint: ${explanation.hint}`) : null,
    el("p", {}, el("strong", {}, `Candidates (${explanation.candidates.length})`)),
    el("div", { class: "grains", id: "tryout-candidates" },
      explanation.candidates.map((c) => el("code", { class: c === preview.silo ? "chosen" : "" }, (c === preview.silo ? "▶ " : "") + c))),
    explanation.scores.length ? scoreChart(explanation.scores, preview.silo) : el("p", { class: "muted" }, "This strategy does not score candidates."),
    explanation.filters.length
      ? [el("p", {}, el("strong", {}, "Filters")), el("ul", { class: "reasons" }, explanation.filters.map((f) => el("li", {}, `${f.filter}: removed ${f.removed.length ? f.removed.join(", ") : "nothing"}`)))]
      : null,
    explanation.excluded.length
      ? [el("p", {}, el("strong", {}, `Left out (${explanation.excluded.length})`)), el("ul", { class: "reasons", id: "tryout-excluded" }, explanation.excluded.map((x) => el("li", {}, el("code", {}, x.silo), ` ${x.reason}`)))]
      : null,
  ];
  fill("tryout-result", parts);
  const chart = document.getElementById("score-chart");
  if (chart) {
    const terms = [...new Set(explanation.scores.flatMap((s) => Object.keys(s.terms)))].sort();
    for (const swatch of document.querySelectorAll("#tryout-result .swatch")) {
      swatch.style.background = TERM_COLOURS[terms.indexOf(swatch.dataset.term) % TERM_COLOURS.length];
    }
  }
}

// ---------------------------------------------------------------- refresh loop

async function refresh() {
  const cluster = state.cluster;
  if (!cluster) return;
  state.tick += 1;
  const generation = ++state.generation;
  const status = document.getElementById("status");
  try {
    const readDistribution = state.distribution === null || state.tick % DISTRIBUTION_EVERY === 0;
    const [silos, rebalancer, repartitioner, distribution] = await Promise.all([
      allSilos(cluster),
      api("GET", clusterPath("/rebalancer", cluster)),
      api("GET", clusterPath("/repartitioner", cluster)),
      readDistribution ? api("GET", clusterPath("/distribution", cluster)) : Promise.resolve(state.distribution),
    ]);
    // A later refresh (of this cluster or another one picked meanwhile) draws instead.
    if (generation !== state.generation) return;
    state.silos = silos;
    state.distribution = distribution;
    // Ages of migrations are told on the oracle's clock, read off the silos' heartbeat stamps.
    const nowMs = silos.length ? Math.max(...silos.map((s) => s.last_heartbeat_at_ms + s.last_heartbeat_age_ms)) : Date.now();
    drawSummary(silos, distribution, rebalancer, repartitioner);
    drawSpread(silos, distribution);
    drawSilos(silos, distribution);
    drawRebalancer(rebalancer);
    drawRepartitioner(repartitioner);
    const current = () => generation === state.generation;
    await Promise.all([drawMigrations(distribution, nowMs, current), drawSiloDetail(current)]);
    if (!current()) return;
    showProblem(null);
    state.lastUpdate = Date.now();
    document.body.dataset.loaded = "true";
    status.textContent = `Cluster ${state.cluster}: updated ${new Date(state.lastUpdate).toLocaleTimeString()}, every ${REFRESH_MS / 1000} s.`;
  } catch (error) {
    if (generation !== state.generation) return;
    showProblem(error);
    status.textContent = `Cluster ${cluster}: the last refresh failed.`;
  }
}

function schedule() {
  clearTimeout(state.timer);
  if (state.paused) return;
  state.timer = setTimeout(async () => {
    await refresh();
    schedule();
  }, REFRESH_MS);
}

function selectSilo(silo) {
  state.selected = state.selected === silo ? null : silo;
  drawSilos(state.silos, state.distribution);
  drawSiloDetail().catch(showProblem);
}

/**
 * The clusters this credential may list (the admin's, or anyone's in open mode); false when it
 * may not list them.
 */
async function loadClusters() {
  const select = document.getElementById("cluster-select");
  const input = document.getElementById("cluster-input");
  try {
    const answer = await api("GET", "/clusters?limit=1000");
    fill(select, answer.clusters.map((name) => el("option", { value: name, selected: name === state.cluster }, name)));
    select.hidden = answer.clusters.length === 0;
    input.hidden = answer.clusters.length > 0;
    if (!state.cluster && answer.clusters.length) state.cluster = answer.clusters[0];
    return true;
  } catch {
    // A cluster key may not list clusters: the name is typed instead.
    select.hidden = true;
    input.hidden = false;
    return false;
  }
}

async function connect(event) {
  if (event) event.preventDefault();
  const token = document.getElementById("credential").value.trim();
  if (token) sessionStorage.setItem(STORAGE, token);
  else if (event) sessionStorage.removeItem(STORAGE);
  const select = document.getElementById("cluster-select");
  const input = document.getElementById("cluster-input");
  const wanted = !input.hidden && input.value.trim() ? input.value.trim() : !select.hidden ? select.value : state.cluster;
  if (wanted !== state.cluster) {
    // Nothing drawn for the previous cluster may stand for this one.
    Object.assign(state, { cluster: wanted, distribution: null, selected: null, silos: [], tick: 0 });
  }
  const listed = await loadClusters();
  if (!state.cluster) {
    document.getElementById("status").textContent = listed
      ? "No cluster yet: one exists once a silo has sent a heartbeat."
      : "Type the cluster's name (a cluster key cannot list the clusters).";
    return;
  }
  history.replaceState(null, "", `#cluster=${encodeURIComponent(state.cluster)}`);
  await refresh();
  schedule();
}

function start() {
  const fromHash = new URLSearchParams(location.hash.slice(1)).get("cluster");
  if (fromHash) {
    state.cluster = fromHash;
    document.getElementById("cluster-input").value = fromHash;
  }
  document.getElementById("credential").value = credential();
  document.getElementById("connect").addEventListener("submit", connect);
  document.getElementById("cluster-select").addEventListener("change", () => connect(null));
  document.getElementById("tryout").addEventListener("submit", tryPlacement);
  document.getElementById("pause").addEventListener("click", (event) => {
    state.paused = !state.paused;
    event.target.setAttribute("aria-pressed", String(state.paused));
    event.target.textContent = state.paused ? "Resume" : "Pause";
    if (!state.paused) refresh().then(schedule);
    else clearTimeout(state.timer);
  });
  connect(null);
}

document.addEventListener("DOMContentLoaded", start);
