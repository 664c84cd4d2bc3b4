"""The exit wait with the collector down: interpreter start and exit (``python -c pass``) under the fleet switch
(``RINGTRACE_AUTO=1``) against a port nothing listens on, against a running collector, and with the switch unset
(interleaved, medians).

With nothing listening, the exit delivery makes one connection attempt, refused, and gives up: the process should cost
about what it costs against a running collector, not ``exit_timeout_s`` (2 s) more. Its stderr is one line.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import time

from _common import bench_main, collector, interleave, median, table
from ringtrace.client.integrations import INTEGRATIONS


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _start_ms(environment: dict[str, str], said: list[int]) -> float:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", "pass"], env=environment, capture_output=True, text=True, check=True)
    elapsed = (time.perf_counter() - started) * 1e3
    said.append(len(done.stderr.splitlines()))
    return elapsed


def bench(n: int, rounds: int) -> int:
    unset = {name: value for name, value in os.environ.items() if not name.startswith("RINGTRACE_")}
    missing = [i.name for i in INTEGRATIONS if importlib.util.find_spec(i.install.partition(":")[0]) is None]
    unset["RINGTRACE_INTEGRATIONS_OFF"] = ",".join(missing)  # (each would say so on stderr)
    down = dict(unset, RINGTRACE_AUTO="1", RINGTRACE_COLLECTOR=f"127.0.0.1:{_closed_port()}")
    lines: dict[str, list[int]] = {"unset": [], "up": [], "down": []}
    with collector() as running:
        up = dict(unset, RINGTRACE_AUTO="1", RINGTRACE_COLLECTOR=running.tcp)
        results = interleave(
            {
                "unset": lambda: _start_ms(unset, lines["unset"]),
                "up": lambda: _start_ms(up, lines["up"]),
                "down": lambda: _start_ms(down, lines["down"]),
            },
            rounds,
        )
    plain, reached, refused = (median(results[name]) for name in ("unset", "up", "down"))
    rows = [
        ["RINGTRACE_AUTO=1, collector running", plain, reached, reached / plain, max(lines["up"])],
        ["RINGTRACE_AUTO=1, nothing listening", plain, refused, refused / plain, max(lines["down"])],
    ]
    print(table(["python -c pass, start and exit", "unset ms", "variant ms", "ratio", "stderr lines"], rows))
    print(f"down / up: {refused / reached:.2f} (target: about 1, not exit_timeout_s more; one stderr line at most)")
    return 0


if __name__ == "__main__":
    sys.exit(bench_main(bench, __doc__, 1, 15, (1, 3)))
