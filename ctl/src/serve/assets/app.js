// The dashboard: polls the API and redraws in place. No framework, no network but this
// server. Every text from the store goes through textContent (never innerHTML).
"use strict";

const REFRESH_MS = 1000;
const COLORS = ["#2a6fdb", "#d9822b", "#17803d", "#a12", "#7b4fc9", "#0f8b8d", "#b8860b"];
const $ = (id) => document.getElementById(id);

function duration(ms) {
  if (ms == null) return "?";
  if (ms < 1000) return ms + "ms";
  if (ms < 60000) return (ms / 1000).toFixed(1) + "s";
  if (ms < 3600000) return Math.floor(ms / 60000) + "m" + String(Math.floor(ms % 60000 / 1000)).padStart(2, "0") + "s";
  return Math.floor(ms / 3600000) + "h" + String(Math.floor(ms % 3600000 / 60000)).padStart(2, "0") + "m";
}

function cellName(c) {
  return c ? c.table + "/" + c.row + "/" + c.column : "?";
}

// Replaces the rows of a table body: one row per item, cells from `cells(item)` (strings or
// nodes); `key(item)` goes into data-key.
function fillTable(id, items, cells, key) {
  const body = $(id).tBodies[0];
  body.replaceChildren();
  for (const item of items) {
    const tr = document.createElement("tr");
    if (key) tr.dataset.key = key(item);
    for (const c of cells(item)) {
      const td = document.createElement("td");
      if (c instanceof Node) td.appendChild(c);
      else if (c && typeof c === "object") { td.textContent = c.text; td.className = c.cls; }
      else td.textContent = c;
      tr.appendChild(td);
    }
    body.appendChild(tr);
  }
  if (items.length === 0) {
    const tr = document.createElement("tr");
    const td = document.createElement("td");
    td.colSpan = $(id).tHead.rows[0].cells.length;
    td.className = "empty";
    td.textContent = "none";
    tr.appendChild(td);
    body.appendChild(tr);
  }
}

// A line chart of `series` ([{name, points: [[t_ms, value|null]]}]) on a canvas. Sets
// data-points to the number of points drawn (the browser test waits on it).
function drawChart(canvas, series, unit) {
  const ratio = window.devicePixelRatio || 1;
  const w = canvas.clientWidth || canvas.width, h = canvas.clientHeight || canvas.height;
  canvas.width = w * ratio; canvas.height = h * ratio;
  const g = canvas.getContext("2d");
  g.setTransform(ratio, 0, 0, ratio, 0, 0);
  g.clearRect(0, 0, w, h);
  const left = 52, right = 8, top = 10, bottom = 22;
  let tMin = Infinity, tMax = -Infinity, vMax = 0, drawn = 0;
  for (const s of series) for (const [t, v] of s.points) {
    tMin = Math.min(tMin, t); tMax = Math.max(tMax, t);
    if (v != null) vMax = Math.max(vMax, v);
  }
  g.font = "11px system-ui, sans-serif";
  g.fillStyle = "#667"; g.strokeStyle = "#dde1e6"; g.lineWidth = 1;
  if (!isFinite(tMin)) {
    g.fillText("waiting for samples…", left, h / 2);
    canvas.dataset.points = "0";
    return;
  }
  if (vMax === 0) vMax = 1;
  const span = Math.max(tMax - tMin, 1);
  const x = (t) => left + (w - left - right) * (t - tMin) / span;
  const y = (v) => top + (h - top - bottom) * (1 - v / vMax);
  for (let i = 0; i <= 4; i++) {
    const v = vMax * i / 4;
    g.beginPath(); g.moveTo(left, y(v)); g.lineTo(w - right, y(v)); g.stroke();
    const label = v >= 100 ? v.toFixed(0) : v.toFixed(v >= 10 ? 1 : 2);
    g.fillText(label + unit, 2, y(v) + 4);
  }
  g.fillText(new Date(tMin).toLocaleTimeString(), left, h - 6);
  const end = new Date(tMax).toLocaleTimeString();
  g.fillText(end, w - right - g.measureText(end).width, h - 6);
  series.forEach((s, i) => {
    g.strokeStyle = COLORS[i % COLORS.length]; g.fillStyle = g.strokeStyle; g.lineWidth = 2;
    g.beginPath();
    let pen = false;
    for (const [t, v] of s.points) {
      if (v == null) { pen = false; continue; }
      if (pen) g.lineTo(x(t), y(v)); else g.moveTo(x(t), y(v));
      pen = true; drawn++;
    }
    g.stroke();
    g.fillText(s.name, left + 6 + 130 * i, top + 10);
  });
  canvas.dataset.points = String(drawn);
}

function columnSeries(samples, field) {
  const names = new Set();
  for (const s of samples) for (const k of Object.keys(s.columns)) names.add(k);
  if (names.size === 0) return [{ name: "all columns", points: samples.map((s) => [s.t_ms, 0]) }];
  return [...names].sort().map((name) => ({
    name,
    points: samples.map((s) => [s.t_ms, s.columns[name] ? field(s.columns[name]) : 0]),
  }));
}

// One series per timed column: its watermark's lag behind the oracle, seconds (a gap where
// it has none or its input ended).
function watermarkSeries(samples) {
  const names = new Set();
  for (const s of samples) for (const k of Object.keys(s.watermark_lag_ms || {})) names.add(k);
  if (names.size === 0) return [{ name: "no timed column", points: samples.map((s) => [s.t_ms, null]) }];
  return [...names].sort().map((name) => ({
    name,
    points: samples.map((s) => {
      const lag = (s.watermark_lag_ms || {})[name];
      return [s.t_ms, lag == null ? null : lag / 1000];
    }),
  }));
}

async function getJson(path, options) {
  const response = await fetch(path, Object.assign({ cache: "no-store" }, options));
  const body = await response.json();
  if (!response.ok) throw new Error(body.error || response.statusText);
  return body;
}

function showError(text) {
  $("error").hidden = !text;
  $("error").textContent = text || "";
}

function renderStatus(st) {
  $("namespace").textContent = st.namespace;
  $("store").textContent = st.store;
  const o = st.oracle;
  $("leader").textContent = !o ? "no record" : o.leader
    ? o.leader.addr + " (epoch " + o.epoch + ")" : "none (released, epoch " + o.epoch + ")";
  // A hybrid timestamp: Unix milliseconds above 18 logical bits.
  $("gc").textContent = st.gc_safe_point === 0 ? "never collected"
    : new Date(Math.floor(st.gc_safe_point / 262144)).toLocaleString();
  $("updated").textContent = new Date().toLocaleTimeString();
  $("backlog-total").textContent = st.backlog.total + " waiting";
  fillTable("backlog", st.backlog.columns, (c) => [c.table, c.column, String(c.count), duration(c.oldest_age_ms)]);
  const live = st.workers.filter((w) => w.live).length;
  $("workers-count").textContent = live + " live, " + (st.workers.length - live) + " not heartbeating";
  fillTable("workers", st.workers, (w) => [
    w.id,
    { text: w.live ? "live" : "dead", cls: w.live ? "live" : "dead" },
    duration(w.heartbeat_age_ms) + " ago",
    w.share_index == null ? "-" : (w.share_index + 1) + "/" + w.live_workers,
    w.handled == null ? "-" : String(w.handled),
  ], (w) => w.id);
  const timed = st.event_time || [];
  $("event-time-total").textContent = timed.length + " timed columns";
  fillTable("event-time", timed, (c) => [
    c.column,
    c.watermark_ms == null ? "-" : c.lag_ms == null ? "end of input" : new Date(c.watermark_ms).toLocaleString(),
    c.lag_ms == null ? "-" : duration(c.lag_ms),
    c.sources.length + " (" + c.sources.filter((x) => x.idle).length + " idle)" +
      (c.upstreams || []).map((u) => ", after " + u).join(""),
    String(c.pending),
  ], (c) => c.column);
  const quarantined = st.quarantined || [];
  $("quarantined-count").textContent = quarantined.length + " not loaded to their end";
  fillTable("quarantined", quarantined, (q) => [q.source, duration(q.age_ms) + " ago", q.cause], (q) => q.source);
  $("locks-count").textContent = st.locks.total + " held, " + st.locks.expired.length + " expired";
  fillTable("locks", st.locks.expired, (l) => [cellName(l.cell), String(l.start_ts), l.primary ? cellName(l.primary) : "(primary)"]);
}

function actionButton(label, action, letter) {
  const b = document.createElement("button");
  b.type = "button"; b.textContent = label; b.className = action;
  b.addEventListener("click", () => prepare(action, letter.id));
  return b;
}

function renderLetters(list) {
  const letters = list.dead_letters;
  $("letters-count").textContent = String(letters.length);
  fillTable("dead-letters", letters, (d) => {
    const buttons = document.createElement("span");
    buttons.appendChild(actionButton("Replay", "replay", d));
    buttons.appendChild(document.createTextNode(" "));
    buttons.appendChild(actionButton("Drop", "drop", d));
    return [d.id, cellName(d.cell), duration(d.age_ms), { text: d.error, cls: "err" }, buttons];
  }, (d) => d.id);
}

// Step one of an action: the server names the letters and returns a token; nothing changes
// until the operator confirms.
let pendingToken = null;
async function prepare(action, id) {
  try {
    const p = await getJson("/api/dead-letters/prepare", {
      method: "POST", headers: { "content-type": "application/json" },
      body: JSON.stringify({ action, id }),
    });
    pendingToken = p.token;
    const cells = p.letters.map((d) => cellName(d.cell)).join(", ");
    $("confirm-text").textContent = (action === "replay"
      ? "Replay " + p.letters.length + " dead letter(s)? Workers will run their observers again on: "
      : "Drop " + p.letters.length + " dead letter(s) for good? Their notifications never run: ") + cells;
    $("confirm").hidden = false;
    $("confirm").dataset.action = action;
    $("message").textContent = "";
  } catch (e) { showError("prepare " + action + ": " + e.message); }
}

async function confirmAction() {
  const token = pendingToken;
  pendingToken = null;
  $("confirm").hidden = true;
  if (!token) return;
  try {
    const done = await getJson("/api/dead-letters/confirm", {
      method: "POST", headers: { "content-type": "application/json" },
      body: JSON.stringify({ token }),
    });
    const action = $("confirm").dataset.action === "drop" ? "dropped" : "replayed";
    $("message").textContent = action + " " + done.done.length + " dead letter(s)";
    await refresh();
  } catch (e) { showError("confirm: " + e.message); }
}

$("confirm-yes").addEventListener("click", confirmAction);
$("confirm-no").addEventListener("click", () => { pendingToken = null; $("confirm").hidden = true; });

async function refresh() {
  try {
    const [st, letters, history] = await Promise.all([
      getJson("/api/status"), getJson("/api/dead-letters"), getJson("/api/history"),
    ]);
    renderStatus(st);
    renderLetters(letters);
    const s = history.samples;
    drawChart($("chart-throughput"), [{ name: "handled/s", points: s.map((x) => [x.t_ms, x.handled_per_s]) }], "");
    drawChart($("chart-backlog"), columnSeries(s, (c) => c.count), "");
    drawChart($("chart-age"), columnSeries(s, (c) => c.oldest_age_ms / 1000), "s");
    drawChart($("chart-watermark"), watermarkSeries(s), "s");
    showError(history.error ? "store: " + history.error : "");
  } catch (e) {
    showError("dashboard: " + e.message);
  }
}

async function loop() {
  await refresh();
  setTimeout(loop, REFRESH_MS);
}
loop();
