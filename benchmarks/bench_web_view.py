"""The web view in a real browser (headless Chromium, driven by Playwright) against a collector holding N spans.

A client subprocess records ``--n`` spans (one arg each) in a process named "bulk"; the page is opened on the last
hour (every span in its window, so all N are fetched and in view). Interleaved rounds then time, in the page:

  click to drawn        a click on Refresh until the timeline is drawn: /timeline fetched, parsed, laid out in
                        rows and levels, and drawn on the canvas (and the two parts, as the page reports them)
  Chrome JSON fetched   the baseline: the same selection fetched from /snapshot as Chrome JSON and parsed
                        (``response.json()``), nothing drawn: what a viewer that takes Chrome JSON starts from
  redraw                one redraw of the N spans in view (the whole window: zoom reset)
  pan                   one pan step (the D key): a redraw after the view moved, half zoomed in
  search listed         the span search (name "work") until its 50 slowest are listed: GET /spans over the N
  span picked to drawn  a click on the slowest listed until the timeline is drawn zoomed to it and outlined: the
                        span found among the N drawn (the window and processes drawn hold it: nothing fetched)

and, from this process, the two documents fetched whole (urllib: the collector's share of the time): /timeline and
/snapshot of the same selection. Targets: click to drawn within 1.5x the Chrome JSON fetch; a redraw of N events
within 250 ms ("well under a second"); a pan step within 50 ms (smooth enough to follow a drag).
Where no browser is installed (Debian's chromium at /usr/bin/chromium, and the playwright package) it says so and
exits 0.
"""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from _common import bench_main, collector, interleave, median, table, verdict

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # (waiting.py, which browser.py takes)
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "integration"))
from browser import CHROMIUM, CHROMIUM_ARGS, missing_browser  # (the browser the tests drive)

RECORD = """
import sys, ringtrace.client
tl = ringtrace.client.connect(sys.argv[1], process_name="bulk", max_queue_bytes=512 * 1024 * 1024)
for i in range(int(sys.argv[2])):
    with tl.scope("work", i=i):
        pass
assert tl.flush(120), "bulk not delivered"
"""
SELECTION = "since=-3600s&process=bulk"
#: In the page: a click on Refresh until the canvas says it drew again (ms).
CLICK_TO_DRAWN = """async () => {
  const canvas = document.getElementById("timeline");
  const before = canvas.dataset.drawn;
  const started = performance.now();
  document.getElementById("refresh").click();
  await new Promise((resolve) => {
    const observer = new MutationObserver(() => {
      if (canvas.dataset.drawn !== before) { observer.disconnect(); resolve(); }
    });
    observer.observe(canvas, { attributes: true, attributeFilter: ["data-drawn"] });
  });
  return performance.now() - started;
}"""
#: In the page: the same selection as Chrome JSON, fetched and parsed (ms).
CHROME_FETCHED = """async (query) => {
  const started = performance.now();
  const trace = await (await fetch("/snapshot?" + query, { cache: "no-store" })).json();
  if (!trace.traceEvents.length) throw new Error("no events");
  return performance.now() - started;
}"""
#: In the page: the search for "work" until its spans are listed (ms).
SEARCH_LISTED = """async () => {
  const info = document.getElementById("search-info");
  info.textContent = "";
  document.getElementById("search-name").value = "work";
  const started = performance.now();
  document.getElementById("search-form").requestSubmit();
  await new Promise((resolve) => {
    const observer = new MutationObserver(() => {
      if (info.textContent.includes("slowest first")) { observer.disconnect(); resolve(); }
    });
    observer.observe(info, { childList: true, characterData: true, subtree: true });
  });
  return performance.now() - started;
}"""
#: In the page: a click on the slowest span listed until the timeline drew it marked (ms).
PICK_TO_DRAWN = """async () => {
  const canvas = document.getElementById("timeline");
  canvas.dataset.marked = "";
  const marked = new Promise((resolve) => {  // (watched before the click: a span in the window drawn is marked at once)
    const observer = new MutationObserver(() => {
      if (canvas.dataset.marked === "work") { observer.disconnect(); resolve(); }
    });
    observer.observe(canvas, { attributes: true, attributeFilter: ["data-marked"] });
  });
  const started = performance.now();
  document.querySelector("#spans tbody tr").click();
  await marked;
  return performance.now() - started;
}"""
#: In the page: one key press's redraw (the handlers draw at once), in ms.
KEY_REDRAW = """(key) => {
  const wrap = document.getElementById("timeline-wrap");
  const started = performance.now();
  wrap.dispatchEvent(new KeyboardEvent("keydown", { key, bubbles: true }));
  return performance.now() - started;
}"""


def fetch_ms(url: str) -> float:
    started = time.perf_counter()
    with urllib.request.urlopen(url, timeout=300) as response:
        while response.read(1 << 20):
            pass
    return (time.perf_counter() - started) * 1000


def drawn(page: Any, n: int, timeout_s: float = 300.0) -> None:
    """Wait until the page drew its first timeline of ``n`` events. Polled from here: the page's
    Content-Security-Policy forbids the eval that Playwright's own ``wait_for_function`` runs in the page."""
    script = "n => document.getElementById('timeline-info').textContent.startsWith(n.toLocaleString() + ' events')"
    deadline = time.monotonic() + timeout_s
    while not page.evaluate(script, n):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the page did not draw {n:,} events within {timeout_s}s")
        time.sleep(0.1)


def bench(n: int, rounds: int) -> int:
    why_not = missing_browser()
    if why_not is not None:
        print(f"SKIP: {why_not}")
        return 0
    from playwright.sync_api import sync_playwright

    with collector("--capacity", "2GiB") as running, sync_playwright() as playwright:
        done = subprocess.run([sys.executable, "-c", RECORD, running.tcp, str(n)], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto(f"http://{running.http}/?seconds=3600&follow=0&filter=bulk")
            drawn(page, n)
            results = measure(page, running.http, rounds)
        finally:
            browser.close()
    return report(n, results)


def measure(page: Any, http: str, rounds: int) -> dict[str, list[float]]:
    def redraw() -> float:
        page.evaluate(KEY_REDRAW, "0")  # the whole window
        return float(page.evaluate(KEY_REDRAW, "0"))

    def pan() -> float:
        page.evaluate(KEY_REDRAW, "0")
        page.evaluate(KEY_REDRAW, "w")  # zoomed in a little, then moved
        page.evaluate(KEY_REDRAW, "w")
        page.evaluate(KEY_REDRAW, "w")
        return float(page.evaluate(KEY_REDRAW, "d"))

    def click_to_drawn() -> float:
        took = float(page.evaluate(CLICK_TO_DRAWN))
        # The page's own account of it: "... fetched in F ms, drawn in D ms" (D: laid out in rows, and drawn).
        info = page.inner_text("#timeline-info")
        fetched, drawn = (float(part.split(" ms")[0]) for part in info.split(" in ")[1:3])
        parts["  of which /timeline fetched and parsed"].append(fetched)
        parts["  of which laid out and drawn"].append(drawn)
        return took

    parts: dict[str, list[float]] = {"  of which /timeline fetched and parsed": [], "  of which laid out and drawn": []}
    results = interleave(
        {
            "click to drawn": click_to_drawn,
            "Chrome JSON fetched": lambda: float(page.evaluate(CHROME_FETCHED, SELECTION)),
            "redraw": redraw,
            "pan": pan,
            "search listed": lambda: float(page.evaluate(SEARCH_LISTED)),
            "span picked to drawn": lambda: float(page.evaluate(PICK_TO_DRAWN)),
            "/timeline (urllib)": lambda: fetch_ms(f"http://{http}/timeline?{SELECTION}"),
            "/snapshot (urllib)": lambda: fetch_ms(f"http://{http}/snapshot?{SELECTION}"),
        },
        rounds,
    )
    warmup = len(parts["  of which laid out and drawn"]) - rounds
    return {"click to drawn": results.pop("click to drawn"), **{k: v[warmup:] for k, v in parts.items()}, **results}


def report(n: int, results: dict[str, list[float]]) -> int:
    medians = {name: median(values) for name, values in results.items()}
    baseline = medians["Chrome JSON fetched"]
    targets = {
        "click to drawn": (medians["click to drawn"] <= 1.5 * baseline, "<= 1.5x Chrome JSON fetched"),
        "redraw": (medians["redraw"] <= 250, "<= 250 ms"),
        "pan": (medians["pan"] <= 50, "<= 50 ms"),
    }
    rows = []
    for name, value in medians.items():
        ok, target = targets.get(name, (None, ""))
        rows.append([name, value, value / baseline, target, "" if ok is None else verdict(ok)])
    print(table(["in the page", "median ms", "x Chrome JSON fetched", "target", ""], rows, f"{n:,} spans in view"))
    return 0


if __name__ == "__main__":
    sys.exit(bench_main(bench, __doc__, n=1_000_000, rounds=5, quick=(50_000, 2)))
