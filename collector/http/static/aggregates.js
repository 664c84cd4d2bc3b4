// The aggregates table: per span name, over the timeline's window and the processes ticked (GET /aggregates?by=name),
// the count and the p50, p90, p99, longest and total durations; sorted by a click on a heading, and a click on a name
// hands it on (the page searches for it).

import { getJSON } from "./api.js";
import { lost } from "./sources.js";
import { duration } from "./timeline.js";

const number = new Intl.NumberFormat();
const COLUMNS = ["name", "count", "p50_ns", "p90_ns", "p99_ns", "max_ns", "total_ns"];

export class AggregatesTable {
  constructor(table, info, onName) {
    this.table = table;
    this.body = table.tBodies[0];
    this.info = info;
    this.onName = onName;
    this.rows = [];
    this.sortKey = "total_ns";  // as /aggregates answers: the largest total first
    this.ascending = false;
    this.asked = 0;
    for (const th of table.tHead.querySelectorAll("th[data-key]")) {
      th.addEventListener("click", () => this.sortBy(th.dataset.key));
    }
    this.body.addEventListener("click", (event) => {
      const cell = event.target.closest("td.name");
      if (cell) this.onName(cell.textContent);
    });
  }

  // `windowQuery`: the window and processes (a query string); `lostShown`: the events those processes lost as the
  // timeline counts them (one figure for the processes shown, the same on the page); else /aggregates' figure.
  // `where`: what `windowQuery` reads, in words (the timeline's window; or an incident's snapshot).
  async refresh(windowQuery, lostShown = null, where = "the timeline's window") {
    const asked = ++this.asked;
    const params = new URLSearchParams(windowQuery);
    params.set("by", "name");
    const query = params.toString();
    try {
      const doc = await getJSON(`/aggregates?${query}`);
      if (asked !== this.asked) return;
      this.rows = doc.rows;
      this.table.dataset.query = query;  // (what was asked: a test asks the same)
      this.render();
      const spans = doc.rows.reduce((sum, row) => sum + row.count, 0);
      const parts = [`${number.format(spans)} spans of ${number.format(doc.rows.length)} names in ${where}`];
      const still = doc.rows.reduce((sum, row) => sum + (row.open || 0), 0);
      if (still) parts.push(`${number.format(still)} of them open (not ended: counted with their duration so far)`);
      const lostCount = lostShown ?? lost(doc.lost || {});  // (not those forgotten, no clipped arg)
      if (lostCount) parts.push(`${number.format(lostCount)} events lost by the processes shown: counts may be short`);
      this.info.textContent = parts.join(" · ");
    } catch (error) {
      if (asked === this.asked) this.info.textContent = String(error.message || error);
    }
  }

  // Empties the table (the live store's aggregates while an incident is shown, or the other way), saying `text`.
  clear(text) {
    this.asked++;  // (an answer on its way is of what was cleared)
    this.rows = [];
    delete this.table.dataset.query;
    this.render();
    this.info.textContent = text;
  }

  sortBy(key) {
    this.ascending = this.sortKey === key ? !this.ascending : key === "name";
    this.sortKey = key;
    this.render();
  }

  render() {
    const key = this.sortKey;
    const direction = this.ascending ? 1 : -1;
    const rows = [...this.rows].sort((a, b) => {
      const x = a[key], y = b[key];
      return (typeof x === "string" ? x.localeCompare(y) : x - y) * direction || a.name.localeCompare(b.name);
    });
    this.body.replaceChildren(...rows.map((row) => {
      const tr = document.createElement("tr");
      for (const column of COLUMNS) {
        const td = document.createElement("td");
        const value = row[column];
        td.dataset.key = column;
        td.dataset.value = String(value);
        if (column === "name") {
          td.className = "name"; td.textContent = value; td.title = `search for ${value} alone`;
        } else { td.className = "num"; td.textContent = column === "count" ? number.format(value) : duration(value); }
        if (column === "count" && row.open) td.title = `${number.format(row.open)} of them open: their duration so far`;
        tr.append(td);
      }
      return tr;
    }));
    for (const th of this.table.tHead.querySelectorAll("th[data-key]")) {
      th.classList.toggle("sorted", th.dataset.key === key);
      th.classList.toggle("asc", th.dataset.key === key && this.ascending);
    }
  }
}
