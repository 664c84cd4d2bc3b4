// The incidents panel: what the collector's rules (or a program's tl.incident, or POST /incidents) saved, from
// GET /incidents, newest first, refreshed now and then; clicking one opens it on the timeline in place of the live
// store (GET /incidents/{id}?format=timeline), its trigger marked. A pending one (its window still running) shows
// when it will be ready, and opens once it is saved. A collector that keeps none (an older one) says
// so once, and the panel stays quiet.

import { clock } from "./sources.js";

const number = new Intl.NumberFormat();
const SHOWN_PROCESSES = 3;  // named in a row; the rest counted

// When an incident fired: the time of day, after the date if it was not today (incidents outlive the ring).
function when(wallNs) {
  if (wallNs == null) return "–";
  const date = new Date(Number(BigInt(wallNs) / 1000000n));
  return date.toDateString() === new Date().toDateString() ? clock(wallNs) : `${date.toLocaleDateString()} ${clock(wallNs)}`;
}

// "web (pid 12) · db (pid 40) · +2 more"
export function processesText(processes) {
  const list = processes || [];
  const named = list.slice(0, SHOWN_PROCESSES).map((p) => `${p.name} (pid ${p.pid})`);
  if (list.length > SHOWN_PROCESSES) named.push(`+${list.length - SHOWN_PROCESSES} more`);
  return named.join(" · ") || "–";
}

// The trigger of an incident as the timeline marks it: its start and end in ns since the document's origin, and
// what to call it. The record's time_ns is the trigger's start (wall-clock ns); its event, when there is one, gives
// the length and the name.
export function triggerOf(record, originNs) {
  if (!record || record.time_ns == null) return null;
  const event = (record.trigger && record.trigger.event) || {};
  const start = Number(BigInt(record.time_ns) - BigInt(originNs));
  const dur = Number(event.dur_ns) > 0 ? Number(event.dur_ns) : 0;
  return { start, end: start + dur, label: `${record.rule || "incident"}: ${event.name || record.reason || ""}`.trim() };
}

export class IncidentsList {
  constructor(table, empty, onOpen) {
    this.body = table.tBodies[0];
    this.empty = empty;
    this.onOpen = onOpen;
    this.records = [];
    this.openId = null;
  }

  // The record of `id` among those listed (null if it is not, or no longer).
  find(id) {
    return this.records.find((r) => r.id === id) || null;
  }

  update(records) {
    this.records = records;
    this.empty.hidden = records.length > 0;
    this.empty.textContent = "No incident saved yet: a rule that fires, or a program's tl.incident(), saves one.";
    this.render();
  }

  // The collector keeps no incidents (GET /incidents is not there): said once.
  unavailable(reason) {
    this.records = [];
    this.body.replaceChildren();
    this.empty.hidden = false;
    this.empty.textContent = `This collector lists no incidents (${reason}).`;
  }

  setOpen(id) {
    this.openId = id;
    for (const row of this.body.rows) row.classList.toggle("open", row.dataset.id === id);
  }

  render() {
    const rows = this.records.map((record) => {
      const row = document.createElement("tr");
      row.dataset.id = record.id;
      row.tabIndex = 0;
      const pending = record.status === "pending";
      row.title = pending ? `${record.id} is still being captured` : `open ${record.id} on the timeline`;
      row.classList.toggle("open", record.id === this.openId);
      row.classList.toggle("failed", record.status === "failed");
      row.classList.toggle("pending", pending);
      const cells = [
        when(record.time_ns),
        record.rule || "–",
        record.reason || "",
        processesText(record.processes),
        record.events == null ? "–" : number.format(record.events),
        pending ? `pending · ready ${clock(record.ready_wall_ns)}` : record.status || "–",
      ];
      for (const [i, text] of cells.entries()) {
        const cell = document.createElement("td");
        cell.textContent = text;
        if (i === 4) cell.className = "num";
        row.append(cell);
      }
      const open = () => { if (record.status !== "failed" && !pending) this.onOpen(record.id); };
      row.addEventListener("click", open);
      row.addEventListener("keydown", (event) => { if (event.key === "Enter") open(); });
      return row;
    });
    this.body.replaceChildren(...rows);
  }
}
