// The page: the processes table, the incidents list, the span search, the aggregates, the timeline and the flame
// graph, wired to the collector's /sources, /stats, /incidents, /spans, /aggregates, /timeline and /flamegraph. The
// timeline shows the live store (the last seconds, following live; or a fixed window), or an incident opened from
// the list (or named in the page's address, ?incident=ID) until "Back to live". A span picked in the search fixes
// the window around it, ticks its trace's processes and marks it with the trace's arrows; the address says so
// (address.js), so that a link reopens the same view.

import { liveView, readAddress, rfc3339, searchOf, spanOf, wallNs, writeAddress } from "./address.js";
import { AggregatesTable } from "./aggregates.js";
import { getJSON } from "./api.js";
import { FlameGraph } from "./flamegraph.js";
import { IncidentsList, processesText, triggerOf } from "./incidents.js";
import { buildModel, extent } from "./lanes.js";
import { download, openInPerfetto } from "./perfetto.js";
import { SearchPanel } from "./search.js";
import { CLIPPED, LOSSES, OTHER_COUNTS, SourcesTable, bytes, lost } from "./sources.js";
import { Timeline } from "./timeline.js";
import { TraceMarks } from "./trace_marks.js";

const $ = (id) => document.getElementById(id);
const number = new Intl.NumberFormat();
const POLL_MS = 1000;  // the table and, following live, the timeline: at most once a second
const MIN_SECONDS = 0.001, MAX_SECONDS = 3600, DEFAULT_SECONDS = 10;  // the window: what the input allows
const INCIDENTS_POLL_MS = 5000;  // the incidents list: new ones are rare
const INCIDENTS_LISTED = 100;
const AGGREGATES_POLL_MS = 5000;  // the aggregates, following live (each is a read of the window)
const TRACE_SPANS = 1000;  // the spans of a trace read to find its processes
const LIVE_SEARCH = "the slowest spans of the timeline's window, of the processes ticked";  // (index.html's too)

const state = { timelineBusy: false, timelineQueued: null, lastFetch: 0, originNs: null, flameBusy: false, flameQueued: false,
  incident: null, incidentsListed: true,  // incident: the id the timeline shows (null: the live store)
  fixed: null,  // a fixed window, [since, until] in wall-clock ns (BigInt); null: the last seconds
  windowNs: null,  // the window of the live store last drawn, [since, until] in wall-clock ns (BigInt)
  pendingView: null,  // what to show once the next window is drawn, [from, to] in wall-clock ns (BigInt)
  trace: null,  // the trace whose arrows are drawn (its processes ticked)
  span: null,  // the span marked: { pid, startNs (BigInt), name, durationNs } (from an address: no name nor duration)
  aggregatedAt: 0 };
const sources = new SourcesTable($("sources"), $("filter"), $("pick-all"), $("no-sources"), () => refreshTimeline());
const timeline = new Timeline($("timeline"), $("tooltip"), $("timeline-wrap"));
const flameGraph = new FlameGraph($("flamegraph"), $("flame-tooltip"), $("flame-wrap"));
const incidents = new IncidentsList($("incidents"), $("no-incidents"), (id) => openIncident(id));
const searchInputs = { name: $("search-name"), process: $("search-process"), min_duration: $("search-min"),
  trace_id: $("search-trace") };
const search = new SearchPanel($("search-form"), searchInputs, $("spans"), $("search-info"), (span) => pickSpan(span));
search.onSearch = () => runSearch();
// A name clicked in the aggregates: a search for that name alone (the other fields of an earlier search emptied: the
// aggregates count every span of the name, whatever its duration, process or trace).
const aggregates = new AggregatesTable($("aggregates"), $("aggregates-info"), (name) => {
  search.fill({ name, process: "", min_duration: "", trace_id: "" });
  runSearch();
});
const marks = new TraceMarks();
timeline.overlay = marks;
let flameAfterMove = null;
timeline.onUserMove = () => {
  $("follow").checked = false;
  clearTimeout(flameAfterMove);  // the flame graph and the address follow the view once zooming or panning pauses
  flameAfterMove = setTimeout(() => { refreshFlameGraph(); saveView(); }, 300);
};

function setStatus(text, bad = false) {
  const status = $("status");
  status.textContent = text;
  status.classList.toggle("bad", bad);
}

// The collector's totals (its /stats); with --jetstream, the fleet's (the "fleet" of /sources: every live
// collector's connections, the stream's processes and what they hold), the same names.
function showTotals(stats) {
  const lostTotal = lost(stats);
  const fleet = stats.collectors != null;
  const items = [
    ...(fleet ? [["collectors", number.format(stats.collectors)]] : []),
    ["processes", number.format(stats.processes)],
    ["connections", number.format(stats.connections)],
    ["events held", number.format(stats.stored_events)],
    [fleet ? "stream" : "memory", `${bytes(stats.used_bytes)} of ${bytes(stats.capacity_bytes)}`],
  ];
  const spans = items.map(([word, value]) => {
    const span = document.createElement("span");
    span.append(`${word} `, Object.assign(document.createElement("b"), { textContent: value }));
    return span;
  });
  const loss = document.createElement("span");
  loss.className = lostTotal ? "loss" : "";
  loss.append("events lost ", Object.assign(document.createElement("b"), { textContent: number.format(lostTotal) }));
  loss.title = [`events lost by every process ${fleet ? "of the stream" : "the collector has had"}, forgotten ones `
    + "included:", ...Object.entries({ ...LOSSES, ...CLIPPED, ...OTHER_COUNTS })
    .map(([k, w]) => `${w}: ${number.format(stats[k] || 0)}`)].join("\n");
  $("totals").replaceChildren(...spans, loss);
}

let ingestAddressShown = false;

async function pollSources() {
  try {
    const doc = await getJSON("/sources");
    // A fleet's bar is its totals (/sources' fleet): its /stats reads the whole stream, so it is asked once, for the
    // ingest address, not each second.
    const stats = doc.fleet && ingestAddressShown ? null : await getJSON("/stats");
    showTotals(doc.fleet || stats);
    if (stats) ingestAddressShown = showIngestAddress(stats.ingest_address);
    sources.update(doc.processes);
    setStatus(`updated ${new Date().toLocaleTimeString(undefined, { hour12: false })}`);
  } catch (error) {
    setStatus(String(error.message || error), true);
  }
}

// Where clients connect, for the empty table's hint: the collector's ingest address as bound (--tcp), with this
// page's host in place of a wildcard one; true once shown.
function showIngestAddress(address) {
  if (!address) return false;
  const at = address.lastIndexOf(":");
  const host = address.slice(0, at);
  const shown = host === "0.0.0.0" || host === "[::]" ? location.hostname : host;
  $("ingest-address").textContent = `${shown}:${address.slice(at + 1)}`;
  return true;
}

// The window asked for, in seconds, within the bounds.
function windowSeconds() {
  const asked = Number($("seconds").value);
  return asked ? Math.max(MIN_SECONDS, Math.min(MAX_SECONDS, asked)) : DEFAULT_SECONDS;
}

// Once given (typed, or in the address): a value out of bounds is set to the bound, so that the input shows what is
// drawn.
function settleSeconds() {
  const input = $("seconds");
  const seconds = windowSeconds();
  if (Number(input.value) !== seconds) input.value = String(seconds);
}

// The query string that selects what the timeline shows (the same for the downloads): the last seconds, or the
// fixed window.
function selection() {
  const params = state.fixed === null ? new URLSearchParams({ since: `-${windowSeconds()}s` })
    : new URLSearchParams({ since: String(state.fixed[0]), until: String(state.fixed[1]) });
  selectProcesses(params, sources.selectedPids());
  return params.toString();
}

// Selects the processes `pids` (null: every one) in the query `params`, by the pid each shows (/sources' pid,
// shown_pid): those alone, not another process that has the same OS pid (one that connected again under another
// name), as `pid` would.
function selectProcesses(params, pids) {
  if (pids !== null) params.set("shown_pid", pids.length ? pids.join(",") : "0");
}

// The query string of the search and the aggregates: the window last drawn, as absolute times, and the processes
// ticked (or `pids`: those drawn); null before one is drawn.
function windowQuery(pids = sources.selectedPids()) {
  if (state.windowNs === null) return null;
  const params = new URLSearchParams({ since: String(state.windowNs[0]), until: String(state.windowNs[1]) });
  selectProcesses(params, pids);
  return params.toString();
}

async function refreshTimeline(keepView = false, polled = false) {
  if (state.timelineBusy) {
    // One more once the one under way is done, with what this one asked: its view kept if any call queued meanwhile
    // asked to keep it (a span picked: the one under way showed the zoom, which the next must not undo), and polled
    // only if all were.
    const queued = state.timelineQueued;
    state.timelineQueued = {
      keepView: keepView || (queued !== null && queued.keepView),
      polled: polled && (queued === null || queued.polled),
    };
    return;
  }
  state.timelineBusy = true;
  timeline.canvas.dataset.busy = "1";  // (what the tests wait out: a window fetched and drawn, none queued after it)
  // Asked for while following live: if the user zoomed or panned meanwhile (which stops following), the answer brings
  // its data but leaves their view as it is.
  const live = $("follow").checked;
  try {
    if (state.incident !== null) { await showIncident(state.incident, keepView); return; }
    timeline.setMarker(null);
    const query = selection();
    const pids = sources.selectedPids();
    const started = performance.now();
    const doc = await getJSON(`/timeline?${query}`);
    const fetched = performance.now();
    const model = buildModel(doc, pids);
    state.originNs = BigInt(doc.origin_ns);
    // The window asked for, in wall-clock ns, and in ns since the collector's origin (what the document's times
    // count from).
    const asked = new URLSearchParams(query);
    const since = asked.has("until") ? BigInt(asked.get("since")) : BigInt(doc.capture.query.since_ns);
    const until = asked.has("until") ? BigInt(asked.get("until"))
      : since + BigInt(Math.round(Number(asked.get("since").slice(1, -1)) * 1e9));
    state.windowNs = [since, until];
    const origin = state.originNs;
    setMarks();
    timeline.setModel(model, [Number(since - origin), Number(until - origin)], keepView || (live && !$("follow").checked));
    showPendingView();
    const drawn = performance.now();
    const lostShown = showInfo(model, doc, pids, fetched - started, drawn - fetched);
    refreshFlameGraph();
    if (!polled || Date.now() - state.aggregatedAt >= AGGREGATES_POLL_MS) {
      state.aggregatedAt = Date.now();
      aggregates.refresh(windowQuery(pids), lostShown);  // (the processes drawn, ticked or not since: the same figure)
    }
  } catch (error) {
    $("timeline-info").textContent = String(error.message || error);
  } finally {
    state.timelineBusy = false;
    const queued = state.timelineQueued;
    if (queued !== null) { state.timelineQueued = null; refreshTimeline(queued.keepView, queued.polled); }
    else timeline.canvas.dataset.busy = "";
  }
}

// The incident `id` on the timeline: its snapshot (every process it kept), the window it kept, its trigger marked.
async function showIncident(id, keepView) {
  const started = performance.now();
  const doc = await getJSON(`/incidents/${encodeURIComponent(id)}?format=timeline`);
  const fetched = performance.now();
  if (state.incident !== id) return;  // (back to live, or another one opened, meanwhile)
  const record = incidents.find(id) || await findIncident(id);
  const model = buildModel(doc, null);
  state.originNs = BigInt(doc.origin_ns);
  const origin = BigInt(doc.origin_ns);
  const kept = record && record.window && record.window.since_ns != null && record.window.until_ns != null
    ? [Number(BigInt(record.window.since_ns) - origin), Number(BigInt(record.window.until_ns) - origin)]
    : extent(model);
  timeline.setMarker(triggerOf(record, doc.origin_ns));
  setMarks();  // (a span of the incident's, picked in its search)
  timeline.setModel(model, kept, keepView);
  $("incident-name").textContent = record ? `${record.id} · ${record.rule || ""}` : id;
  showInfo(model, doc, null, fetched - started, performance.now() - fetched);
  const from = record ? ` · kept from ${processesText(record.processes)}` : " · not among the incidents listed";
  $("timeline-info").prepend(`incident ${id}${from} · `);
  $("flame-info").textContent = "the flame graph reads the live store: back to live to see it";
  // The search and the aggregates read the incident's snapshot too (all of it: every process it kept).
  aggregates.refresh(incidentQuery(id), null, incidentWhere(id));
  if (search.given()) runSearch(); else search.clear(`the slowest spans of ${incidentWhere(id)}`);
}

// The query that points /spans and /aggregates at the incident `id`'s snapshot, and the words for it.
function incidentQuery(id) {
  return new URLSearchParams({ incident: id }).toString();
}

function incidentWhere(id) {
  return `incident ${id} (its snapshot, every process it kept)`;
}

// The trace and the span to mark in the next model drawn.
function setMarks() {
  const span = state.span;
  marks.set(state.trace, span && { pid: span.pid, name: span.name, start: Number(span.startNs - state.originNs),
    duration: span.durationNs });
}

// The view asked for before the window drawn came (a span picked), once; then the address says what is shown.
function showPendingView() {
  if (state.pendingView === null) return;
  const [from, to] = state.pendingView;
  state.pendingView = null;
  timeline.view = [Number(from - state.originNs), Number(to - state.originNs)];
  timeline.draw();
  saveView();
}

// Into the address: the view (not following live), the trace and the span marked.
function saveView() {
  if (state.incident !== null || state.originNs === null) return;
  const fixed = !$("follow").checked;
  const [from, to] = timeline.view;
  const since = fixed ? rfc3339(state.originNs + BigInt(Math.floor(from))) : null;
  const until = fixed ? rfc3339(state.originNs + BigInt(Math.ceil(to))) : null;
  const span = state.span === null ? null : `${state.span.pid}@${rfc3339(state.span.startNs)}`;
  writeAddress({ since, until, trace: state.trace, span });
  timeline.canvas.dataset.view = fixed ? `${since}/${until}` : "";
}

// The whole window in view again (the Reset button, the 0 key). The address drops the view that zooming wrote: a
// window of the last seconds holds no since/until (a fixed one, a span's or an address's, is written as it is), and
// a save of the zoom still due is dropped.
function resetZoom() {
  clearTimeout(flameAfterMove);
  timeline.reset();
  refreshFlameGraph();
  if (state.fixed !== null) { saveView(); return; }
  writeAddress({ since: null, until: null });
  timeline.canvas.dataset.view = "";
}

// A span of the search picked: the window fixed around it (the one drawn, widened to hold it), the timeline zoomed to
// it with a margin, its trace's processes ticked (those alone), the span marked and the trace's arrows drawn.
async function pickSpan(span) {
  if (state.incident !== null) { pickIncidentSpan(span); return; }
  if (state.windowNs === null) return;
  const startNs = BigInt(span.start_ns);
  const endNs = startNs + BigInt(span.duration_ns);
  const margin = BigInt(Math.max(Math.round(span.duration_ns / 5), 10000));  // a fifth each side, 10 µs at least
  const view = [startNs - margin, endNs + margin];
  const drawn = state.windowNs;
  const pidsDrawn = String(sources.selectedPids());
  const [since, until] = state.fixed || drawn;
  state.fixed = [since < view[0] ? since : view[0], until > view[1] ? until : view[1]];
  $("follow").checked = false;
  state.trace = span.trace_id || null;
  state.span = { pid: span.pid, startNs, name: span.name, durationNs: span.duration_ns };
  state.pendingView = view;
  if (state.trace !== null) await tickTrace(state.trace, span.pid);
  $("timeline-panel").scrollIntoView({ block: "nearest" });
  // The window and processes drawn already hold the span and its trace: marked and shown at once, not fetched again.
  const same = state.fixed[0] === drawn[0] && state.fixed[1] === drawn[1] && String(sources.selectedPids()) === pidsDrawn;
  if (same && !state.timelineBusy && timeline.model !== null) {
    setMarks();
    marks.locate(timeline);
    showPendingView();
    return;
  }
  await refreshTimeline(true);
}

// A span of the incident shown picked: the timeline zoomed to it (a fifth of its length each side), the span marked
// and its trace's arrows drawn; the incident's processes stay as they are.
function pickIncidentSpan(span) {
  if (state.originNs === null || timeline.model === null) return;
  const startNs = BigInt(span.start_ns);
  const margin = BigInt(Math.max(Math.round(span.duration_ns / 5), 10000));
  state.trace = span.trace_id || null;
  state.span = { pid: span.pid, startNs, name: span.name, durationNs: span.duration_ns };
  setMarks();
  marks.locate(timeline);
  timeline.view = [Number(startNs - margin - state.originNs), Number(startNs + BigInt(span.duration_ns) + margin
    - state.originNs)];
  timeline.draw();
  $("timeline-panel").scrollIntoView({ block: "nearest" });
}

// Ticks the processes that hold spans of trace `traceId` in the window (and `pid`), those alone.
async function tickTrace(traceId, pid) {
  const params = new URLSearchParams(selection());
  params.delete("shown_pid");
  params.set("trace_id", traceId);
  params.set("limit", String(TRACE_SPANS));
  const pids = new Set(pid === null ? [] : [pid]);
  try {
    for (const span of (await getJSON(`/spans?${params}`)).spans) pids.add(span.pid);
  } catch (error) {
    setStatus(String(error.message || error), true);
  }
  if (pids.size) sources.tickOnly([...pids]);
}

function runSearch() {
  writeAddress(search.values());
  if (state.incident !== null) { search.run(incidentQuery(state.incident), incidentWhere(state.incident)); return; }
  const query = windowQuery();
  if (query === null) $("search-info").textContent = "the search waits for the timeline's window";
  else search.run(query);
}

// An incident's record when it is not among those listed (an older one, named in the address).
async function findIncident(id) {
  try {
    const doc = await getJSON("/incidents");
    return (doc.incidents || []).find((r) => r.id === id) || null;
  } catch (error) {
    return null;
  }
}

function openIncident(id) {
  state.incident = id;
  $("follow").checked = false;
  $("incident-banner").hidden = false;
  $("incident-name").textContent = id;
  incidents.setOpen(id);
  writeAddress({ incident: id, ...liveView() });  // (the incident's window is its own)
  state.trace = null;
  state.span = null;
  // The live store's spans and aggregates are not the incident's: gone until its own are read (showIncident).
  search.clear(`reading ${incidentWhere(id)}…`);
  aggregates.clear(`reading ${incidentWhere(id)}…`);
  refreshTimeline();
}

function backToLive() {
  state.incident = null;
  $("incident-banner").hidden = true;
  incidents.setOpen(null);
  writeAddress({ incident: null });
  $("follow").checked = true;
  // The incident's spans and aggregates are not the live store's: those are read again (the aggregates with the
  // window, the search once it is drawn).
  search.clear(LIVE_SEARCH);
  aggregates.clear("");
  followLive().then(() => { if (search.given() && state.incident === null) runSearch(); });
}

// Back to the last seconds, following live: no fixed window, no span marked.
function followLive() {
  state.fixed = null;
  state.trace = null;
  state.span = null;
  writeAddress(liveView());
  timeline.canvas.dataset.view = "";
  return refreshTimeline();
}

async function pollIncidents() {
  if (!state.incidentsListed) return;
  try {
    const doc = await getJSON(`/incidents?limit=${INCIDENTS_LISTED}`);
    incidents.update(doc.incidents || []);
    incidents.setOpen(state.incident);
  } catch (error) {
    const message = String(error.message || error);
    if (/: 404 /.test(message)) {  // a collector that keeps none: said once, not asked again
      state.incidentsListed = false;
      incidents.unavailable("GET /incidents: 404");
    }
  }
}

// `pids`: the processes shown (null: all); the report counts apart those forgotten. Events lost as the table counts
// them, by the processes shown: returned, for the aggregates' note.
function showInfo(model, doc, pids, fetchMs, drawMs) {
  const info = $("timeline-info");
  const processes = model.processes;
  const parts = [`${number.format(model.count)} events`, `${processes} process${processes === 1 ? "" : "es"}`,
    `fetched in ${Math.round(fetchMs)} ms, drawn in ${Math.round(drawMs)} ms`];
  info.replaceChildren(parts.join(" · "));
  const shown = pids === null ? null : new Set(pids);
  const lostShown = doc.report.processes
    .filter((p) => shown === null || shown.has(p.pid))
    .reduce((sum, p) => sum + lost(p), 0);
  if (lostShown) {
    const span = document.createElement("span");
    span.className = "loss";
    span.textContent = ` · ${number.format(lostShown)} events lost by the processes shown (see the table)`;
    info.append(span);
  }
  if (!model.count) info.append(" · nothing recorded in this window");
  return lostShown;
}

// The query string of the flame graph: the processes ticked, the timeline's view (wall-clock ns), the thread asked for.
function flameSelection() {
  const [from, to] = timeline.view;
  const params = new URLSearchParams({
    since: String(state.originNs + BigInt(Math.floor(from))),
    until: String(state.originNs + BigInt(Math.ceil(to))),
  });
  selectProcesses(params, sources.selectedPids());
  const thread = $("flame-thread").value.trim();
  if (thread) params.set("track", thread);
  return params.toString();
}

async function refreshFlameGraph() {
  if (state.originNs === null || state.incident !== null) return;  // (no timeline yet; or an incident's, not the store's)
  if (state.flameBusy) { state.flameQueued = true; return; }
  state.flameBusy = true;
  try {
    const doc = await getJSON(`/flamegraph?${flameSelection()}`);
    flameGraph.setDocument(doc);
    const frames = doc.nodes.function.length;
    const plural = (n, word) => `${number.format(n)} ${word}${n === 1 ? "" : "s"}`;
    const parts = [plural(doc.samples, "sample"), plural(frames, "frame")];
    if (doc.cut_sample_stacks) parts.push(`${number.format(doc.cut_sample_stacks)} stacks cut (too many frames)`);
    if (!doc.samples) parts.push("no samples in this view (a program run under ringtrace run is sampled)");
    $("flame-info").textContent = parts.join(" · ");
  } catch (error) {
    $("flame-info").textContent = String(error.message || error);
  } finally {
    state.flameBusy = false;
    if (state.flameQueued) { state.flameQueued = false; refreshFlameGraph(); }
  }
}

$("flame-refresh").addEventListener("click", () => refreshFlameGraph());
$("flame-thread").addEventListener("change", () => refreshFlameGraph());
$("refresh").addEventListener("click", () => refreshTimeline());
$("reset").addEventListener("click", () => resetZoom());
timeline.onReset = () => resetZoom();
$("fit").addEventListener("click", () => {
  if (timeline.model && timeline.model.count) timeline.show(...extent(timeline.model));
});
$("seconds").addEventListener("change", () => {
  settleSeconds();
  writeAddress({ seconds: $("seconds").value });
  if (state.fixed !== null && state.incident === null) { $("follow").checked = true; followLive(); } else refreshTimeline();
});
$("follow").addEventListener("change", () => {
  if (!$("follow").checked) return;
  if (state.incident !== null) backToLive(); else followLive();
});
$("back-to-live").addEventListener("click", () => backToLive());
$("download-chrome").addEventListener("click", () => download(shownSource, "chrome").catch((e) => setStatus(e.message, true)));
$("download-perfetto").addEventListener("click", () => download(shownSource, "perfetto").catch((e) => setStatus(e.message, true)));
$("open-perfetto").addEventListener("click", () => openInPerfetto(shownSource, setStatus).catch((e) => setStatus(e.message, true)));

// Where the downloads come from: the incident shown, or the live store's selection.
function shownSource(format) {
  if (state.incident !== null) return `/incidents/${encodeURIComponent(state.incident)}?format=${format}`;
  return `/snapshot?${selection()}&format=${format}`;
}

// What the page's own query string asks for (a link to a view: address.js says what it may hold).
function readPageAddress() {
  const asked = readAddress();
  if (asked.get("incident")) {
    state.incident = asked.get("incident");
    $("follow").checked = false;
    $("incident-banner").hidden = false;
    $("incident-name").textContent = state.incident;
  }
  if (asked.has("seconds")) { $("seconds").value = asked.get("seconds"); settleSeconds(); }
  if (asked.has("filter")) $("filter").value = asked.get("filter");
  if (asked.get("follow") === "0") $("follow").checked = false;
  const since = wallNs(asked.get("since"));
  const until = wallNs(asked.get("until"));
  if (since !== null && until !== null && since < until) {
    state.fixed = [since, until];
    $("follow").checked = false;
  }
  state.trace = asked.get("trace") || null;
  const span = spanOf(asked.get("span"));
  state.span = span && { ...span, name: "", durationNs: null };
  search.fill(searchOf(asked));
}

async function start() {
  readPageAddress();
  await pollSources();
  await pollIncidents();
  incidents.setOpen(state.incident);
  if (state.trace !== null && state.incident === null) await tickTrace(state.trace, state.span && state.span.pid);
  await refreshTimeline();
  if (state.fixed !== null) saveView();
  if (search.given() && state.incident === null) runSearch();  // (an incident's: once it is shown)
  setInterval(pollSources, POLL_MS);
  setInterval(pollIncidents, INCIDENTS_POLL_MS);
  setInterval(() => {
    if ($("follow").checked && state.incident === null && !document.hidden) refreshTimeline(false, true);
  }, POLL_MS);
}

start();
