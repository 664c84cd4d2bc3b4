"""A client process for the integration tests: N threads each record spans, then flush; prints what it did as JSON.

python workload.py ADDRESS --threads 4 --spans 10000 [--instants K] [--name NAME] [--no-flush] [--cafile CA]

The collector's token, if it needs one, comes from RINGTRACE_TOKEN; ``--cafile`` connects with TLS, trusting that CA.
"""

from __future__ import annotations

import argparse
import json
import os
import ssl
import sys
import threading

import ringtrace.client


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("address")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--spans", type=int, default=0)
    parser.add_argument("--instants", type=int, default=0)
    parser.add_argument("--name", default="workload")
    parser.add_argument("--no-flush", action="store_true", help="leave delivery to the flush at interpreter exit")
    parser.add_argument("--cafile", help="connect with TLS, trusting the CA certificate in this file")
    args = parser.parse_args()

    tls = ssl.create_default_context(cafile=args.cafile) if args.cafile else False
    tl = ringtrace.client.connect(args.address, process_name=args.name, tls=tls)
    thread_ids: dict[str, int] = {}
    start = threading.Barrier(args.threads)

    def record(index: int) -> None:
        thread_ids[threading.current_thread().name] = threading.get_native_id()
        start.wait()
        for i in range(args.spans):
            with tl.scope("span", thread=index, i=i):
                pass
        for i in range(args.instants):
            tl.instant("tick", i=i)

    threads = [threading.Thread(target=record, args=(k,), name=f"{args.name}-t{k}") for k in range(args.threads)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    flushed = None if args.no_flush else tl.flush(timeout_s=30)
    json.dump(
        {
            "pid": os.getpid(),
            "threads": thread_ids,
            "flushed": flushed,
            "dropped_events": tl.dropped_events,
        },
        sys.stdout,
    )


if __name__ == "__main__":
    main()
