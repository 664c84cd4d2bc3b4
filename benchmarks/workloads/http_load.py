"""A closed-loop HTTP load generator: CONNECTIONS keep-alive connections each send GET requests one after another for
SECONDS; prints the requests per second answered with 200. Raw asyncio streams, so that the generator itself costs
little and is the same in every round. Usage: ``http_load.py PORT SECONDS CONNECTIONS``."""

from __future__ import annotations

import asyncio
import sys
import time


async def client(port: int, until: float, counts: list[int]) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    request = b"GET /prices?n=%d HTTP/1.1\r\nHost: bench\r\n\r\n"
    number = 0
    try:
        while time.monotonic() < until:
            number += 1
            writer.write(request % (10 + number % 30))
            head = await reader.readuntil(b"\r\n\r\n")
            fields = (line.split(b":", 1) for line in head.split(b"\r\n")[1:])
            length = next(int(value) for name, value in fields if name.lower() == b"content-length")
            await reader.readexactly(length)
            if head.startswith(b"HTTP/1.1 200"):
                counts[0] += 1
    finally:
        writer.close()


async def main(port: int, seconds: float, connections: int) -> None:
    counts = [0]
    started = time.monotonic()
    until = started + seconds
    await asyncio.gather(*(client(port, until, counts) for _ in range(connections)))
    print(f"rps {counts[0] / (time.monotonic() - started):.1f}")


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])))
