"""How soon data flows again after the collector restarts: a client records an instant every 5 ms; the collector is
stopped (SIGTERM, or SIGKILL), left down for a while, then started on the same port. Reported: the time from the new
collector's "listening" log line until its /healthz first shows an event stored, per round, and the median and max.

python benchmarks/bench_reconnect.py [--rounds 5] [--down-s 2.0] [--kill]
"""

from __future__ import annotations

import argparse
import signal
import statistics
import subprocess
import sys
import time

from _common import collector, free_port, table, verdict

TARGET_S = 1.0

_CLIENT = """
import sys, time, ringtrace.client
tl = ringtrace.client.connect(sys.argv[1], process_name="reconnect-bench")
while True:
    tl.instant("tick")
    time.sleep(0.005)
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--down-s", type=float, default=2.0, help="how long the collector stays down")
    parser.add_argument("--kill", action="store_true", help="stop the collector with SIGKILL instead of SIGTERM")
    parser.add_argument("--quick", action="store_true", help="2 rounds, 0.5 s down")
    args = parser.parse_args()
    rounds, down_s = (2, 0.5) if args.quick else (args.rounds, args.down_s)
    address = f"127.0.0.1:{free_port()}"
    delays = []
    with collector("--tcp", address) as first:
        client = subprocess.Popen([sys.executable, "-c", _CLIENT, address])
        try:
            if first.wait_stored(1, deadline_s=20) < 1:
                print("the client never reached the first collector", file=sys.stderr)
                return 1
            stop_signal = signal.SIGKILL if args.kill else signal.SIGTERM
            first.process.send_signal(stop_signal)
            first.process.wait(10)
            for _ in range(rounds):
                time.sleep(down_s)
                with collector("--tcp", address) as again:
                    listening = time.monotonic()
                    stored = again.wait_stored(1, deadline_s=30, poll_s=0.002)
                    delays.append(time.monotonic() - listening if stored else float("inf"))
                    again.process.send_signal(stop_signal)
                    again.process.wait(10)
        finally:
            client.kill()
            client.wait(10)
    rows = [(f"round {i + 1}", f"{d:.3f}") for i, d in enumerate(delays)]
    rows += [("median", f"{statistics.median(delays):.3f}"), ("max", f"{max(delays):.3f}")]
    how = "SIGKILL" if args.kill else "SIGTERM"
    print(table(["after a restart", "s until data flows"], rows, title=f"bench_reconnect: {how}, down {down_s}s"))
    print(f"target (max <= {TARGET_S}s after the new collector listens): {verdict(max(delays) <= TARGET_S)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
