"""A demo workload: a few threads that record nested spans and instants forever, for docker-compose."""

from __future__ import annotations

import os
import random
import threading
import time

import ringtrace.client


def worker(tl: ringtrace.client.Timeline, index: int) -> None:
    for request in range(1_000_000_000):
        with tl.scope("request", worker=index, request=request):
            with tl.scope("parse"):
                time.sleep(random.uniform(0.0005, 0.002))
            if random.random() < 0.2:
                tl.instant("cache-miss")
            with tl.scope("handle"):
                time.sleep(random.uniform(0.001, 0.01))


def main() -> None:
    tl = ringtrace.client.connect(os.environ.get("RINGTRACE_COLLECTOR", "127.0.0.1:7700"), process_name="demo")
    threads = [threading.Thread(target=worker, args=(tl, k), name=f"worker-{k}", daemon=True) for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


if __name__ == "__main__":
    main()
