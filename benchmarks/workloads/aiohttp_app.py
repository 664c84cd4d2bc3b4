"""An aiohttp server of the everyday kind: a JSON endpoint that parses a query, does a little work and logs now and
then. ``bench_always_on.py`` runs it under ``python`` and under ``ringtrace run`` in turn, and loads it with
``http_load.py``. Its port is the first argument; it prints ``listening`` once it serves. With ``--gc-stats``
(``bench_collections.py``) it also counts its garbage collections and their time, by generation, and answers them
at ``GET /gc``."""

from __future__ import annotations

import gc
import json
import logging
import sys
import time
from typing import Any

from aiohttp import web

log = logging.getLogger("shop")
#: A block above glibc's first mmap threshold (128 KiB) and above asyncio's read buffer (256 KiB).
_LARGE_BLOCK = 1 << 20


def as_a_server_that_has_run_a_while() -> None:
    """Free a large block once, as a server that has run a while has: glibc then serves blocks up to its size from
    the heap (its mmap threshold follows the largest mapped block freed). A fresh process maps and unmaps asyncio's
    256 KiB read buffer on every read instead (three system calls and fresh pages a request: about 25 us of this
    server's 110), and anything that frees a large block early (``ringtrace run``'s start does) ends that: a gain
    of the allocator's, which a fair comparison gives every variant alike."""
    bytearray(_LARGE_BLOCK)  # (made and freed at once)


async def prices(request: web.Request) -> web.Response:
    count = int(request.query.get("n", "20"))
    items = sorted(({"sku": f"sku{i}", "price": (i * 37) % 101 / 7} for i in range(count)), key=lambda x: x["price"])
    if count == 25:  # one request in 30 logs a line
        log.info("priced %d items", count)
    return web.Response(text=json.dumps(items), content_type="application/json")


#: Per generation: the collections, and their time in ns (``--gc-stats``).
_collections = [[0, 0], [0, 0], [0, 0]]
_started = [0]


def _timed(phase: str, info: dict[str, Any]) -> None:
    if phase == "start":
        _started[0] = time.perf_counter_ns()
    else:
        counts = _collections[info["generation"]]
        counts[0] += 1
        counts[1] += time.perf_counter_ns() - _started[0]


async def collections(_: web.Request) -> web.Response:
    return web.json_response(_collections)


def main() -> None:
    as_a_server_that_has_run_a_while()
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    app = web.Application()
    app.router.add_get("/prices", prices)
    if "--gc-stats" in sys.argv[2:]:
        gc.callbacks.append(_timed)
        app.router.add_get("/gc", collections)
    web.run_app(
        app, host="127.0.0.1", port=int(sys.argv[1]), print=lambda *_: print("listening", flush=True), access_log=None
    )


if __name__ == "__main__":
    main()
