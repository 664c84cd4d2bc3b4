"""Runs a program that uses the HTTP integrations in a fresh interpreter (they patch the libraries for the process's
whole life): every integration but logging, exceptions and gc applied to a timeline ``tl`` that keeps its events in
memory; ``spans()`` flushes it and lists its spans, each a dict of its args with ``name``, ``ts`` and ``end``;
``aiohttp_statuses(app, paths)`` serves an aiohttp app while it asks for each path in turn."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from typing import Any

PRELUDE = """
import asyncio, inspect, json, sys, threading, time
from ringtrace.client import MemoryListener, Timeline
from ringtrace.client.integrations import INTEGRATIONS, applied, apply, failed

memory = MemoryListener()
tl = Timeline("t", [memory])
apply(tl, {i.name for i in INTEGRATIONS if i.name not in ("logging", "exceptions", "gc")})

def spans():
    tl.flush(10)
    return [{"name": e.name, "ts": e.ts_ns, "end": e.ts_ns + e.dur_ns, **e.args}
            for e in memory.events if e.kind == "span"]

async def aiohttp_statuses(app, paths):
    # app served by aiohttp on 127.0.0.1 (port 0) while each of paths is asked for in turn (urllib, from a thread):
    # their statuses
    import urllib.error, urllib.request
    from aiohttp import web
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    def status(path):
        try:
            return urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30).status
        except urllib.error.HTTPError as exc:
            return exc.code
    try:
        return [await asyncio.to_thread(status, path) for path in paths]
    finally:
        await runner.cleanup()
"""


def run(program: str) -> Any:
    """Run ``program`` after the prelude in a fresh interpreter; what it printed last, as JSON."""
    result = subprocess.run(
        [sys.executable, "-c", PRELUDE + textwrap.dedent(program)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])
