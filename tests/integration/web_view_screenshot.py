"""The docs' picture of the web view (docs/img/web-view.png), taken as the browser tests take theirs: a real
collector, real client processes recording a few seconds of a small service's life, headless Chromium.

python tests/integration/web_view_screenshot.py [OUT.png]
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from browser import CHROMIUM, CHROMIUM_ARGS, generous, missing_browser, until
from collector_process import CollectorProcess

#: A web service's workers: requests with nested steps, a database pool (a source), log messages of each level, a
#: queue-depth counter, a startup marker, and an upload (an async slice) that outlives the threads.
SERVICE = """
import random, sys, threading, time, ringtrace.client
tl = ringtrace.client.connect(sys.argv[1], process_name=sys.argv[2])
rnd = random.Random(sys.argv[2])
served = tl.message("http", "info", "served $path in $ms ms")
slow = tl.message("http", "warning", "slow request $n")
failed = tl.message("db", "error", "query failed: $code")
pool = tl.source("db pool")
def worker(k, stop):
    i = 0
    while time.monotonic() < stop:
        i += 1
        with tl.scope("handle request", n=i, worker=k):
            with tl.scope("parse"):
                time.sleep(rnd.uniform(0.002, 0.01))
            pool.open()
            with tl.scope("query", table="users"):
                time.sleep(rnd.uniform(0.005, 0.04))
                if rnd.random() < 0.04:
                    failed(500)
            pool.close()
            with tl.scope("render"):
                with tl.scope("template"):
                    time.sleep(rnd.uniform(0.002, 0.02))
            served("/users", i % 17)
            if rnd.random() < 0.08:
                slow(i)
        tl.counter("queue depth", rnd.randint(0, 20))
        time.sleep(rnd.uniform(0.01, 0.08))
stop = time.monotonic() + float(sys.argv[3])
with tl.marker_scope("startup"):
    time.sleep(0.3)
threads = [threading.Thread(target=worker, args=(k, stop), name=f"worker-{k}") for k in range(2)]
for t in threads:
    t.start()
tl.async_begin("upload", 7, path="/big")
for t in threads:
    t.join()
tl.async_end("upload", 7)
assert tl.flush(5)
"""


def main(out: Path) -> None:
    missing = missing_browser()
    if missing is not None:
        sys.exit(missing)
    from playwright.sync_api import sync_playwright

    collector = CollectorProcess()
    try:
        clients = [
            subprocess.Popen([sys.executable, "-c", SERVICE, collector.tcp_address, name, seconds])
            for name, seconds in (("api-server", "6"), ("billing", "5"))
        ]
        assert all(client.wait(60) == 0 for client in clients)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = generous(browser.new_page(viewport={"width": 1280, "height": 800}))
            page.goto(collector.http_url + "/?follow=0")
            until(page, "() => Number(document.getElementById('timeline').dataset.drawn) > 0")
            until(page, "() => document.querySelectorAll('#sources tbody tr').length === 2")
            box = page.locator("#timeline").bounding_box()
            page.mouse.move(box["x"] + box["width"] * 0.55, box["y"] + 120)
            for _ in range(6):  # zoomed in on a second or so, where names show
                page.mouse.wheel(0, -300)
            hover(page, box, "handle request")  # a tooltip, as a user hovering sees
            page.screenshot(path=str(out))
            browser.close()
    finally:
        collector.stop()


def hover(page: object, box: dict[str, float], name: str) -> None:
    """Move the pointer over a slice of that name (the first found, scanning the top rows)."""
    tooltip = page.locator("#tooltip")  # type: ignore[attr-defined]
    for x in range(int(box["width"] * 0.45), int(box["width"] * 0.7), 15):
        for y in range(40, 140, 5):
            page.mouse.move(box["x"] + x, box["y"] + y)  # type: ignore[attr-defined]
            if tooltip.is_visible() and tooltip.inner_text().startswith(name):
                return


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/img/web-view.png"))
