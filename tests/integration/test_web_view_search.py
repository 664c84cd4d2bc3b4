"""The web view's span search, aggregates, zoom to a span, shared address and "fit to data", in a real browser
(headless Chromium, driven by Playwright) against a real collector fed by real clients: a ``front`` process whose
call to ``backend`` (a process of its own, continuing the trace from its ``traceparent``) is one trace, and an
``other`` process with spans of no trace. Where no browser is installed, the tests say so and skip."""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from browser import CHROMIUM, CHROMIUM_ARGS, generous, missing_browser, pixels, uncheck_follow, until
from collector_process import CollectorProcess, run_script
from waiting import wait_for

_MISSING = missing_browser()
pytestmark = [
    pytest.mark.skipif(_MISSING is not None, reason=str(_MISSING)),
    pytest.mark.xdist_group("web_view_search"),  # one browser and one collector for the module
]

#: Requests of growing length, then a call to the backend (argv[3]: the script the backend runs) in a trace.
FRONT = """
import subprocess, sys, time, ringtrace.client
tl = ringtrace.client.connect(sys.argv[1], process_name="front")
for i in range(12):
    with tl.scope("request", i=i):
        time.sleep(0.002 * (i + 1))
headers = {}
with tl.client_span("call backend", headers):
    subprocess.run([sys.executable, "-c", sys.argv[2], sys.argv[1], headers["traceparent"]], check=True, timeout=60)
assert tl.flush(5)
"""
#: The backend: the call's server span, continuing the front's trace.
BACKEND = """
import sys, time, ringtrace.client
tl = ringtrace.client.connect(sys.argv[1], process_name="backend")
with tl.server_span("handle", {"traceparent": sys.argv[2]}):
    time.sleep(0.03)
assert tl.flush(5)
"""
#: Spans of no trace, in a process the trace does not reach.
OTHER = """
import sys, time, ringtrace.client
tl = ringtrace.client.connect(sys.argv[1], process_name="other")
for i in range(5):
    with tl.scope("request", i=i):
        time.sleep(0.001)
assert tl.flush(5)
"""
WIDTH, HEIGHT = 1300, 1000
RFC3339 = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)\.(\d{9})Z")
#: The outline of the span marked and the trace's arrows (trace_marks.js INK).
INK_RGB = (29, 35, 48)
SPAN_COLUMNS = ("name", "count", "p50_ns", "p90_ns", "p99_ns", "max_ns", "total_ns")


def wall_ns(text: str) -> int:
    """RFC 3339 as the page writes it (UTC, nine digits of fraction) as wall-clock ns."""
    match = RFC3339.fullmatch(text)
    assert match is not None, text
    seconds = datetime.strptime(match[1], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC).timestamp()
    return int(seconds) * 10**9 + int(match[2])


@pytest.fixture(scope="module")
def collector() -> Iterator[CollectorProcess]:
    started = CollectorProcess()
    try:
        run_script(started, FRONT, BACKEND)
        run_script(started, OTHER)
        started.wait_for_stored(12 + 1 + 1 + 5)
        yield started
    finally:
        started.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()


class Page:
    """A browser page on the collector."""

    def __init__(self, browser: Any, url: str) -> None:
        self.context = generous(browser.new_context(viewport={"width": WIDTH, "height": HEIGHT}))
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.page.on("pageerror", lambda error: self.errors.append(str(error)))
        self.page.goto(url)

    def drawn(self) -> None:
        """Wait until the timeline drew every span recorded."""
        until(self.page, "() => /(\\d+) events/.test(document.getElementById('timeline-info').textContent)")

    def search(self, **fields: str) -> list[list[str]]:
        """Fill the search's fields, search, and return the rows listed (their cells' texts)."""
        for key, value in fields.items():
            self.page.fill(f"#search-{key}", value)  # (name, process, min, trace)
        self.page.click("#search-form button")
        until(self.page, "() => document.getElementById('search-info').textContent.includes('slowest first')")
        return self.rows()

    def rows(self) -> list[list[str]]:
        return list(
            self.page.evaluate(
                "() => [...document.querySelectorAll('#spans tbody tr')]"
                ".map((tr) => [...tr.cells].map((td) => td.textContent))"
            )
        )

    def dataset(self, key: str) -> str:
        return str(self.page.evaluate("key => document.getElementById('timeline').dataset[key] || ''", key))

    def ticked(self) -> set[str]:
        return set(
            self.page.evaluate(
                "() => [...document.querySelectorAll('#sources tbody tr')]"
                ".filter((tr) => tr.querySelector('input').checked).map((tr) => tr.cells[1].textContent)"
            )
        )

    def close(self) -> None:
        self.context.close()


def inked(page: Page) -> int:
    """The pixels of the timeline in the ink of a span marked and of the trace's arrows."""
    image = pixels(page.page.locator("#timeline").screenshot())
    return image.count(
        (200, 30, image.width, image.height),  # right of the row labels, below the axis
        lambda rgb: all(abs(a - b) <= 12 for a, b in zip(rgb, INK_RGB, strict=True)),
    )


#: Every answer to /timeline held back 1.5 s in the page (its fetch wrapped): following live, a refresh is then
#: always under way.
SLOW_TIMELINE = """() => {
  const fetched = window.fetch;
  window.fetch = async (...args) => {
    const response = await fetched(...args);
    if (String(args[0]).includes("/timeline")) await new Promise((resolve) => setTimeout(resolve, 1500));
    return response;
  };
}"""


def page_on(browser: Any, collector: CollectorProcess, query: str = "") -> Page:
    # The window reaches back to what was recorded as the module began, however long it has run.
    newest_ns = max(process["last_wall_ns"] for process in collector.json("/sources")["processes"])
    seconds = max(60, math.ceil((time.time_ns() - newest_ns) / 1e9) + 30)
    opened = Page(browser, collector.http_url + f"/?seconds={seconds}{query}")
    opened.drawn()
    return opened


def test_the_search_lists_the_spans_slowest_first_as_get_spans_does(browser: Any, collector: CollectorProcess) -> None:
    page = page_on(browser, collector)
    try:
        rows = page.search(name="request", process="front")
        query = page.page.evaluate("() => document.getElementById('spans').dataset.query")
        asked = parse_qs(query)
        assert asked["sort"] == ["duration"] and asked["limit"] == ["50"] and asked["name"] == ["request"]
        spans = collector.json(f"/spans?{query}")["spans"]
        assert len(spans) == 12 and len(rows) == 12
        durations = [span["duration_ns"] for span in spans]
        assert durations == sorted(durations, reverse=True)
        assert [row[0] for row in rows] == ["request"] * 12
        assert all(row[1].startswith("front · ") for row in rows)
        shown = [float(row[2].split()[0]) for row in rows]  # (ms, to two digits)
        assert shown == [pytest.approx(ns / 1e6, abs=0.06) for ns in durations]
        assert parse_qs(urlsplit(page.page.url).query)["name"] == ["request"]  # the search is in the address
        assert page.errors == []
    finally:
        page.close()


#: A marker begun and never ended (an open span), and an async slice ended on another thread.
OPEN = """
import sys, threading, time, ringtrace.client
tl = ringtrace.client.connect(sys.argv[1], process_name="warming")
tl.marker("warm-up", "start")
tl.async_begin("load", 1)
worker = threading.Thread(target=lambda: (time.sleep(0.01), tl.async_end("load", 1)))
worker.start()
worker.join()
with tl.scope("step"):
    pass
assert tl.flush(5)
"""


def test_open_spans_and_async_slices_are_listed_the_open_ones_marked(browser: Any) -> None:
    collector = CollectorProcess()
    try:
        run_script(collector, OPEN)
        collector.wait_for_stored(4)
        page = page_on(browser, collector)
        try:
            rows = page.search(process="warming")
            assert [row[0] for row in rows][:2] == ["warm-up", "load"]  # (open: its duration so far, the longest)
            assert rows[0][2].startswith("≥ ") and rows[0][2].endswith(" open")
            assert not rows[1][2].endswith(" open") and float(rows[1][2].split()[0]) >= 10  # ms, begin to end
            page.page.click("#spans tbody tr")
            until(page.page, "() => document.getElementById('timeline').dataset.marked === 'warm-up'")
            # The aggregates of the window count it, and say it is open.
            until(page.page, "() => document.getElementById('aggregates-info').textContent.includes('1 of them open')")
            assert page.errors == []
        finally:
            page.close()
    finally:
        collector.stop()


def test_a_click_zooms_to_the_span_with_its_traces_processes_ticked_and_arrows(
    browser: Any, collector: CollectorProcess
) -> None:
    page = page_on(browser, collector)
    try:
        assert page.ticked() == {"front", "backend", "other"}
        (row,) = page.search(name="handle")
        assert row[1].startswith("backend · ")
        query = page.page.evaluate("() => document.getElementById('spans').dataset.query")
        (span,) = collector.json(f"/spans?{query}")["spans"]
        page.page.click("#spans tbody tr")
        until(page.page, "() => document.getElementById('timeline').dataset.marked === 'handle'")
        assert page.ticked() == {"front", "backend"}  # the trace's processes alone
        assert not page.page.is_checked("#follow")
        assert int(page.dataset("arrows")) >= 1  # the call's arrow, front to backend
        page.page.mouse.move(0, 0)  # (a tooltip would show over the canvas)

        # Drawn: the outline and the arrow, zoomed to the span, about 3,000 pixels (the span not zoomed to, a few
        # pixels wide: under 100).
        wait_for(
            lambda: inked(page), timeout_s=60, what="the span's outline and its arrow drawn", until=lambda n: n > 100
        )
        since, until_ = (wall_ns(text) for text in page.dataset("view").split("/"))
        start, end = span["start_ns"], span["start_ns"] + span["duration_ns"]
        assert since < start and end < until_  # (the page's times are JSON's doubles: 256 ns apart at most)
        assert until_ - since < 2 * span["duration_ns"]  # a margin, not the window
        address = parse_qs(urlsplit(page.page.url).query)
        assert address["trace"] == [span["trace_id"]]
        assert wall_ns(address["since"][0]) == since and wall_ns(address["until"][0]) == until_
        assert page.errors == []
    finally:
        page.close()


def test_the_aggregates_table_holds_what_get_aggregates_answers(browser: Any, collector: CollectorProcess) -> None:
    page = page_on(browser, collector)
    try:
        until(page.page, "() => document.querySelectorAll('#aggregates tbody tr').length >= 3")
        query = page.page.evaluate("() => document.getElementById('aggregates').dataset.query")
        assert parse_qs(query)["by"] == ["name"]
        shown = page.page.evaluate(
            "() => [...document.querySelectorAll('#aggregates tbody tr')]"
            ".map((tr) => Object.fromEntries([...tr.cells].map((td) => [td.dataset.key, td.dataset.value])))"
        )
        rows = collector.json(f"/aggregates?{query}")["rows"]
        assert shown == [{key: str(row[key]) for key in SPAN_COLUMNS} for row in rows]  # largest total first
        assert {row["name"] for row in rows} >= {"request", "call backend", "handle"}
        # A heading sorts; a name searches for it.
        page.page.click("#aggregates th[data-key=count]")
        counts = page.page.evaluate(
            "() => [...document.querySelectorAll('#aggregates td[data-key=count]')]"
            ".map((td) => Number(td.dataset.value))"
        )
        assert counts == sorted(counts, reverse=True) and counts[0] == 17
        page.page.click("#aggregates td.name >> text=handle")
        until(page.page, "() => document.getElementById('search-info').textContent.includes('slowest first')")
        assert page.page.input_value("#search-name") == "handle"
        assert [row[0] for row in page.rows()] == ["handle"]
        assert page.errors == []
    finally:
        page.close()


def test_a_name_clicked_in_the_aggregates_searches_for_that_name_alone(
    browser: Any, collector: CollectorProcess
) -> None:
    """An earlier search's least duration, process and trace are not kept: the aggregates count every span of the name,
    and the search lists them all."""
    page = page_on(browser, collector)
    try:
        assert [row[0] for row in page.search(name="handle", process="backend", min="1")] == ["handle"]
        until(page.page, "() => document.querySelectorAll('#aggregates tbody tr').length >= 3")
        page.page.click("#aggregates td.name >> text=request")
        query = until(
            page.page,
            "() => { const q = document.getElementById('spans').dataset.query;"
            " return new URLSearchParams(q).get('name') === 'request' && q; }",
        )
        asked = parse_qs(query)
        assert "min_duration" not in asked and "process" not in asked and "trace_id" not in asked, asked
        until(page.page, "() => document.querySelectorAll('#spans tbody tr').length === 17")
        assert {row[1].split(" · ")[0] for row in page.rows()} == {"front", "other"}  # 12 and 5
        assert [page.page.input_value(f"#search-{key}") for key in ("name", "process", "min")] == ["request", "", ""]
        assert set(parse_qs(urlsplit(page.page.url).query)) & {"process", "min_duration"} == set()
        assert page.errors == []
    finally:
        page.close()


def test_the_shared_address_reopens_the_same_window_search_and_span(browser: Any, collector: CollectorProcess) -> None:
    page = page_on(browser, collector)
    try:
        page.search(name="call*", min="1")
        page.page.click("#spans tbody tr")
        until(page.page, "() => document.getElementById('timeline').dataset.marked === 'call backend'")
        shared, view, rows = page.page.url, page.dataset("view"), page.rows()
    finally:
        page.close()
    reopened = Page(browser, shared)
    try:
        until(reopened.page, "() => document.getElementById('timeline').dataset.marked === 'call backend'")
        assert reopened.dataset("view") == view
        assert reopened.page.input_value("#search-name") == "call*"
        assert reopened.page.input_value("#search-min") == "1"
        until(reopened.page, "() => document.querySelectorAll('#spans tbody tr').length > 0")
        assert reopened.rows() == rows
        assert reopened.ticked() == {"front", "backend"}
        assert not reopened.page.is_checked("#follow")
        assert reopened.errors == []
    finally:
        reopened.close()


def test_fit_to_data_zooms_to_what_is_loaded(browser: Any, collector: CollectorProcess) -> None:
    page = page_on(browser, collector)
    try:
        uncheck_follow(page.page)
        page.page.click("#fit")
        until(page.page, "() => document.getElementById('timeline').dataset.view")
        since, until_ = (wall_ns(text) for text in page.dataset("view").split("/"))
        spans = collector.json("/spans?sort=start&limit=10000")["spans"]
        first = min(span["start_ns"] for span in spans)
        last = max(span["start_ns"] + span["duration_ns"] for span in spans)
        slack = 10**3  # (the page's times are JSON's doubles)
        assert abs(since - first) <= slack and abs(until_ - last) <= slack
        assert page.errors == []
    finally:
        page.close()


def test_a_span_picked_while_a_live_refresh_is_under_way_stays_zoomed_to(
    browser: Any, collector: CollectorProcess
) -> None:
    # The refresh the pick asks for waits for the one under way, which shows the zoom; it must keep it. It was run
    # with the live refresh's arguments instead, which reset the view to the whole window: the span a few pixels wide
    # (a CI run beside other work saw 76 pixels of ink where about 3,000 are drawn).
    page = page_on(browser, collector)
    try:
        page.page.evaluate(SLOW_TIMELINE)
        until(page.page, "() => document.getElementById('timeline').dataset.busy === '1'")
        page.search(name="handle")
        page.page.click("#spans tbody tr")
        done = "(t) => t.dataset.marked === 'handle' && t.dataset.busy === ''"
        until(page.page, f"() => ({done})(document.getElementById('timeline'))")
        (span,) = collector.json("/spans?name=handle")["spans"]
        shown_ns = int(page.dataset("shownNs"))
        assert span["duration_ns"] < shown_ns < 2 * span["duration_ns"]  # the span with a margin, not the window
        page.page.mouse.move(0, 0)  # (a tooltip would show over the canvas)
        wait_for(
            lambda: inked(page), timeout_s=60, what="the span's outline and its arrow drawn", until=lambda n: n > 100
        )
        assert page.errors == []
    finally:
        page.context.close()
