"""Where the aiohttp-server integration's cost comes from: the same aiohttp server (``workloads/aiohttp_app.py``'s
handler, run by ``workloads/aiohttp_traced_app.py``) under load (``workloads/http_load.py``), recording its requests
in five ways, each run fresh per round, interleaved round-robin, streaming to a real collector subprocess:

  none   not connected (the baseline)
  idle   connected, nothing recorded per request: the flusher and streamer threads alone
  noop   connected, a middleware that records nothing: what aiohttp's middleware chain costs
  scope  a middleware recording a plain ``Timeline.scope`` per request
  span   the integration, as applied: a ``server_span`` per request (trace ids, method, path, route, response map)

Cost: requests/s of the baseline over the variant's (medians), so 1.02 is 2% slower; and the server process's CPU
(every thread) per request answered, less noisy on a busy machine. ``--compare PYTHON`` adds
``span`` and ``scope`` run by another interpreter (another install of ringtrace: the code before a change), in the
same rounds. Then, in this process and connected to the same collector, the cost of one span to record and to flush
and encode, plain scope against server span.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import (
    collector,
    free_port,
    http_load,
    interleave,
    listening_server,
    median,
    process_cpu_s,
    table,
    wait_connected,
)

HERE = Path(__file__).resolve().parent
WORKLOADS = HERE / "workloads"
VARIANTS = ("none", "idle", "noop", "scope", "span")


def server_rps(
    variant: str, address: str, seconds: float, connections: int, python: str = sys.executable
) -> tuple[float, float]:
    """Requests/s answered, and the server's CPU us per request answered."""
    port = free_port()
    with listening_server(
        [python, str(WORKLOADS / "aiohttp_traced_app.py"), str(port), variant, address], variant, cwd=WORKLOADS
    ) as server:
        cpu_before = process_cpu_s(server.pid)
        rps = http_load(WORKLOADS, port, seconds, connections)
        return rps, (process_cpu_s(server.pid) - cpu_before) / (rps * seconds) * 1e6


def span_costs(address: str, events: int) -> dict[str, tuple[float, float]]:
    """Per span: microseconds to record, and to flush and encode (plain scope; server span as the middleware
    opens it)."""
    from ringtrace.client.connecting import connect

    timeline = connect(address, process_name="bench-span-cost")
    wait_connected(timeline)
    headers = {"Host": "bench", "Accept": "*/*"}

    def plain() -> None:
        with timeline.scope("/prices"):
            pass

    def server() -> None:
        response: dict[str, Any] = {}
        with timeline.server_span(
            "GET /prices", headers, method="GET", path="/prices", route="/prices", response=response
        ):
            response["status"] = 200

    costs: dict[str, tuple[float, float]] = {}
    for name, record in (("plain scope", plain), ("server span", server)):
        timeline.flush(30)
        started = time.perf_counter()
        for _ in range(events):
            record()
        recorded = time.perf_counter()
        timeline.flush(30)
        flushed = time.perf_counter()
        costs[name] = ((recorded - started) / events * 1e6, (flushed - recorded) / events * 1e6)
    return costs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5, help="measured rounds (default %(default)s)")
    parser.add_argument("--seconds", type=float, default=4.0, help="s of load a round (default %(default)s)")
    parser.add_argument("--connections", type=int, default=8, help="connections (default %(default)s)")
    parser.add_argument("--events", type=int, default=20_000, help="spans per cost measurement (default %(default)s)")
    parser.add_argument("--compare", metavar="PYTHON", help="also run span and scope under this interpreter")
    parser.add_argument("--quick", action="store_true", help="2 rounds, 2 s of load, 5,000 spans: a smoke test")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.seconds, args.events = 2, 2.0, 5_000
    with collector() as running:
        runs: dict[str, Callable[[], tuple[float, float]]] = {
            v: lambda v=v: server_rps(v, running.tcp, args.seconds, args.connections) for v in VARIANTS
        }
        if args.compare:
            for v in ("scope", "span"):
                runs[f"{v} (compare)"] = lambda v=v: server_rps(
                    v, running.tcp, args.seconds, args.connections, args.compare
                )
        rps = interleave(runs, args.rounds)
        costs = span_costs(running.tcp, args.events)
    rates = {v: median([r for r, _ in rounds]) for v, rounds in rps.items()}
    cpus = {v: median([c for _, c in rounds]) for v, rounds in rps.items()}
    rows = [
        [v, f"{rates[v]:,.0f}", f"{rates['none'] / rates[v]:.3f}", f"{cpus[v]:.0f}", f"{cpus[v] / cpus['none']:.3f}"]
        for v in runs
    ]
    headers = ["recording", "req/s", "cost", "CPU us/req", "CPU cost"]
    print(table(headers, rows, f"aiohttp server, {args.rounds} rounds (cost: x none)"))
    rows = [[name, f"{record:.2f}", f"{flush:.2f}"] for name, (record, flush) in costs.items()]
    print(table(["per span", "record us", "flush+encode us"], rows, f"{args.events:,} spans each, in process"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
