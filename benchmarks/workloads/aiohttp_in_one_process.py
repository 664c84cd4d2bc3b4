"""``aiohttp_traced_app.py``'s server and one client in one process, on one event loop over loopback, for
``bench_instructions.py``: the client sends ``REQUESTS`` requests, one after another on a keep-alive connection, and
the process exits. Under ``valgrind`` the instructions of two runs that differ only by ``REQUESTS`` give a request's
own, start and exit left out. Usage: ``aiohttp_in_one_process.py VARIANT REQUESTS [COLLECTOR]`` (``VARIANT`` as
``aiohttp_traced_app.py`` takes it; the collector's address for any but ``none``)."""

from __future__ import annotations

import asyncio
import sys

from aiohttp import web
from aiohttp_app import as_a_server_that_has_run_a_while
from aiohttp_traced_app import application

REQUEST = b"GET /prices?n=20 HTTP/1.1\r\nHost: bench\r\n\r\n"


async def send(port: int, requests: int) -> None:
    """``requests`` requests, one after another, each answered with 200 in full."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for _ in range(requests):
            writer.write(REQUEST)
            head = await reader.readuntil(b"\r\n\r\n")
            if not head.startswith(b"HTTP/1.1 200"):
                raise RuntimeError(f"the server answered {head[:40]!r}")
            fields = (line.split(b":", 1) for line in head.split(b"\r\n")[1:])
            length = next(int(value) for name, value in fields if name.lower() == b"content-length")
            await reader.readexactly(length)
    finally:
        writer.close()


async def main(variant: str, requests: int, address: str) -> None:
    runner = web.AppRunner(application(variant, address), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        await send(port, requests)
    finally:
        await runner.cleanup()


if __name__ == "__main__":
    as_a_server_that_has_run_a_while()
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else ""))
