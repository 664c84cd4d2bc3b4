// What the timeline draws over its rows for a trace: the span picked in the search, outlined, and the trace's flow
// arrows, as the snapshots bind them (flows.py): from each `client` or `producer` span to each `server` or `consumer`
// span whose `parent_span_id` it is, and to each span that links to it (args.links, "TRACE_ID/SPAN_ID"), across
// threads and processes. Found again in each new model (locate), drawn on each redraw (draw).

import { LEVEL } from "./timeline.js";

const LEAVING = new Set(["client", "producer"]);
const ARRIVING = new Set(["server", "consumer"]);
// A span's start in /spans (wall-clock ns as JSON's doubles: 256 ns apart) and in /timeline (ns since origin, exact)
// differ by this much at most; of the spans that close, the closest in start and duration is the one.
const SAME_START_NS = 1000;
const INK = "#1d2330";

export class TraceMarks {
  constructor() {
    this.traceId = null;
    this.span = null;  // { pid, start (ns since origin), name, duration (ns; null: any) }
    this.marked = null;  // where the span marked is drawn: { item, entry, depth }
    this.arrows = [];  // [{ from, to }] of such places
  }

  set(traceId, span) {
    this.traceId = traceId || null;
    this.span = span;
  }

  // The span marked and the trace's arrows in the timeline's model (its rows laid out). Returns whether the span
  // asked to be marked was found.
  locate(timeline) {
    this.marked = null;
    this.markedOff = Infinity;  // how far the span marked is from the one asked for
    this.arrows = [];
    if (this.traceId !== null || this.span !== null) {
      const leaving = new Map();  // "trace/span" -> place of a client or producer span
      const arriving = [];
      for (const entry of timeline.layout) {
        (entry.row.levels || []).forEach((level, depth) => {
          for (const item of level.items) this.visit({ item, entry, depth }, leaving, arriving);
        });
      }
      for (const [place, keys] of arriving) {
        for (const key of keys) {
          const from = leaving.get(key);
          if (from && (this.inTrace(from.item) || this.inTrace(place.item))) this.arrows.push({ from, to: place });
        }
      }
    }
    const { dataset } = timeline.canvas;
    dataset.marked = this.marked ? this.marked.item.name : "";
    dataset.arrows = String(this.arrows.length);
    return this.span === null || this.marked !== null;
  }

  visit(place, leaving, arriving) {
    const { item, entry } = place;
    const span = this.span;
    if (span !== null && entry.row.track.pid === span.pid && Math.abs(item.start - span.start) <= SAME_START_NS
      && (!span.name || item.name === span.name)) {
      const off = Math.abs(item.start - span.start)
        + (span.duration == null || item.end == null ? 0 : Math.abs(item.end - item.start - span.duration));
      if (off < this.markedOff) { this.marked = place; this.markedOff = off; }
    }
    const args = item.args;
    if (!args || typeof args.trace_id !== "string" || this.traceId === null) return;
    if (LEAVING.has(args.kind) && typeof args.span_id === "string") leaving.set(`${args.trace_id}/${args.span_id}`, place);
    const keys = [];
    if (ARRIVING.has(args.kind) && typeof args.parent_span_id === "string") keys.push(`${args.trace_id}/${args.parent_span_id}`);
    if (Array.isArray(args.links)) for (const link of args.links) if (typeof link === "string") keys.push(link);
    if (keys.length) arriving.push([place, keys]);
  }

  inTrace(item) {
    return item.args && item.args.trace_id === this.traceId;
  }

  draw(ctx, timeline) {
    for (const { from, to } of this.arrows) this.drawArrow(ctx, timeline, from, to);
    if (this.marked === null) return;
    const { item, entry, depth } = this.marked;
    const top = timeline.levelTop(entry, depth);
    const x0 = timeline.x(item.start);
    const x1 = Math.max(timeline.x(item.end ?? timeline.full[1]), x0 + 2);
    ctx.fillStyle = "rgba(47, 111, 222, 0.10)";  // a band over its time across every row, then its outline
    ctx.fillRect(x0, 0, x1 - x0, timeline.height);
    ctx.strokeStyle = INK;
    ctx.lineWidth = 2;
    ctx.strokeRect(x0 - 1, top, x1 - x0 + 2, LEVEL);
    ctx.lineWidth = 1;
  }

  // An arrow from the start of one span to the start of the other, bent as Perfetto's are.
  drawArrow(ctx, timeline, from, to) {
    const x0 = timeline.x(from.item.start), y0 = timeline.levelTop(from.entry, from.depth) + LEVEL / 2;
    const x1 = timeline.x(to.item.start), y1 = timeline.levelTop(to.entry, to.depth) + LEVEL / 2;
    const bend = Math.max(20, Math.abs(x1 - x0) / 2);
    ctx.strokeStyle = INK;
    ctx.fillStyle = INK;
    ctx.lineWidth = 1.5;
    ctx.beginPath();
    ctx.moveTo(x0, y0);
    ctx.bezierCurveTo(x0 + bend, y0, x1 - bend, y1, x1, y1);
    ctx.stroke();
    ctx.beginPath();  // its head, pointing right into the arriving span
    ctx.moveTo(x1, y1);
    ctx.lineTo(x1 - 7, y1 - 4);
    ctx.lineTo(x1 - 7, y1 + 4);
    ctx.closePath();
    ctx.fill();
    ctx.lineWidth = 1;
  }
}
