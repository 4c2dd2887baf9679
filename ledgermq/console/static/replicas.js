// The replica page, live: the tables come from the server (/replicas/fragment, the same
// template as the first render), the chart is drawn here from /api/replicas' samples.
"use strict";
const PALETTE = 6;  // classes c0..c5 in console.css: the legend uses the same
const NS = "http://www.w3.org/2000/svg";

function el(name, attrs) {
  const e = document.createElementNS(NS, name);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  return e;
}

function drawChart(svg, group, view) {
  const members = group.replicas.map(r => r.addr);
  const samples = view.samples;
  svg.replaceChildren();
  if (samples.length < 2) return;
  const t0 = samples[0].t, t1 = samples[samples.length - 1].t;
  let lo = Infinity, hi = -Infinity;
  for (const s of samples) for (const a of members) {
    const v = s.offsets[a];
    if (v !== undefined) { lo = Math.min(lo, v); hi = Math.max(hi, v); }
  }
  if (lo === Infinity) return;
  const W = 600, H = 150, x = t => (t - t0) / Math.max(t1 - t0, 1e-9) * W;
  const y = v => H + 5 - (v - lo) / Math.max(hi - lo, 1) * H;
  members.forEach((addr, i) => {
    const pts = samples.filter(s => s.offsets[addr] !== undefined)
      .map(s => `${x(s.t).toFixed(1)},${y(s.offsets[addr]).toFixed(1)}`);
    if (pts.length) svg.append(el("polyline", {points: pts.join(" "), fill: "none",
      class: `c${i % PALETTE}`, "data-addr": addr,
      // replicas in step draw one over another: wider first, so each stays visible
      "stroke-width": 2 + 2 * (members.length - 1 - i)}));
  });
  for (const e of view.elections) if (e.group === group.group && e.t >= t0) {
    svg.append(el("line", {x1: x(e.t), x2: x(e.t), y1: 0, y2: 160, stroke: "#111",
      "stroke-dasharray": "4 3", class: "election"}));
  }
}

async function refresh() {
  try {
    const [html, view] = await Promise.all([
      fetch("/replicas/fragment").then(r => r.text()),
      fetch("/api/replicas").then(r => r.json())]);
    document.getElementById("replica-groups").innerHTML = html;
    for (const g of view.groups) {
      const svg = document.querySelector(`svg.chart[data-group="${CSS.escape(g.group)}"]`);
      if (svg) drawChart(svg, g, view);
    }
    document.body.dataset.updated = String(Date.now());
  } catch (err) {
    console.warn("replica refresh failed", err);
  }
}

refresh();
setInterval(refresh, 1000);
