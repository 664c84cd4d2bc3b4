// The timeline canvas: draws the rows of a model (lanes.js) for a window of time, with zoom and pan (wheel, drag,
// keys) and a tooltip for what is under the pointer. Level of detail: in each level only the slices in view are
// visited (binary search), and runs of slices narrower than a pixel are drawn as one block (the ones within a pixel
// skipped by another search), so the cost follows the pixels drawn, not the events held. An incident's tick is drawn
// wider, in its own colour, over the others; an incident opened from the list has its trigger marked across every
// row (setMarker).

import { PRIORITY_RANK, lowerBound } from "./lanes.js";

const GUTTER = 190;  // the row labels' column, px
const AXIS = 24;
export const LEVEL = 18;
const TICKS = 10;
const COUNTER = 38;
const PROCESS = 24;
const GAP = 6;
// Mid tones that white labels read on.
const PALETTE = ["#4e79a7", "#59a14f", "#9c755f", "#e07b24", "#3f9c96", "#b07aa1", "#b8931f", "#e15759", "#5b8fd1",
  "#6a9f3a", "#c26a86", "#7f6bb8", "#2f8fb0", "#a0632c", "#499894", "#d05c8e"];
const PRIORITY_COLOURS = ["#d32f2f", "#d32f2f", "#f29d0c", "#2f6fde", "#9aa3b2"];
const INSTANT = "#37474f";
const INCIDENT = "#c2185b";  // (view.css --incident)
const INCIDENT_RANK = -1;  // wins its pixel over any message

export function colourOf(name) {
  let h = 0;
  for (let i = 0; i < name.length; i++) h = (h * 31 + name.charCodeAt(i)) | 0;
  return PALETTE[Math.abs(h) % PALETTE.length];
}

function priorityColour(priority) {
  if (priority == null) return INSTANT;
  const rank = PRIORITY_RANK[priority] ?? 4;
  return PRIORITY_COLOURS[Math.min(rank, 4)];
}

export function duration(ns) {
  if (ns == null) return "not ended";
  const a = Math.abs(ns);
  if (a < 1e3) return `${ns} ns`;
  if (a < 1e6) return `${(ns / 1e3).toFixed(a < 1e4 ? 2 : 1)} µs`;
  if (a < 1e9) return `${(ns / 1e6).toFixed(a < 1e7 ? 2 : 1)} ms`;
  return `${(ns / 1e9).toFixed(3)} s`;
}

export class Timeline {
  constructor(canvas, tooltip, wrap) {
    this.canvas = canvas;
    this.tooltip = tooltip;
    this.wrap = wrap;
    this.model = null;
    this.view = [0, 1];  // ns since origin: what is in view
    this.full = [0, 1];  // the window fetched
    this.layout = [];
    this.onUserMove = () => {};
    this.onReset = () => this.reset();  // the 0 key (the page resets as its Reset button does)
    this.drawn = 0;  // draws done (a test waits for a new one)
    this.marker = null;  // an opened incident's trigger: { start, end, label } in ns since origin
    this.overlay = null;  // over the rows: { locate(timeline) in each new model, draw(ctx, timeline) } (trace_marks.js)
    this.listen();
  }

  setMarker(marker) {
    this.marker = marker;
    this.canvas.dataset.marker = marker ? marker.label : "";
  }

  setModel(model, full, keepView) {
    this.model = model;
    this.full = full;
    if (!keepView) this.view = [...full];
    this.layoutRows();
    if (this.overlay) this.overlay.locate(this);
    this.draw();
  }

  layoutRows() {
    this.layout = [];
    let y = AXIS;
    for (const row of this.model ? this.model.rows : []) {
      let h;
      if (row.kind === "process") h = PROCESS;
      else if (row.counter) h = COUNTER;
      else h = Math.max(1, row.levels.length) * LEVEL + (row.ticks ? TICKS : 0);
      this.layout.push({ row, y, h });
      y += h + (row.kind === "process" ? 2 : GAP);
    }
    this.height = Math.max(y + 4, 140);
  }

  resize() {
    const ratio = window.devicePixelRatio || 1;
    const width = this.wrap.clientWidth;
    this.canvas.style.height = `${this.height}px`;
    if (this.canvas.width !== Math.round(width * ratio) || this.canvas.height !== Math.round(this.height * ratio)) {
      this.canvas.width = Math.round(width * ratio);
      this.canvas.height = Math.round(this.height * ratio);
    }
    this.ratio = ratio;
    this.width = width;
  }

  x(ns) {
    return GUTTER + ((ns - this.view[0]) / (this.view[1] - this.view[0])) * (this.width - GUTTER);
  }

  nsAt(x) {
    return this.view[0] + ((x - GUTTER) / (this.width - GUTTER)) * (this.view[1] - this.view[0]);
  }

  draw() {
    if (!this.layout) return;
    this.resize();
    const ctx = this.canvas.getContext("2d", { alpha: false });
    ctx.setTransform(this.ratio, 0, 0, this.ratio, 0, 0);
    ctx.fillStyle = "#ffffff";
    ctx.fillRect(0, 0, this.width, this.height);
    ctx.font = "11px system-ui, sans-serif";
    ctx.textBaseline = "middle";
    this.drawAxis(ctx);
    ctx.save();
    ctx.beginPath();
    ctx.rect(GUTTER, AXIS, this.width - GUTTER, this.height - AXIS);
    ctx.clip();
    for (const item of this.layout) this.drawRow(ctx, item);
    if (this.overlay) this.overlay.draw(ctx, this);
    ctx.restore();
    this.drawLabels(ctx);
    if (this.marker) this.drawMarker(ctx, this.marker);
    this.drawn++;
    this.canvas.dataset.drawn = String(this.drawn);
    this.canvas.dataset.shownNs = String(Math.round(this.view[1] - this.view[0]));  // (how long a time is in view)
  }

  drawAxis(ctx) {
    const span = this.view[1] - this.view[0];
    const pixels = this.width - GUTTER;
    const step = niceStep(span / Math.max(1, pixels / 110));
    const end = this.full[1];
    ctx.fillStyle = "#fafbfc";
    ctx.fillRect(0, 0, this.width, AXIS);
    ctx.strokeStyle = "#e2e5eb";
    ctx.fillStyle = "#6a7385";
    ctx.textAlign = "left";
    ctx.beginPath();
    const first = Math.ceil((this.view[0] - end) / step) * step + end;
    for (let t = first; t <= this.view[1]; t += step) {
      const x = Math.round(this.x(t)) + 0.5;
      ctx.moveTo(x, AXIS - 6);
      ctx.lineTo(x, this.height);
      ctx.fillText(relative(t - end, step), x + 3, AXIS / 2);
    }
    ctx.stroke();
    ctx.beginPath();
    ctx.moveTo(0, AXIS - 0.5);
    ctx.lineTo(this.width, AXIS - 0.5);
    ctx.strokeStyle = "#c8cdd6";
    ctx.stroke();
  }

  drawLabels(ctx) {
    ctx.fillStyle = "#ffffff";
    ctx.fillRect(0, AXIS, GUTTER, this.height - AXIS);
    ctx.textAlign = "left";
    for (const { row, y, h } of this.layout) {
      if (row.kind === "process") {
        ctx.fillStyle = "#eef1f6";
        ctx.fillRect(0, y, this.width, h);
        ctx.fillStyle = "#1d2330";
        ctx.font = "600 12px system-ui, sans-serif";
        ctx.fillText(row.label, 8, y + h / 2);
        ctx.font = "11px system-ui, sans-serif";
        continue;
      }
      ctx.fillStyle = "#1d2330";
      ctx.fillText(fit(ctx, row.label, GUTTER - 60), 16, y + Math.min(h, LEVEL) / 2 + (row.ticks ? TICKS / 2 : 0));
      ctx.fillStyle = "#9aa3b2";
      ctx.textAlign = "right";
      if (row.kind !== "async") ctx.fillText(row.kind, GUTTER - 8, y + Math.min(h, LEVEL) / 2 + (row.ticks ? TICKS / 2 : 0));
      ctx.textAlign = "left";
    }
    ctx.strokeStyle = "#e2e5eb";
    ctx.beginPath();
    ctx.moveTo(GUTTER - 0.5, 0);
    ctx.lineTo(GUTTER - 0.5, this.height);
    ctx.stroke();
  }

  drawRow(ctx, { row, y, h }) {
    if (row.kind === "process") return;
    if (row.counter) { this.drawCounter(ctx, row.counter, y, h); return; }
    let top = y;
    if (row.ticks) { this.drawTicks(ctx, row.ticks, y); top += TICKS; }
    row.levels.forEach((level, depth) => this.drawLevel(ctx, level, top + depth * LEVEL));
  }

  drawLevel(ctx, level, y) {
    const [v0, v1] = this.view;
    const { start, end, items } = level;
    const n = start.length;
    const nsPerPx = (v1 - v0) / (this.width - GUTTER);
    let i = lowerBound(end, v0);  // in a level ends are sorted too: the first slice that ends in view
    let runX0 = -1, runX1 = -1;
    const flush = () => {
      if (runX0 < 0) return;
      ctx.fillStyle = "#a9b3c4";
      ctx.fillRect(runX0, y + 1, Math.max(1, runX1 - runX0), LEVEL - 2);
      runX0 = -1;
    };
    for (; i < n && start[i] < v1; i++) {
      const x0 = this.x(start[i]);
      const x1 = this.x(Math.min(end[i], v1 + nsPerPx));
      if (x1 - x0 < 1) {
        if (runX0 >= 0 && x0 <= runX1 + 1) runX1 = Math.max(runX1, x1);
        else { flush(); runX0 = x0; runX1 = x1; }
        // Every slice that starts before the next pixel ends within this one but the last: skip to it.
        const next = lowerBound(start, v0 + (Math.floor(x1 - GUTTER) + 1) * nsPerPx);
        if (next - 2 > i) {
          i = next - 2;
          runX1 = Math.max(runX1, this.x(end[i]));
        }
        continue;
      }
      flush();
      const item = items[i];
      const left = Math.max(x0, GUTTER - 2);
      const width = x1 - left;
      ctx.fillStyle = colourOf(item.name);
      ctx.fillRect(left, y + 1, Math.max(1, width - 0.5), LEVEL - 2);
      if (item.open) {  // never ended: a hatched end
        ctx.fillStyle = "rgba(255,255,255,0.35)";
        ctx.fillRect(Math.max(left, x1 - 12), y + 1, Math.min(12, width), LEVEL - 2);
      }
      if (width > 28) {
        ctx.fillStyle = "#ffffff";
        ctx.fillText(fit(ctx, item.name, width - 8), Math.max(left, GUTTER) + 4, y + LEVEL / 2);
      }
    }
    flush();
  }

  drawTicks(ctx, ticks, y) {
    const [v0, v1] = this.view;
    const { start, items } = ticks;
    let lastX = -1, best = 99, bestColour = INSTANT;
    const put = () => {
      if (lastX < 0) return;
      ctx.fillStyle = bestColour;
      if (best === INCIDENT_RANK) ctx.fillRect(lastX - 1, y, 3, TICKS);  // wider and taller: seen at a glance
      else ctx.fillRect(lastX, y, 1.5, TICKS - 2);
    };
    for (let i = lowerBound(start, v0); i < start.length && start[i] <= v1; i++) {
      const x = Math.floor(this.x(start[i]));
      const item = items[i];
      const rank = item.incident ? INCIDENT_RANK : item.priority == null ? 50 : PRIORITY_RANK[item.priority] ?? 40;
      const colour = item.incident ? INCIDENT : priorityColour(item.priority);
      if (x !== lastX) { put(); lastX = x; best = rank; bestColour = colour; }
      else if (rank < best) { best = rank; bestColour = colour; }
    }
    put();
  }

  // An opened incident's trigger, over everything but the row labels: a band over its length (at least a line)
  // across every row, and its name on the time axis.
  drawMarker(ctx, { start, end, label }) {
    const x0 = this.x(start);
    const x1 = Math.max(this.x(end), x0 + 2);
    ctx.save();
    ctx.beginPath();
    ctx.rect(GUTTER, 0, this.width - GUTTER, this.height);
    ctx.clip();
    ctx.fillStyle = "rgba(194, 24, 91, 0.14)";
    ctx.fillRect(x0, AXIS, x1 - x0, this.height - AXIS);
    ctx.fillStyle = INCIDENT;
    ctx.fillRect(x0 - 1, 0, 2, this.height);
    ctx.font = "600 11px system-ui, sans-serif";
    const text = `▼ ${label}`;
    const width = ctx.measureText(text).width + 8;
    const left = x0 + width + 4 > this.width ? x0 - width - 2 : x0 + 2;  // (on the left of the line near the end)
    ctx.fillRect(left, 2, width, AXIS - 6);
    ctx.fillStyle = "#ffffff";
    ctx.textAlign = "left";
    ctx.fillText(text, left + 4, AXIS / 2 - 1);
    ctx.restore();
  }

  drawCounter(ctx, counter, y, h) {
    const [v0, v1] = this.view;
    const { start, value, min, max } = counter;
    const span = max - min || 1;
    const yOf = (v) => y + h - 3 - ((v - min) / span) * (h - 8);
    ctx.fillStyle = "#f3f6fb";
    ctx.fillRect(GUTTER, y, this.width - GUTTER, h);
    let i = Math.max(0, lowerBound(start, v0) - 1);
    if (i >= start.length) return;
    ctx.beginPath();
    ctx.moveTo(this.x(start[i]), yOf(value[i]));
    let lastX = this.x(start[i]);
    let lastV = value[i];
    for (i++; i < start.length; i++) {
      const x = this.x(start[i]);
      ctx.lineTo(x, yOf(lastV));  // a counter holds its value until the next
      ctx.lineTo(x, yOf(value[i]));
      lastX = x;
      lastV = value[i];
      if (start[i] > v1) break;
    }
    if (lastX < this.width) ctx.lineTo(Math.min(this.width, this.x(this.full[1])), yOf(lastV));
    ctx.strokeStyle = "#2f6fde";
    ctx.lineWidth = 1.25;
    ctx.stroke();
    ctx.lineWidth = 1;
    ctx.fillStyle = "#6a7385";
    ctx.textAlign = "right";
    ctx.fillText(`${fmtValue(max)}`, this.width - 6, y + 7);
    ctx.fillText(`${fmtValue(min)}`, this.width - 6, y + h - 7);
    ctx.textAlign = "left";
  }

  // What is under (x, y) in CSS px of the canvas: { item, kind, row } or null.
  hit(x, y) {
    if (x < GUTTER) return null;
    const found = this.layout.find((l) => y >= l.y && y < l.y + l.h);
    if (!found || found.row.kind === "process") return null;
    const { row } = found;
    const ns = this.nsAt(x);
    const nsPerPx = (this.view[1] - this.view[0]) / (this.width - GUTTER);
    if (row.counter) {
      const i = Math.max(0, lowerBound(row.counter.start, ns + 1e-9) - 1);
      return { kind: "counter", item: row.counter.items[i], row };
    }
    let top = found.y;
    if (row.ticks) {
      if (y < top + TICKS) {
        const s = row.ticks.start;
        const i = lowerBound(s, ns);
        let best = null, bestD = 4 * nsPerPx;
        for (const j of [i - 1, i]) {
          if (j >= 0 && j < s.length && Math.abs(s[j] - ns) <= bestD) { best = j; bestD = Math.abs(s[j] - ns); }
        }
        return best === null ? null : { kind: "instant", item: row.ticks.items[best], row };
      }
      top += TICKS;
    }
    const level = row.levels[Math.floor((y - top) / LEVEL)];
    if (!level) return null;
    const i = lowerBound(level.end, ns);
    if (i < level.start.length && level.start[i] <= ns + nsPerPx / 2) return { kind: "slice", item: level.items[i], row };
    return null;
  }

  showTooltip(event) {
    const rect = this.canvas.getBoundingClientRect();
    const hit = this.hit(event.clientX - rect.left, event.clientY - rect.top);
    if (!hit) { this.tooltip.hidden = true; return; }
    const { item, kind, row } = hit;
    const parts = [];
    const name = document.createElement("div");
    name.className = "name";
    name.textContent = item.name;
    parts.push(name);
    const meta = document.createElement("div");
    meta.className = "meta";
    const at = relative(item.start - this.full[1], 1e6);
    if (kind === "slice") meta.textContent = `${duration(item.end == null ? null : item.end - item.start)} · at ${at} · ${row.label}`;
    else if (kind === "counter") meta.textContent = `${fmtValue(item.value)} · at ${at} · ${row.label}`;
    else meta.textContent = `${item.incident ? "incident · " : item.priority ? item.priority + " · " : "instant · "}at ${at} · ${row.label}`;
    parts.push(meta);
    if (item.args && Object.keys(item.args).length) {
      const pre = document.createElement("pre");
      const text = JSON.stringify(item.args, null, 1);
      pre.textContent = text.length > 1200 ? text.slice(0, 1200) + "…" : text;
      parts.push(pre);
    }
    this.tooltip.replaceChildren(...parts);
    this.tooltip.hidden = false;
    const wrapRect = this.wrap.getBoundingClientRect();
    let left = event.clientX - wrapRect.left + 14;
    if (left + this.tooltip.offsetWidth > wrapRect.width) left = event.clientX - wrapRect.left - this.tooltip.offsetWidth - 14;
    this.tooltip.style.left = `${Math.max(0, left)}px`;
    this.tooltip.style.top = `${event.clientY - wrapRect.top + this.wrap.scrollTop + 14}px`;
  }

  zoom(factor, atX) {
    const [v0, v1] = this.view;
    const center = atX == null ? (v0 + v1) / 2 : this.nsAt(atX);
    const span = Math.min(Math.max((v1 - v0) * factor, 1000), (this.full[1] - this.full[0]) * 4);
    const share = (center - v0) / (v1 - v0);
    this.view = [center - span * share, center - span * share + span];
    this.onUserMove();
    this.draw();
  }

  pan(ns) {
    this.view = [this.view[0] + ns, this.view[1] + ns];
    this.onUserMove();
    this.draw();
  }

  reset() {
    this.view = [...this.full];
    this.draw();
  }

  // Shows [from, to] (ns since origin), as a user's zoom does.
  show(from, to) {
    this.view = [from, Math.max(to, from + 1000)];
    this.onUserMove();
    this.draw();
  }

  // The top of level `depth` of a laid out row (an entry of `layout`), in CSS px of the canvas.
  levelTop({ row, y }, depth) {
    return y + (row.ticks ? TICKS : 0) + depth * LEVEL;
  }

  listen() {
    const canvas = this.canvas;
    canvas.addEventListener("wheel", (event) => {
      event.preventDefault();
      const rect = canvas.getBoundingClientRect();
      if (Math.abs(event.deltaX) > Math.abs(event.deltaY)) {
        this.pan((event.deltaX / (this.width - GUTTER)) * (this.view[1] - this.view[0]));
      } else {
        this.zoom(Math.exp(event.deltaY * 0.002), event.clientX - rect.left);
      }
    }, { passive: false });
    let drag = null;
    canvas.addEventListener("pointerdown", (event) => {
      drag = { x: event.clientX, view: [...this.view] };
      canvas.setPointerCapture(event.pointerId);
      canvas.classList.add("dragging");
    });
    canvas.addEventListener("pointermove", (event) => {
      if (drag) {
        const dx = event.clientX - drag.x;
        const nsPerPx = (drag.view[1] - drag.view[0]) / (this.width - GUTTER);
        this.view = [drag.view[0] - dx * nsPerPx, drag.view[1] - dx * nsPerPx];
        if (dx) this.onUserMove();
        this.draw();
        this.tooltip.hidden = true;
      } else {
        this.showTooltip(event);
      }
    });
    const end = () => { drag = null; canvas.classList.remove("dragging"); };
    canvas.addEventListener("pointerup", end);
    canvas.addEventListener("pointercancel", end);
    canvas.addEventListener("pointerleave", () => { this.tooltip.hidden = true; });
    this.wrap.addEventListener("keydown", (event) => {
      const span = this.view[1] - this.view[0];
      const actions = {
        w: () => this.zoom(0.8), "+": () => this.zoom(0.8), "=": () => this.zoom(0.8),
        s: () => this.zoom(1.25), "-": () => this.zoom(1.25),
        a: () => this.pan(-span * 0.15), ArrowLeft: () => this.pan(-span * 0.15),
        d: () => this.pan(span * 0.15), ArrowRight: () => this.pan(span * 0.15),
        0: () => this.onReset(),
      };
      const action = actions[event.key];
      if (action) { event.preventDefault(); action(); }
    });
    new ResizeObserver(() => this.draw()).observe(this.wrap);
  }
}

function niceStep(raw) {
  const power = 10 ** Math.floor(Math.log10(raw));
  for (const m of [1, 2, 5, 10]) if (m * power >= raw) return m * power;
  return 10 * power;
}

function relative(ns, step) {
  if (Math.abs(ns) < step / 1000) return "0";
  const sign = ns < 0 ? "−" : "+";
  const a = Math.abs(ns);
  if (step >= 1e8) return `${sign}${(a / 1e9).toFixed(step >= 1e9 ? 0 : 1)} s`;
  if (step >= 1e5) return `${sign}${(a / 1e9).toFixed(Math.max(0, 9 - Math.floor(Math.log10(step))))} s`;
  return `${sign}${(a / 1e6).toFixed(Math.max(0, 6 - Math.floor(Math.log10(step))))} ms`;
}

function fmtValue(v) {
  return Math.abs(v) >= 1e4 || (Math.abs(v) < 1e-2 && v !== 0) ? v.toExponential(2) : String(+v.toFixed(3));
}

function fit(ctx, text, width) {
  if (ctx.measureText(text).width <= width) return text;
  let lo = 0, hi = text.length;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (ctx.measureText(text.slice(0, mid) + "…").width <= width) lo = mid; else hi = mid - 1;
  }
  return lo ? text.slice(0, lo) + "…" : "";
}
