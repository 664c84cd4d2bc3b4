"""A real program that the client's sampler samples, for the tests of what its samples show."""

from __future__ import annotations

__all__ = ["HOT_PROGRAM"]

#: A CPU-bound program sampled at 200 Hz: its hot function spins until it was sampled in, then it flushes.
HOT_PROGRAM = """
import sys, time, ringtrace.client
from ringtrace.client.sampling import start_sampler
tl = ringtrace.client.connect(sys.argv[1], process_name="busy")
start_sampler(tl, hz=200)
def spin_in_the_hot_loop():
    deadline = time.monotonic() + 1.5
    n = 0
    while time.monotonic() < deadline:
        n += sum(i * i for i in range(200))
    return n
def main():
    with tl.scope("work"):
        spin_in_the_hot_loop()
main()
assert tl.flush(10)
"""
