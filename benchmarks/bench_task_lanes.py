"""What recording costs an asyncio program that records in many short tasks (a server's request handlers): CPU per
task of a loop that awaits one new task after another, each recording nothing, one scope, or one instant, on a
timeline connected to a real collector subprocess (the flusher's and streamer's CPU included: the process's CPU, with
the loop's thread apart), against the same scope recorded again and again in one task.

A task that records gets a lane of its thread and a buffer of its own, which the flusher drains apart: what this
measures is that cost per task, beside the event's own. Issue 34's always-on target for an aiohttp server is bounded
by it (``bench_server_span.py``: a plain scope per request against a middleware that records nothing).

    python benchmarks/bench_task_lanes.py [--tasks N] [--rounds N] [--busy N]

``--busy N``: N tasks hold a lane each (a scope open) while the rounds run, as a server's requests in flight: a new
task looks through the busy lanes for a free one.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Awaitable, Callable

import ringtrace.client
from _common import collector, table


def per_task(
    make: Callable[[], Awaitable[None]], tasks: int, timeline: ringtrace.client.Timeline, busy: int
) -> tuple[float, float]:
    """CPU us per task: the process's (flushed: what was recorded delivered), and the loop's thread's; ``busy``
    tasks each hold a lane meanwhile (a scope open: requests in flight)."""

    async def holding(go: asyncio.Event) -> None:
        with timeline.scope("in flight"):
            await go.wait()

    async def loop() -> None:
        go = asyncio.Event()
        held = [asyncio.create_task(holding(go)) for _ in range(busy)]
        await asyncio.sleep(0)
        for _ in range(tasks):
            await asyncio.create_task(make())  # type: ignore[arg-type]
        go.set()
        await asyncio.gather(*held)

    process, thread = time.process_time(), time.thread_time()
    asyncio.run(loop())
    timeline.flush(timeout_s=60)
    return (time.process_time() - process) / tasks * 1e6, (time.thread_time() - thread) / tasks * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=20_000, help="tasks a round (default %(default)s)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds, the variants in turn (default %(default)s)")
    parser.add_argument(
        "--busy", type=int, default=0, help="tasks holding a lane each meanwhile: requests in flight (default 0)"
    )
    args = parser.parse_args()
    with collector() as running:
        tl = ringtrace.client.connect(running.tcp, process_name="bench-task-lanes")

        async def nothing() -> None:
            pass

        async def scope() -> None:
            with tl.scope("request"):
                pass

        async def instant() -> None:
            tl.instant("request")

        async def scopes_in_one_task() -> None:  # (as many scopes, in the loop's one task: no lane per task)
            for _ in range(args.tasks):
                with tl.scope("request"):
                    pass

        variants = {"a task, nothing recorded": nothing, "a task, one scope": scope, "a task, one instant": instant}
        results: dict[str, list[tuple[float, float]]] = {name: [] for name in [*variants, "one task, scopes"]}
        for _ in range(args.rounds):
            for name, make in variants.items():
                results[name].append(per_task(make, args.tasks, tl, args.busy))
            process, thread = time.process_time(), time.thread_time()
            asyncio.run(scopes_in_one_task())
            tl.flush(timeout_s=60)
            results["one task, scopes"].append(
                ((time.process_time() - process) / args.tasks * 1e6, (time.thread_time() - thread) / args.tasks * 1e6)
            )
    base = min(p for p, _ in results["a task, nothing recorded"])
    rows = [
        [
            name,
            min(p for p, _ in runs),
            min(t for _, t in runs),
            f"{min(p for p, _ in runs) - base:.2f}" if name in variants else "(a scope each, no task)",
        ]
        for name, runs in results.items()
    ]
    print(
        table(
            ["variant", "process CPU us/task", "loop thread us", "over a bare task us"],
            rows,
            f"Recording in short asyncio tasks, {args.tasks:,} tasks a round, {args.busy} more holding lanes, min of "
            f"{args.rounds} rounds",
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
