"""Incidents in the web view, in a real browser (headless Chromium, driven by Playwright) against a real collector: the
page lists the incidents saved (GET /incidents), opens one on the timeline in place of the live store with its
trigger marked (and from ``?incident=ID`` in its address), goes back to live, and draws a program's ``tl.incident``
as a tick of its own colour. Where no browser is installed, the tests say so and skip.

The incident is written into the collector's ``--incidents-dir`` as the engine writes one (``IncidentFiles``), its
snapshot a real one of a client process that the live store then forgets (``POST /clear``): what the timeline shows
of it can only come from the incident."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from browser import KEEP_DRAWN_TEXT, Image, chromium, generous, missing_browser, pixels, uncheck_follow, until
from collector_process import CollectorProcess, run_script
from ringtrace.collector.incidents.incident_files import IncidentFiles
from waiting import wait_for

_MISSING = missing_browser()
pytestmark = [
    pytest.mark.skipif(_MISSING is not None, reason=str(_MISSING)),
    pytest.mark.xdist_group("web_view_incidents"),  # one browser and one collector for the module
]

#: A checkout span holding an incident, among plain work, on two threads; the process is named by argv[2].
RECORD = """
import sys, threading, ringtrace.client
tl = ringtrace.client.connect(sys.argv[1], process_name=sys.argv[2])
def work():
    for i in range(200):
        with tl.scope("request", i=i):
            tl.instant("tick")
worker = threading.Thread(target=work, name="worker")
worker.start()
with tl.scope("checkout", order=7):
    tl.incident("payment declined", order=7)
worker.join()
assert tl.flush(5)
"""
#: What RECORD stores: 200 spans and 200 instants, a span and an incident.
RECORDED = 402
RULE = "declined payments"
WIDTH, HEIGHT = 1100, 900
#: The incidents' colour (view.css --incident, timeline.js INCIDENT).
INCIDENT_RGB = (194, 24, 91)
#: Whether the timeline shows the incident whose id is given.
SHOWS_INCIDENT = "id => document.getElementById('timeline-info').textContent.includes('incident ' + id)"


class Saved:
    """The collector, and the incident saved in its incidents directory (its record as written)."""

    def __init__(self, collector: CollectorProcess, record: dict[str, Any]) -> None:
        self.collector = collector
        self.record = record
        self.id: str = record["id"]


def incident_event(collector: CollectorProcess, process: str) -> dict[str, Any]:
    """The incident ``process`` recorded, from the web view's own document: its wall-clock start and its name."""
    document = collector.json(f"/timeline?process={process}&category=incident")
    (block,) = [block for block in document["blocks"] if "cat" in block]
    (i,) = [i for i, category in enumerate(block["cat"]) if category == "incident"]
    return {"ts_ns": document["origin_ns"] + block["ts"][i], "dur_ns": 0, "name": document["names"][block["name"][i]]}


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Saved]:
    directory = tmp_path_factory.mktemp("incidents")
    collector = CollectorProcess("--incidents-dir", str(directory))
    try:
        run_script(collector, RECORD, "shop")
        collector.wait_for_stored(RECORDED)
        status, native = collector.get("/snapshot?format=native&process=shop")
        assert status == 200, native
        event = incident_event(collector, "shop")
        pid = collector.json("/sources")["processes"][0]["pid"]
        files = IncidentFiles(directory, max_count=100, max_bytes=2**30)
        record = {
            "id": files.new_id(RULE, event["ts_ns"]),
            "rule": RULE,
            "time_ns": event["ts_ns"],
            "reason": "tl.incident: payment declined",
            "processes": [{"pid": pid, "name": "shop", "host": "here"}],
            "window": {"since_ns": event["ts_ns"] - 5 * 10**9, "until_ns": event["ts_ns"] + 2 * 10**9},
            "trigger": {"process": {"pid": pid, "name": "shop", "host": "here"}, "event": event},
            "events": RECORDED,
        }
        files.begin(record)
        files.save(record, [native])
        status, _ = collector.post("/clear?process=shop")  # the live store forgets it: only the incident holds it
        assert status == 200
        run_script(collector, RECORD, "live")
        collector.wait_for_stored(RECORDED)
        yield Saved(collector, record)
    finally:
        collector.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as launched:
        yield launched


class Page:
    """A browser page on the collector."""

    def __init__(self, browser: Any, url: str) -> None:
        self.context = generous(browser.new_context(viewport={"width": WIDTH, "height": HEIGHT}))
        self.context.add_init_script(KEEP_DRAWN_TEXT)
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.page.on("pageerror", lambda error: self.errors.append(str(error)))
        self.page.goto(url)

    def info(self) -> str:
        return str(self.page.inner_text("#timeline-info"))

    def canvas(self) -> Image:
        self.page.mouse.move(0, 0)  # (a tooltip would show over it)
        return pixels(self.page.locator("#timeline").screenshot())

    def close(self) -> None:
        self.context.close()


def page_on(browser: Any, saved: Saved, query: str = "") -> Page:
    # The window reaches back to what was recorded as the module began, however long it has run.
    processes = saved.collector.json("/sources")["processes"]
    newest_ns = max(process["last_wall_ns"] or 0 for process in processes)  # ("shop", cleared, holds none)
    seconds = max(60, math.ceil((time.time_ns() - newest_ns) / 1e9) + 30)
    return Page(browser, saved.collector.http_url + f"/?seconds={seconds}{query}")


def incident_coloured(image: Image) -> int:
    """Pixels of the plot (right of the row labels, below the axis) in the incidents' colour."""
    return image.count(
        (200, 30, image.width, image.height),
        lambda rgb: all(abs(a - b) <= 6 for a, b in zip(rgb, INCIDENT_RGB, strict=True)),
    )


def test_the_list_shows_the_incident_and_opening_it_shows_its_snapshot_with_the_trigger_marked(
    browser: Any, saved: Saved
) -> None:
    page = page_on(browser, saved)
    try:
        row = page.page.locator("#incidents tbody tr", has_text=RULE)
        row.wait_for()
        text = row.inner_text()
        assert "shop (pid" in text and "saved" in text and str(RECORDED) in text
        row.click()
        until(
            page.page, "id => document.getElementById('timeline-info').textContent.includes('incident ' + id)", saved.id
        )
        assert page.page.locator("#incident-banner").is_visible()
        assert not page.page.is_checked("#follow")
        assert parse_qs(urlsplit(page.page.url).query)["incident"] == [saved.id]
        assert "shop" in page.info() and "1 process" in page.info()  # the incident's process, not the live one
        assert f"▼ {RULE}: payment declined" in page.page.evaluate("window.drawnText")
        assert incident_coloured(page.canvas()) > 50  # the trigger's line across the rows, and the incident's tick
        assert "open" in (row.get_attribute("class") or "")
        # Back to live: the live store, where "shop" is no more.
        page.page.click("#back-to-live")
        until(page.page, "() => !document.getElementById('timeline-info').textContent.includes('incident ')")
        assert page.page.locator("#incident-banner").is_hidden()
        assert page.page.is_checked("#follow")
        assert "incident" not in parse_qs(urlsplit(page.page.url).query)
        until(page.page, "() => document.getElementById('timeline').dataset.marker === ''")
        assert page.errors == []
    finally:
        page.close()


def test_the_address_opens_an_incident(browser: Any, saved: Saved) -> None:
    page = page_on(browser, saved, f"&incident={saved.id}")
    try:
        until(
            page.page, "id => document.getElementById('timeline-info').textContent.includes('incident ' + id)", saved.id
        )
        assert page.page.locator("#incident-banner").is_visible()
        assert page.page.evaluate("document.getElementById('timeline').dataset.marker") == f"{RULE}: payment declined"
        until(page.page, "id => document.querySelector('#incidents tr.open')?.dataset.id === id", saved.id)
        assert page.errors == []
    finally:
        page.close()


def test_an_unknown_incident_in_the_address_is_said_to_be_unknown(browser: Any, saved: Saved) -> None:
    page = page_on(browser, saved, "&incident=no-such-incident")
    try:
        until(page.page, "() => /no-such-incident/.test(document.getElementById('timeline-info').textContent)")
        assert "404" in page.info()
        assert page.errors == []
    finally:
        page.close()


def test_a_programs_incident_is_a_tick_of_its_own_colour_and_says_so_when_hovered(browser: Any, saved: Saved) -> None:
    page = page_on(browser, saved, "&filter=live")
    try:
        until(page.page, "() => /[1-9][\\d,]* events/.test(document.getElementById('timeline-info').textContent)")
        uncheck_follow(page.page)
        tooltip = page.page.locator("#tooltip")

        def hovered() -> str:
            # Found again at each try: the panels above the timeline fill in as their answers come (slower on a busy
            # machine), which moves the canvas down the page after a screenshot and its box were taken.
            image = page.canvas()
            coloured = [
                (x, y)
                for y in range(30, image.height)
                for x in range(200, image.width)
                if image.pixel(x, y) == INCIDENT_RGB
            ]
            assert coloured, "no tick in the incidents' colour"
            box = page.page.locator("#timeline").bounding_box()
            x, y = coloured[len(coloured) // 2]
            page.page.mouse.move(box["x"] + x, box["y"] + y)
            return str(tooltip.inner_text()) if tooltip.is_visible() else ""

        shown = wait_for(hovered, until=lambda text: "incident ·" in text, timeout_s=30, what="the incident's tooltip")
        assert "payment declined" in shown and '"reason": "payment declined"' in shown
        assert page.errors == []
    finally:
        page.close()


#: The query the aggregates or the search last answered (``[table id, incident id or "" for the live store]``), once
#: it is of that source: their rows' first cells, else false.
ANSWERED_OF = """([table, incident]) => {
  const query = new URLSearchParams(document.getElementById(table).dataset.query || 'none=');
  const of = query.get('incident') || '';
  return !query.has('none') && of === incident
    && [...document.querySelectorAll(`#${table} tbody tr`)]
      .map((tr) => tr.cells[table === 'spans' ? 1 : 0].textContent);
}"""


def test_with_an_incident_open_the_search_and_aggregates_are_the_incident_s_and_back_to_live_the_store_s(
    browser: Any, saved: Saved
) -> None:
    page = page_on(browser, saved)
    try:
        page.page.locator("#incidents tbody tr", has_text=RULE).click()
        until(page.page, SHOWS_INCIDENT, saved.id)
        names = until(page.page, ANSWERED_OF, ["aggregates", saved.id])
        assert set(names) == {"request", "checkout"}
        info = page.page.inner_text("#aggregates-info")
        assert f"201 spans of 2 names in incident {saved.id}" in info, info
        # What the page showed is what /aggregates answers of the incident: of its process, "shop", which the live
        # store no longer holds ("live" holds the same names).
        query = page.page.evaluate("document.getElementById('aggregates').dataset.query")
        assert parse_qs(query) == {"incident": [saved.id], "by": ["name"]}
        by_process = saved.collector.json(f"/aggregates?incident={saved.id}&by=process")["rows"]
        assert {row["process"] for row in by_process} == {"shop"}
        # The search reads the incident too; a span picked is zoomed to on the incident's timeline.
        page.page.fill("#search-name", "checkout")
        page.page.click("#search-form button")
        (listed,) = until(page.page, ANSWERED_OF, ["spans", saved.id])
        assert listed.startswith("shop · "), listed
        assert f"of incident {saved.id}" in page.page.inner_text("#search-info")
        page.page.click("#spans tbody tr")
        until(page.page, "() => document.getElementById('timeline').dataset.marked === 'checkout'")
        until(page.page, SHOWS_INCIDENT, saved.id)  # (still the incident's timeline)
        # Back to live: the live store's, the search run again there.
        page.page.click("#back-to-live")
        names = until(page.page, ANSWERED_OF, ["aggregates", ""])
        assert set(names) == {"request", "checkout"}
        assert "incident" not in page.page.inner_text("#aggregates-info")
        (listed,) = until(page.page, ANSWERED_OF, ["spans", ""])
        assert listed.startswith("live · "), listed
        assert page.errors == []
    finally:
        page.close()


def test_spans_and_aggregates_of_an_incident_over_http(saved: Saved) -> None:
    collector = saved.collector
    spans = collector.json(f"/spans?incident={saved.id}&name=checkout")["spans"]
    assert [(span["process"], span["name"]) for span in spans] == [("shop", "checkout")]
    assert [row["process"] for row in collector.json("/aggregates?by=process&process=shop")["rows"]] == []  # cleared
    status, body = collector.get("/spans?incident=no-such-incident")
    assert status == 404 and b"no-such-incident" in body, body
    status, body = collector.get("/aggregates?incident=../etc")
    assert status == 400 and b"'incident'" in body, body
    status, body = collector.get(f"/spans?incident={saved.id}&flush_timeout_s=1")
    assert status == 400 and b"'flush_timeout_s' does not go with 'incident'" in body, body
