// The page's address as a link to a view: what it may say, read once at load, and written back (history.replaceState)
// as the view changes, so that the address bar can be shared and reopens the same view.
//   seconds=N filter=TEXT follow=0   the live window, the processes table's filter, not following
//   incident=ID                      an incident on the timeline
//   since=T until=T                  a fixed window, RFC 3339 in UTC to the ns (or wall-clock ns)
//   trace=TRACE_ID span=PID@T        the trace shown (its processes ticked, its arrows drawn), the span marked
//   name= process= min_duration= trace_id=   the search panel's fields

const SEARCH_FIELDS = ["name", "process", "min_duration", "trace_id"];
const VIEW_FIELDS = ["since", "until", "trace", "span"];

export function readAddress() {
  return new URLSearchParams(location.search);
}

// Sets (or, for null, removes) each of `values`' parameters in the address, leaving the others as they are.
export function writeAddress(values) {
  const params = new URLSearchParams(location.search);
  for (const [key, value] of Object.entries(values)) {
    if (value === null || value === undefined || value === "") params.delete(key); else params.set(key, String(value));
  }
  const search = params.toString().replaceAll("%3A", ":").replaceAll("%40", "@");  // (legal in a query: readable)
  const address = `${location.pathname}${search ? "?" + search : ""}${location.hash}`;
  if (address !== `${location.pathname}${location.search}${location.hash}`) history.replaceState(null, "", address);
}

// The search fields of an address's parameters: { name, process, min_duration, trace_id } (absent: "").
export function searchOf(params) {
  return Object.fromEntries(SEARCH_FIELDS.map((key) => [key, params.get(key) || ""]));
}

// The view's parameters, all removed: back to following live.
export function liveView() {
  return Object.fromEntries(VIEW_FIELDS.map((key) => [key, null]));
}

// Wall-clock ns (a BigInt) as RFC 3339 in UTC with nine digits of fraction: readable, and exact.
export function rfc3339(ns) {
  const seconds = ns / 1000000000n;
  const fraction = String(ns % 1000000000n).padStart(9, "0");
  return `${new Date(Number(seconds) * 1000).toISOString().slice(0, 19)}.${fraction}Z`;
}

// RFC 3339 (what rfc3339 writes, or any fraction and offset Date.parse takes) or wall-clock ns, as ns (a BigInt);
// null if it is neither.
export function wallNs(text) {
  if (!text) return null;
  if (/^\d+$/.test(text)) return BigInt(text);
  const match = /^(.*T\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)$/i.exec(text.trim());
  if (!match) return null;
  const ms = Date.parse(match[1] + match[3]);
  if (Number.isNaN(ms)) return null;
  return BigInt(ms) * 1000000n + BigInt((match[2] || "").padEnd(9, "0"));
}

// A span named in the address (span=PID@T): { pid, startNs } or null.
export function spanOf(text) {
  const match = /^(\d+)@(.+)$/.exec(text || "");
  const startNs = match ? wallNs(match[2]) : null;
  return startNs === null ? null : { pid: Number(match[1]), startNs };
}
