"""The flusher's naming of a lane's run (``recording/drain.py``): a server's lane holds, for each request, a
``TASK_SWITCH`` record and the request's span; the drain takes the switches out and gives each span its task's name
(a ``task`` argument). The C twin (``speedups.name_tasks``) against the pure-Python one (``drain._name_tasks``), in
one process, the rounds interleaved: ns per request's span, and the ratio.

This ran in the flusher's thread for every request of a loaded aiohttp server: in a profile of the flusher's passes
(cProfile, ``ringtrace run`` of ``workloads/aiohttp_app.py`` under ``http_load.py``) the Python twin held a third of
the flusher's time, more than the encoding of the events.

    python benchmarks/bench_lane_drain.py [--n REQUESTS] [--rounds N] [--quick]
"""

from __future__ import annotations

import sys
import time

from _common import bench_main, interleave, median, table
from ringtrace.client.accelerator import speedups
from ringtrace.client.recording import drain
from ringtrace.client.recording.tracks import TASK_SWITCH
from ringtrace.wire.model import INSTANT, SPAN


def lane_run(requests: int) -> tuple[list[object], object]:
    """A lane's run of ``requests`` requests, each a task (a switch, the first's aside: its name, as the recorders keep
    it) and a server span's args; and the lane's first task's name."""
    names = [f"Task-{i}" for i in range(requests)]
    run: list[object] = []
    for i, name in enumerate(names):
        if i:
            run += [TASK_SWITCH, name, None, None, None]
        args = {
            "method": "GET",
            "path": "/prices",
            "route": "/prices",
            "response": {"status": 200},
            "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736",
            "span_id": "00f067aa0ba902b7",
            "kind": "server",
        }
        run += [SPAN, "GET /prices", 1_000 + i, 2_000 + i, args]
    return run, names[0]


def bench(requests: int, rounds: int) -> int:
    if speedups is None:
        print("the C accelerator is not built here (or RINGTRACE_PURE_PYTHON=1): nothing to compare", file=sys.stderr)
        return 1
    run, first = lane_run(requests)
    name_tasks = speedups.name_tasks

    def fresh() -> list[object]:  # (each span's args held by the run alone, as the drain finds a server's)
        return [dict(v) if type(v) is dict else v for v in run]

    def python() -> float:
        copy = fresh()
        started = time.perf_counter_ns()
        drain._name_tasks(copy, first)
        return (time.perf_counter_ns() - started) / requests

    def c() -> float:
        copy = fresh()
        started = time.perf_counter_ns()
        name_tasks(copy, first, TASK_SWITCH, SPAN, INSTANT)
        return (time.perf_counter_ns() - started) / requests

    results = interleave({"python": python, "c": c}, rounds)
    base = median(results["python"])
    rows = [[name, f"{median(values):,.0f}", f"{median(values) / base:.3f}"] for name, values in results.items()]
    print(
        table(
            ["twin", "ns a request", "x python"], rows, f"A lane's run of {requests:,} requests named, {rounds} rounds"
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(bench_main(bench, __doc__, 20_000, 9, (2_000, 3)))
