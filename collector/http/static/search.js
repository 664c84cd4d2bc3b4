// The search panel: the spans of the timeline's window (and processes ticked) that a name, a process, a least
// duration and a trace id select (async slices and spans still open among them, the open ones marked), slowest
// first (GET /spans?sort=duration&limit=50); a click on one hands it on (the page zooms the timeline to it).

import { getJSON } from "./api.js";
import { clock } from "./sources.js";
import { duration } from "./timeline.js";

export const LISTED = 50;
const FIELDS = ["name", "process", "min_duration", "trace_id"];

export class SearchPanel {
  // `inputs`: the fields' inputs by parameter name; `onPick(span)`: a span of /spans' answer, clicked.
  constructor(form, inputs, table, info, onPick) {
    this.form = form;
    this.inputs = inputs;
    this.body = table.tBodies[0];
    this.info = info;
    this.onPick = onPick;
    this.onSearch = () => {};  // (the page runs the search in its window and writes its fields into the address)
    this.spans = [];
    this.asked = 0;  // searches asked for: a slower answer to an older one is dropped
    form.addEventListener("submit", (event) => { event.preventDefault(); this.onSearch(); });
    this.body.addEventListener("click", (event) => this.pick(event.target.closest("tr")));
    this.body.addEventListener("keydown", (event) => {
      if (event.key === "Enter") this.pick(event.target.closest("tr"));
    });
  }

  // The fields as given: { name, process, min_duration, trace_id }, each trimmed ("" when empty).
  values() {
    return Object.fromEntries(FIELDS.map((key) => [key, this.inputs[key].value.trim()]));
  }

  fill(values) {
    for (const key of FIELDS) if (values[key] !== undefined) this.inputs[key].value = values[key];
  }

  // Whether any field is given (with none, no search was asked for).
  given() {
    return Object.values(this.values()).some(Boolean);
  }

  // The query of /spans: the window and processes of `windowQuery` (a query string), and the fields. A least
  // duration given as a number alone is in ms.
  query(windowQuery) {
    const params = new URLSearchParams(windowQuery);
    for (const [key, value] of Object.entries(this.values())) {
      if (value) params.set(key, key === "min_duration" && /^\d+(\.\d+)?$/.test(value) ? `${value}ms` : value);
    }
    params.set("sort", "duration");
    params.set("limit", String(LISTED));
    return params.toString();
  }

  // Empties the list (a search of the live store while an incident is shown, or the other way), saying `text`.
  clear(text) {
    this.asked++;  // (an answer on its way is of what was cleared)
    this.spans = [];
    delete this.body.parentElement.dataset.query;
    this.render();
    this.info.textContent = text;
  }

  // `where`: what `windowQuery` reads, in words (the timeline's window; or an incident's snapshot).
  async run(windowQuery, where = "the timeline's window") {
    const asked = ++this.asked;
    const query = this.query(windowQuery);
    this.info.textContent = "searching…";
    try {
      const doc = await getJSON(`/spans?${query}`);
      if (asked !== this.asked) return;
      this.spans = doc.spans;
      this.body.parentElement.dataset.query = query;  // (what was asked: a test asks the same)
      this.render();
      const n = doc.spans.length;
      const more = n === LISTED ? ` (the slowest ${LISTED})` : "";
      const of = where === "the timeline's window" ? "" : ` of ${where}`;
      this.info.textContent = n ? `${n} span${n === 1 ? "" : "s"}${of}${more}, slowest first · click one to zoom to it`
        : `no span in ${where} matches`;
    } catch (error) {
      if (asked === this.asked) this.info.textContent = String(error.message || error);
    }
  }

  render() {
    this.body.replaceChildren(...this.spans.map((span, i) => {
      const tr = document.createElement("tr");
      tr.tabIndex = 0;
      tr.dataset.index = String(i);
      const cell = (text, cls = "") => {
        const td = document.createElement("td");
        td.textContent = text;
        if (cls) td.className = cls;
        tr.append(td);
      };
      cell(span.name, "name");
      cell(`${span.process} · ${span.track}`);
      // An open span (begun, not ended) shows its duration so far: to the window's end or now.
      cell(span.open ? `≥ ${duration(span.duration_ns)} open` : duration(span.duration_ns), "num");
      cell(clock(span.start_ns), "muted");
      if (span.open) tr.classList.add("still-open");
      const traced = span.trace_id ? `trace ${span.trace_id}` : "no trace id";
      tr.title = span.open ? `${traced} · not ended by the window's end (or now): its duration so far` : traced;
      return tr;
    }));
  }

  pick(tr) {
    if (!tr || tr.dataset.index === undefined) return;
    for (const row of this.body.rows) row.classList.toggle("open", row === tr);
    this.onPick(this.spans[Number(tr.dataset.index)]);
  }
}
