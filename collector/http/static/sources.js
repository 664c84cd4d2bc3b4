// The processes table: every process the collector knows (connected or not) from /sources, refreshed each second;
// sortable by any column, filtered by process or host name, and a process's losses marked in red.

// Every counter of events lost /sources gives per process, and the words the table shows for each (marked red, as
// /metrics counts them in ringtrace_lost_events_total). The page says one figure of events lost per scope, each
// this sum (`lost`): the bar the collector's, the timeline's and the aggregates' note the processes shown's.
export const LOSSES = {
  overwritten_events: "overwritten",
  capped_events: "capped",
  discarded_events: "discarded",
  client_dropped_events: "dropped by client",
  label_overflow_events: "label overflow",
  rejected_events: "rejected",
};
// Args cut to fit: their events are kept, so none is lost. Shown apart (not red), never in `lost`.
export const CLIPPED = { clipped_args: "clipped args" };
// Counted too, but no loss: removed on request, not yet acknowledged (they may be stored), and of those dropped by
// the client, those an unexpected error in its own threads lost (counted in "dropped by client"). In the tooltip only.
export const OTHER_COUNTS = {
  cleared_events: "cleared",
  client_unacknowledged_events: "unacknowledged",
  client_internal_error_events: "of dropped: client error",
};

// Events lost, as every part of the page counts them: those of LOSSES, and those stored that cannot be decoded
// (snapshots and searches count them; /sources and /stats do not).
export function lost(counts) {
  return Object.keys(LOSSES).reduce((sum, key) => sum + (counts[key] || 0), counts.undecodable_events || 0);
}

const number = new Intl.NumberFormat();

export function bytes(n) {
  if (n == null) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${i ? n.toFixed(1) : n} ${units[i]}`;
}

export function clock(wallNs) {
  if (wallNs == null) return "–";
  const date = new Date(Number(BigInt(wallNs) / 1000000n));
  return date.toLocaleTimeString(undefined, { hour12: false }) + "." + String(date.getMilliseconds()).padStart(3, "0");
}

// How long ago a wall-clock time (ns) was, as "12s ago": an OTLP process holds no connection, and when it last sent
// is what tells whether it is still there.
function ago(wallNs) {
  if (wallNs == null) return "–";
  const s = Math.max(0, Math.round((Date.now() - Number(BigInt(wallNs) / 1000000n)) / 1000));
  return s < 120 ? `${s}s ago` : s < 7200 ? `${Math.round(s / 60)} min ago` : `${Math.round(s / 3600)} h ago`;
}

function tracksSummary(process) {
  const counts = {};
  for (const track of process.tracks) counts[track.kind || "track"] = (counts[track.kind || "track"] || 0) + 1;
  const order = ["thread", "task", "source", "counter"];
  return Object.keys(counts)
    .sort((a, b) => order.indexOf(a) - order.indexOf(b))
    .map((kind) => `${counts[kind]} ${kind}${counts[kind] > 1 ? "s" : ""}`)
    .join(" · ");
}

function sortValue(process, key) {
  if (key === "lost") return lost(process);
  if (key === "tracks") return process.tracks.length;
  if (key === "first_wall_ns" || key === "last_wall_ns") return process[key] == null ? -1 : Number(process[key]);
  const value = process[key];
  return value == null ? -1 : value;
}

export class SourcesTable {
  constructor(table, filterInput, pickAll, emptyNote, onSelection) {
    this.table = table;
    this.body = table.tBodies[0];
    this.filterInput = filterInput;
    this.pickAll = pickAll;
    this.emptyNote = emptyNote;
    this.onSelection = onSelection;
    this.processes = [];
    this.unpicked = new Set();  // pids the user unticked; new processes come ticked
    this.sortKey = "process_name";
    this.ascending = true;
    for (const th of table.tHead.querySelectorAll("th[data-key]")) {
      th.addEventListener("click", () => this.sortBy(th.dataset.key));
    }
    filterInput.addEventListener("input", () => { this.render(); this.onSelection(); });
    pickAll.addEventListener("change", () => {
      for (const p of this.visible()) pickAll.checked ? this.unpicked.delete(p.pid) : this.unpicked.add(p.pid);
      this.render();
      this.onSelection();
    });
    this.body.addEventListener("change", (event) => {
      const pid = Number(event.target.dataset.pid);
      event.target.checked ? this.unpicked.delete(pid) : this.unpicked.add(pid);
      this.render();
      this.onSelection();
    });
  }

  update(processes) {
    this.processes = processes;
    this.render();
  }

  sortBy(key) {
    this.ascending = this.sortKey === key ? !this.ascending : ["process_name", "host"].includes(key);
    this.sortKey = key;
    this.render();
  }

  visible() {
    const text = this.filterInput.value.trim().toLowerCase();
    if (!text) return this.processes;
    return this.processes.filter((p) =>
      p.process_name.toLowerCase().includes(text) || p.host.toLowerCase().includes(text) || String(p.pid) === text);
  }

  // The pids the timeline shows: those shown in the table and ticked; null for every process.
  selectedPids() {
    const shown = this.visible();
    const picked = shown.filter((p) => !this.unpicked.has(p.pid)).map((p) => p.pid);
    if (picked.length === this.processes.length && !this.filterInput.value.trim()) return null;
    return picked;
  }

  // Ticks the processes `pids` alone, and empties the filter (which could hide one); the caller refreshes.
  tickOnly(pids) {
    const keep = new Set(pids);
    this.filterInput.value = "";
    this.unpicked = new Set(this.processes.map((p) => p.pid).filter((pid) => !keep.has(pid)));
    this.render();
  }

  render() {
    const key = this.sortKey;
    const direction = this.ascending ? 1 : -1;
    const rows = [...this.visible()].sort((a, b) => {
      const x = sortValue(a, key), y = sortValue(b, key);
      return (typeof x === "string" ? x.localeCompare(y) : x - y) * direction || a.pid - b.pid;
    });
    this.body.replaceChildren(...rows.map((p) => this.row(p)));
    this.emptyNote.hidden = this.processes.length > 0;
    for (const th of this.table.tHead.querySelectorAll("th[data-key]")) {
      th.classList.toggle("sorted", th.dataset.key === key);
      th.classList.toggle("asc", th.dataset.key === key && this.ascending);
    }
    this.pickAll.checked = rows.every((p) => !this.unpicked.has(p.pid));
  }

  row(p) {
    const tr = document.createElement("tr");
    const total = lost(p);
    tr.className = total ? "lossy" : "";
    tr.dataset.pid = p.pid;
    const cell = (text, cls = "", title = "") => {
      const td = document.createElement("td");
      td.textContent = text;
      if (cls) td.className = cls;
      if (title) td.title = title;
      tr.append(td);
      return td;
    };
    const pick = document.createElement("input");
    pick.type = "checkbox";
    pick.dataset.pid = p.pid;
    pick.checked = !this.unpicked.has(p.pid);
    pick.title = `show ${p.process_name} in the timeline`;
    cell("", "pick").append(pick);
    cell(p.process_name, "name");
    cell(p.host, "host");
    cell(p.os_pid === p.pid ? String(p.pid) : `${p.pid} (os ${p.os_pid})`, "num");
    const state = Object.assign(document.createElement("span"), { className: "state" });
    const dot = Object.assign(document.createElement("span"), { className: p.connections ? "dot on" : "dot" });
    const otlp = `OTLP, last seen ${ago(p.last_seen_wall_ns)}`;
    state.append(dot, p.via === "otlp" ? otlp : p.connections ? "connected" : "gone");
    cell("").append(state);
    cell(tracksSummary(p), "", p.tracks.map((t) => `${t.kind}: ${t.name}`).join("\n"));
    cell(p.events_per_s == null ? "–" : number.format(Math.round(p.events_per_s)), "num");
    cell(number.format(p.stored_events), "num");
    cell(bytes(p.held_bytes), "num");
    const lossTitle = Object.entries({ ...LOSSES, ...CLIPPED, ...OTHER_COUNTS })
      .map(([k, word]) => `${word}: ${number.format(p[k] || 0)}`).join("\n");
    const lossCell = cell("", total ? "num lost" : "num muted", lossTitle);
    for (const [k, word] of Object.entries({ ...LOSSES, ...CLIPPED })) {
      if (p[k]) {
        const chip = document.createElement("span");
        chip.className = k in CLIPPED ? "chip clipped" : "chip";
        chip.textContent = `${word} ${number.format(p[k])}`;
        lossCell.append(chip);
      }
    }
    if (!lossCell.childElementCount) lossCell.textContent = "0";
    cell(clock(p.first_wall_ns), "muted");
    cell(clock(p.last_wall_ns), "muted");
    return tr;
  }
}
