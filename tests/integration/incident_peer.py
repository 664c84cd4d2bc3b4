"""A client process the incident tests drive line by line on stdin; it answers each line on stdout once done.

python incident_peer.py ADDRESS NAME

- ``ticks N``: N instants ``tick`` (args ``i``: a count over the process's life);
- ``slow NAME MS``: a span NAME lasting MS milliseconds (its own wall time: the program is the traced one);
- ``call``: opens a client span ``call`` of a new trace and prints its ``traceparent`` (``end`` closes it);
- ``serve TRACEPARENT MS``: a server span ``checkout`` of that trace lasting MS milliseconds;
- ``flood N``: N instants ``tick`` as fast as they go, each with 200 bytes of padding;
- ``incidents N REASON``: N calls of ``tl.incident(REASON, n=...)``;
- ``flush``: flush (answers ``flushed True`` and the wall-clock ns after it);
- ``crash``: SIGKILL itself (no GOODBYE);
- ``exit``: close (a GOODBYE) and exit.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from typing import Any

import ringtrace.client

PAD = "x" * 200


def main() -> None:
    address, name = sys.argv[1], sys.argv[2]
    tl = ringtrace.client.connect(address, process_name=name)
    ticks = 0
    open_call: contextlib.ExitStack | None = None
    tl.flush(timeout_s=30)  # (ready: the collector knows this process, so an incident asked for now may select it)
    print("ready", os.getpid(), flush=True)
    for line in sys.stdin:
        words = line.split()
        answer = "ok"
        if words[0] == "ticks":
            for _ in range(int(words[1])):
                tl.instant("tick", i=ticks)
                ticks += 1
            answer = f"ok {ticks}"
        elif words[0] == "flood":
            for _ in range(int(words[1])):
                tl.instant("tick", i=ticks, pad=PAD)
                ticks += 1
            answer = f"ok {ticks}"
        elif words[0] == "slow":
            with tl.scope(words[1]):
                time.sleep(int(words[2]) / 1000)
        elif words[0] == "call":
            headers: dict[str, Any] = {}
            open_call = contextlib.ExitStack()
            open_call.enter_context(tl.client_span("call", headers))
            answer = f"ok {headers['traceparent']}"
        elif words[0] == "end" and open_call is not None:
            open_call.close()
            open_call = None
        elif words[0] == "serve":
            with tl.server_span("checkout", {"traceparent": words[1]}):
                time.sleep(int(words[2]) / 1000)
        elif words[0] == "incidents":
            for n in range(int(words[1])):
                tl.incident(words[2], n=n)
        elif words[0] == "flush":
            answer = f"flushed {tl.flush(timeout_s=30)} {time.time_ns()}"
        elif words[0] == "crash":
            os.kill(os.getpid(), signal.SIGKILL)
        elif words[0] == "exit":
            print("ok", flush=True)
            tl.close()
            return
        print(answer, flush=True)


if __name__ == "__main__":
    main()
