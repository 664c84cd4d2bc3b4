"""A CPU-bound program of the everyday kind: JSON in and out, regular expressions, dataclasses, sorting, a log line
now and then. It prints how long its work took and the CPU its process spent meanwhile, every thread's (interpreter
start and exit not counted), and its main thread's own: the CPU it spent and how often it waited (voluntary context
switches: where another thread takes the GIL, the main thread drops it and waits to take it back).
``bench_always_on.py`` runs it under ``python`` and under ``ringtrace run`` in turn. A second line gives each thread's
CPU over the same time (Linux: /proc schedstat; threads by name), to see which thread a cost lands on."""

from __future__ import annotations

import dataclasses
import json
import logging
import random
import re
import resource
import sys
import threading
import time

log = logging.getLogger("cpu_mix")
WORD = re.compile(r"(?P<user>[a-z]+)@(?P<host>[a-z]+)\.(?P<tld>com|org|net)")


@dataclasses.dataclass(order=True)
class Order:
    total: float
    customer: str
    items: list[str]


def batch(rng: random.Random, size: int) -> int:
    orders = [
        Order(rng.random() * 100, f"user{rng.randrange(1000)}@shop.com", [f"sku{rng.randrange(50)}" for _ in range(5)])
        for _ in range(size)
    ]
    text = json.dumps([dataclasses.asdict(order) for order in orders])
    back = [Order(**fields) for fields in json.loads(text)]
    back.sort()
    hosts = sum(1 for order in back if (match := WORD.search(order.customer)) and match["tld"] == "com")
    by_sku: dict[str, int] = {}
    for order in back:
        for item in order.items:
            by_sku[item] = by_sku.get(item, 0) + 1
    return hosts + len(sorted(by_sku.items(), key=lambda pair: (-pair[1], pair[0])))


def thread_cpu_s() -> dict[str, float]:
    """Each live thread's CPU seconds so far, by name; empty where /proc has no schedstat."""
    cpu = {}
    for thread in threading.enumerate():
        try:
            with open(f"/proc/self/task/{thread.native_id}/schedstat") as schedstat:
                cpu[thread.name] = int(schedstat.read().split()[0]) / 1e9
        except (OSError, ValueError, IndexError):
            pass
    return cpu


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    batches = int(sys.argv[1]) if len(sys.argv) > 1 else 400
    rng = random.Random(7)
    threads_before = thread_cpu_s()
    started, started_cpu, started_main = time.perf_counter(), time.process_time(), time.thread_time()
    started_waits = resource.getrusage(resource.RUSAGE_THREAD).ru_nvcsw
    total = 0
    for number in range(batches):
        total += batch(rng, 200)
        if number % 20 == 0:
            log.info("batch %d done, total %d", number, total)  # a log line every ~20 ms: a chatty service's rate
    elapsed, cpu = time.perf_counter() - started, time.process_time() - started_cpu
    main_cpu, waits = time.thread_time() - started_main, resource.getrusage(resource.RUSAGE_THREAD).ru_nvcsw
    main_waits = waits - started_waits
    threads = {name: spent - threads_before.get(name, 0.0) for name, spent in thread_cpu_s().items()}
    print(f"elapsed_s {elapsed:.6f} cpu_s {cpu:.6f} main_cpu_s {main_cpu:.6f} main_waits {main_waits} total {total}")
    print("thread_cpu_s " + " ".join(f"{name.replace(' ', '_')}={spent:.6f}" for name, spent in threads.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
