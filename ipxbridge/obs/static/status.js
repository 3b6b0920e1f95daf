// The live status page: polls /api/status and updates the page in place.
// Every value from the API may come from the network (session and player names), so it is
// only ever set as textContent or an SVG attribute, never parsed as markup.
"use strict";

const POLL_MS = 2000;
const SVG = "http://www.w3.org/2000/svg";
const KIND_NAMES = {
  dosbox: "DOSBox", peer: "RFC 1234 peer", uplink: "ipxbox uplink",
  ethernet: "native IPX", ipxwrapper: "IPXWrapper", rfc1234: "RFC 1234 host",
};

// Control characters (a game's user fields can hold any byte) would show as boxes.
function clean(text) {
  return String(text).replace(/[\u0000-\u001f\u007f]/g, "");
}

function el(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined && text !== null) node.textContent = clean(text);
  return node;
}

function svg(tag, attrs) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
  return node;
}

function duration(seconds) {
  const s = Math.max(0, Math.floor(seconds));
  if (s < 60) return s + "s";
  const m = Math.floor(s / 60);
  if (m < 60) return m + "m " + String(s % 60).padStart(2, "0") + "s";
  return Math.floor(m / 60) + "h " + String(m % 60).padStart(2, "0") + "m";
}

function rate(n) {
  if (n >= 1000) return (n / 1000).toFixed(1) + "k";
  return n >= 10 ? n.toFixed(0) : n.toFixed(1);
}

function bytes(n) {
  if (n >= 1048576) return (n / 1048576).toFixed(1) + " MB";
  if (n >= 1024) return (n / 1024).toFixed(1) + " kB";
  return n.toFixed(0) + " B";
}

function clock(epoch) {
  return new Date(epoch * 1000).toLocaleTimeString([], { hour12: false });
}

// A cell: text, an optional second line, the label phones show above it.
function cell(label, text, sub, cls) {
  const td = el("td", cls, text);
  td.dataset.label = label;
  if (sub) td.appendChild(el("span", "sub", sub));
  return td;
}

// Rows keyed by id keep their element (and so their place on screen) across updates.
function syncRows(tbody, items, keyOf, build) {
  const old = new Map();
  for (const tr of Array.from(tbody.children)) old.set(tr.dataset.key, tr);
  items.forEach((item, index) => {
    const key = keyOf(item);
    const fresh = build(item);
    fresh.dataset.key = key;
    const current = old.get(key);
    if (current) {
      old.delete(key);
      current.replaceChildren(...Array.from(fresh.childNodes));
      current.className = fresh.className;
      if (tbody.children[index] !== current) tbody.insertBefore(current, tbody.children[index] || null);
    } else {
      tbody.insertBefore(fresh, tbody.children[index] || null);
    }
  });
  for (const tr of old.values()) tr.remove();
}

function showEmpty(id, empty) {
  document.getElementById(id).hidden = !empty;
}

function hostText(game) {
  const c = game.host_client;
  if (!c) return [game.host || "-", game.transport || ""];
  const who = (KIND_NAMES[c.kind] || c.kind) + " " + (c.address || "");
  return [who.trim(), c.kind === "dosbox" && c.node ? "node " + c.node : (c.node || "")];
}

function renderGames(games) {
  const tbody = document.querySelector("#games tbody");
  syncRows(tbody, games, (g) => g.id, (g) => {
    const tr = el("tr", g.stale ? "stale" : "");
    tr.appendChild(cell("Game", g.game || "unknown"));
    tr.appendChild(cell("Name", g.name || "-"));
    tr.appendChild(cell("Map", clean(g.map || "") || "-"));
    tr.appendChild(cell("Players", g.players));
    const status = cell("Status", "");
    const tag = el("span", "tag " + (g.stale ? "gone" : g.open ? "open" : "closed"),
      g.stale ? "not answering" : g.status);
    status.appendChild(tag);
    tr.appendChild(status);
    const [host, sub] = hostText(g);
    tr.appendChild(cell("Host", host, sub));
    const up = g.first_seen ? (Date.now() - Date.parse(g.first_seen)) / 1000 : 0;
    tr.appendChild(cell("Up", duration(up), g.stale ? "silent " + duration(g.age_seconds) : ""));
    return tr;
  });
  document.getElementById("games-count").textContent = games.length ? String(games.length) : "";
  showEmpty("games-empty", games.length === 0);
}

function sparkline(spark) {
  const box = svg("svg", { class: "spark", viewBox: "0 0 100 24", preserveAspectRatio: "none" });
  if (!spark) return box;
  const top = Math.max(1, ...spark.in, ...spark.out);
  const slots = Math.max(spark.in.length, 2);
  [["in", "c1"], ["out", "c2"]].forEach(([name, cls]) => {
    const points = spark[name].map((v, i) =>
      ((i / (slots - 1)) * 100).toFixed(1) + "," + (23 - (v / top) * 22).toFixed(1));
    if (points.length) box.appendChild(svg("polyline", { class: cls, points: points.join(" ") }));
  });
  return box;
}

function renderClients(clients) {
  const tbody = document.querySelector("#clients tbody");
  syncRows(tbody, clients, (c) => c.key, (c) => {
    const tr = el("tr", c.gone ? "gone" : "");
    const where = c.address || [c.interface, c.node].filter(Boolean).join(" ");
    const sub = c.kind === "dosbox" ? (c.node ? "node " + c.node : "") :
      [c.address ? c.interface : null, c.address ? c.node : null, c.detail].filter(Boolean).join(" ");
    tr.appendChild(cell("Kind", KIND_NAMES[c.kind] || c.kind));
    tr.appendChild(cell("Address", where || "-", sub));
    const conn = cell("Connected", duration(c.connected_seconds));
    if (c.gone) {
      conn.replaceChildren(el("span", "tag gone", "gone: " + (c.reason || "left")));
      conn.appendChild(el("span", "sub", duration(c.gone_seconds) + " ago"));
    }
    tr.appendChild(conn);
    const r = c.rates;
    tr.appendChild(cell("In", r ? rate(r.rx_pps) + " pkt/s" : "-", r ? bytes(r.rx_bps) + "/s" : "", "num"));
    tr.appendChild(cell("Out", r ? rate(r.tx_pps) + " pkt/s" : "-", r ? bytes(r.tx_bps) + "/s" : "", "num"));
    const spark = cell("Last 5 min", "");
    spark.appendChild(sparkline(c.spark));
    tr.appendChild(spark);
    return tr;
  });
  const live = clients.filter((c) => !c.gone).length;
  document.getElementById("clients-count").textContent =
    clients.length ? live + " connected" + (live < clients.length ? ", " + (clients.length - live) + " gone" : "") : "";
  showEmpty("clients-empty", clients.length === 0);
}

function renderPlot(traffic) {
  const holder = document.getElementById("plot");
  const legend = document.getElementById("legend");
  const width = Math.max(200, holder.clientWidth || 600);
  const height = 180;
  const pad = { l: 40, r: 6, t: 8, b: 18 };
  const period = traffic.period || 5;
  const series = [];
  const totals = traffic.totals || {};
  [["forwarded", "IPX forwarded"], ["relayed", "relayed"], ["dropped", "dropped"]].forEach(([k, name]) => {
    if (totals[k]) series.push({ name, values: totals[k] });
  });
  for (const [reason, values] of Object.entries(traffic.drops || {})) {
    series.push({ name: "drop: " + reason, values });
  }
  const n = traffic.slots || 180;
  let top = 1;
  for (const s of series) for (const v of s.values) top = Math.max(top, v / period);
  const plot = svg("svg", { viewBox: `0 0 ${width} ${height}`, role: "img" });
  const x = (i, len) => pad.l + ((n - len + i) / (n - 1)) * (width - pad.l - pad.r);
  const y = (v) => height - pad.b - (v / top) * (height - pad.t - pad.b);
  for (const f of [0, 0.5, 1]) {
    plot.appendChild(svg("line", { class: "grid", x1: pad.l, x2: width - pad.r, y1: y(top * f), y2: y(top * f) }));
    const label = svg("text", { x: 2, y: y(top * f) + 4 });
    label.textContent = rate(top * f);
    plot.appendChild(label);
  }
  const ticks = [["-15m", 0], ["-10m", n / 3], ["-5m", (2 * n) / 3], ["now", n - 1]];
  for (const [text, i] of ticks) {
    const t = svg("text", { x: x(i, n) - (text === "now" ? 22 : 10), y: height - 4 });
    t.textContent = text;
    plot.appendChild(t);
  }
  legend.replaceChildren();
  series.forEach((s, index) => {
    const cls = "c" + ((index % 7) + 1);
    const pts = s.values.map((v, i) => x(i, s.values.length).toFixed(1) + "," + y(v / period).toFixed(1));
    if (pts.length) plot.appendChild(svg("polyline", { class: cls, points: pts.join(" ") }));
    const now = s.values.length ? s.values[s.values.length - 1] / period : 0;
    legend.appendChild(el("span", cls, s.name + " " + rate(now) + "/s"));
  });
  holder.replaceChildren(plot);
  const copies = Object.entries(traffic.copies || {}).map(([name, values]) => ({
    name, now: values.length ? values[values.length - 1] / period : 0,
    total: values.reduce((a, b) => a + b, 0),
  }));
  syncRows(document.querySelector("#copies tbody"), copies, (c) => c.name, (c) => {
    const tr = el("tr");
    tr.appendChild(cell("Interface", c.name));
    tr.appendChild(cell("Now", rate(c.now) + " copies/s", "", "num"));
    tr.appendChild(cell("15 min", c.total + " copies", "", "num"));
    return tr;
  });
  showEmpty("copies-empty", copies.length === 0);
}

function renderEvents(events) {
  const list = document.getElementById("events");
  list.replaceChildren(...events.map((e) => {
    const li = el("li", e.kind);
    const t = el("time", "", clock(e.at));
    t.dateTime = new Date(e.at * 1000).toISOString();
    li.appendChild(t);
    li.appendChild(document.createTextNode(clean(e.text)));
    return li;
  }));
  showEmpty("events-empty", events.length === 0);
}

function badge(cls, text, why) {
  const b = el("span", "badge " + cls, text);
  if (why) b.appendChild(el("span", "why", why));
  return b;
}

function renderHealth(health) {
  const out = [];
  for (const p of health.ports || []) {
    out.push(badge(p.up ? "up" : "down", (p.up ? "\u25B2 " : "\u25BC ") + p.name, p.up ? "" : p.why));
  }
  const drops = health.drops_last_minute || 0;
  out.push(badge(drops ? "warn" : "up", drops + " dropped in the last minute"));
  if (health.fast_path !== null && health.fast_path !== undefined) {
    out.push(badge(health.fast_path ? "up" : "warn",
      "relay fast path " + (health.fast_path ? "on" : "off"), health.relay_mode || ""));
  }
  document.getElementById("badges").replaceChildren(...out);
}

let updates = 0;

async function poll() {
  const conn = document.getElementById("conn");
  try {
    const response = await fetch("/api/status", { cache: "no-store" });
    if (!response.ok) throw new Error("HTTP " + response.status);
    const data = await response.json();
    document.getElementById("version").textContent = data.version || "";
    renderHealth(data.health || {});
    renderGames(data.sessions || []);
    renderClients(data.clients || []);
    renderPlot(data.traffic || {});
    renderEvents(data.events || []);
    updates += 1;
    document.body.dataset.updates = String(updates);
    conn.className = "muted";
    conn.textContent = "live \u00B7 updated " + clock(data.now || Date.now() / 1000);
  } catch (err) {
    conn.className = "lost";
    conn.textContent = "connection to the bridge lost; retrying (" + err.message + ")";
  } finally {
    setTimeout(poll, POLL_MS);
  }
}

poll();
