// The /timeline document (columns per stored frame) made into the rows the canvas draws: per process, a row per
// thread, task lane and source (in the order the collector gives), each followed by a row per counter recorded on it,
// and one for its async slices. In a row, slices sit in levels (a flame chart: a slice nested in another one level
// below it; sources' overlapping activity one level down too), each level sorted by start with no overlaps, so the
// part in view is found by binary search; instants, messages and instant markers are ticks, counters a line.
// Incidents (tl.incident: a block's `cat` column says "incident") are ticks marked as such.
// A counter is a line per track it was recorded on, name and value key, as in the snapshots (Chrome JSON, Perfetto):
// threads that set one counter each get their own, not one line that jumps between their values.

export const PRIORITY_RANK = { fatal: 0, error: 1, warning: 2, info: 3, debug: 4, trace: 5, "trace+": 6, "trace++": 7, "trace+++": 8 };

// `pids`: the processes (the pids /sources shows) to draw, or null for all. The query's `pid` also selects by OS
// pid, which processes on different hosts or in containers share (all run pid 1): those it brings along are dropped.
export function buildModel(doc, pids = null) {
  const names = doc.names;
  const shown = pids === null ? null : new Set(pids);
  const tracks = new Map(doc.tracks.filter((t) => shown === null || shown.has(t.pid)).map((t) => [t.index, t]));
  const perTrack = new Map();  // track index -> { slices: [], ticks: [], counters: Map(line name -> values) }
  const asyncOpen = new Map();  // pid|name|id -> begin
  const asyncSlices = new Map();  // pid -> slices
  const bucket = (index) => {
    let b = perTrack.get(index);
    if (!b) perTrack.set(index, (b = { slices: [], ticks: [], counters: new Map() }));
    return b;
  };
  let windowEnd = -Infinity;
  let count = 0;
  for (const block of doc.blocks) {
    const track = tracks.get(block.track);
    if (!track) continue;  // a process not asked for
    const b = bucket(block.track);
    const { ph, name, ts, dur, args } = block;
    count += ph.length;
    for (let i = 0; i < ph.length; i++) {
      const p = ph[i];
      const start = ts[i];
      if (p === "X" || p === "B") {
        const end = p === "B" ? null : start + dur[i];
        b.slices.push({ start, end, name: names[name[i]], args: args[i], open: p === "B" });
        if (end !== null && end > windowEnd) windowEnd = end;
      } else if (p === "i") {
        const a = args[i];
        const incident = block.cat !== undefined && block.cat[i] === "incident";
        const priority = !incident && a && typeof a.priority === "string" && a.category !== undefined ? a.priority : null;
        b.ticks.push({ start, name: names[name[i]], args: a, priority, incident });
      } else if (p === "C") {
        const a = args[i] || {};
        for (const [key, value] of Object.entries(a)) {
          if (typeof value !== "number") continue;  // (as Perfetto's counters, numbers only)
          const line = key === "value" ? names[name[i]] : `${names[name[i]]} ${key}`;
          if (!b.counters.has(line)) b.counters.set(line, []);
          b.counters.get(line).push({ start, value, name: line, args: a });
        }
      } else if (p === "b" || p === "e") {
        const key = `${track.pid}|${names[name[i]]}|${block.id ? block.id[i] : ""}`;
        if (p === "b") {
          asyncOpen.set(key, { start, name: names[name[i]], args: args[i], pid: track.pid });
        } else {
          const begin = asyncOpen.get(key);
          if (begin) {
            asyncOpen.delete(key);
            const list = asyncSlices.get(begin.pid) || [];
            list.push({ start: begin.start, end: start, name: begin.name, args: begin.args, open: false });
            asyncSlices.set(begin.pid, list);
          }
        }
      }
      if (start > windowEnd) windowEnd = start;
    }
  }
  for (const begin of asyncOpen.values()) {  // begun, not ended in what was read
    const list = asyncSlices.get(begin.pid) || [];
    list.push({ start: begin.start, end: null, name: begin.name, args: begin.args, open: true });
    asyncSlices.set(begin.pid, list);
  }

  const ordered = [...tracks.values()].sort((a, b) => compareOrder(a.order, b.order));
  const rows = [];
  let lastPid = null;
  for (const track of ordered) {
    if (track.pid !== lastPid) {
      if (lastPid !== null) pushAsyncRow(rows, asyncSlices, lastPid);
      rows.push({ kind: "process", label: processLabel(track), track });
      lastPid = track.pid;
    }
    const b = perTrack.get(track.index);
    if (!b) continue;
    if (b.slices.length || b.ticks.length) rows.push(makeRow(track, b));
    for (const [counterName, values] of [...b.counters].sort()) rows.push(counterRow(track, counterName, values));
  }
  if (lastPid !== null) pushAsyncRow(rows, asyncSlices, lastPid);
  const processes = new Set(ordered.map((t) => t.pid)).size;
  return { rows, count, processes, windowEnd, origin: doc.origin_ns, report: doc.report, capture: doc.capture };
}

function compareOrder(a, b) {
  for (let i = 0; i < Math.max(a.length, b.length); i++) {
    if ((a[i] ?? 0) !== (b[i] ?? 0)) return (a[i] ?? 0) - (b[i] ?? 0);
  }
  return 0;
}

function processLabel(track) {
  const pid = track.os_pid === track.pid ? `pid ${track.pid}` : `pid ${track.pid} (os ${track.os_pid})`;
  return `${track.process_name}  ·  ${pid}  ·  ${track.host}`;
}

function pushAsyncRow(rows, asyncSlices, pid) {
  const slices = asyncSlices.get(pid);
  if (!slices || !slices.length) return;
  rows.push(makeRow({ name: "async slices", kind: "async", pid }, { slices, ticks: [] }));
}

function makeRow(track, b) {
  const row = { kind: track.kind, label: track.name ?? `track ${track.track}`, track, levels: [], ticks: null, counter: null };
  if (b.slices.length) row.levels = levels(b.slices);
  if (b.ticks.length) {
    b.ticks.sort((x, y) => x.start - y.start);
    row.ticks = { items: b.ticks, start: Float64Array.from(b.ticks, (t) => t.start) };
  }
  return row;
}

// A counter's values as a line of its own (a track may hold several counters: one row each), labelled with the
// track it was recorded on.
function counterRow(track, name, values) {
  values.sort((x, y) => x.start - y.start);
  let min = Infinity, max = -Infinity;
  for (const c of values) { if (c.value < min) min = c.value; if (c.value > max) max = c.value; }
  const counter = {
    items: values,
    start: Float64Array.from(values, (c) => c.start),
    value: Float64Array.from(values, (c) => c.value),
    min: Math.min(min, 0), max,
  };
  const label = track.name ? `${name} · ${track.name}` : name;
  return { kind: "counter", label, track, levels: [], ticks: null, counter };
}

// Slices into levels: sorted by start (longer first), each in the first level free at its start. Nested slices land
// one level below their parent (every slice still running at a start is an ancestor); overlapping ones below too.
function levels(slices) {
  const openEnd = Number.MAX_VALUE;
  slices.sort((a, b) => a.start - b.start || (b.end ?? openEnd) - (a.end ?? openEnd));
  const lastEnd = [];
  const members = [];
  for (const s of slices) {
    const end = s.end ?? openEnd;
    let level = 0;
    while (level < lastEnd.length && lastEnd[level] > s.start) level++;
    if (level === lastEnd.length) { lastEnd.push(end); members.push([]); } else lastEnd[level] = end;
    members[level].push(s);
  }
  return members.map((items) => ({
    items,
    start: Float64Array.from(items, (s) => s.start),
    end: Float64Array.from(items, (s) => s.end ?? openEnd),
  }));
}

// The times a model's events span (ns since origin): from the first start to the last end.
export function extent(model) {
  let first = Infinity;
  for (const row of model.rows) {
    for (const level of row.levels || []) if (level.start.length) first = Math.min(first, level.start[0]);
    if (row.ticks && row.ticks.start.length) first = Math.min(first, row.ticks.start[0]);
    if (row.counter && row.counter.start.length) first = Math.min(first, row.counter.start[0]);
  }
  return first === Infinity ? [0, 1] : [first, Math.max(model.windowEnd, first + 1)];
}

// The first index whose value is >= x in a sorted array.
export function lowerBound(array, x) {
  let lo = 0, hi = array.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (array[mid] < x) lo = mid + 1; else hi = mid;
  }
  return lo;
}
