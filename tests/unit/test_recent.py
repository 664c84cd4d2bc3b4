"""The bounded maps that threads share (``wire/recent.py``), and the caches of decoded SCHEMA frames built on them,
used from many threads at once as the collector's snapshot readers use them."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator

import pytest
from ringtrace.wire.decoder import Limits, SessionDecoder
from ringtrace.wire.frames import Hello, KindSpec, Schema, encode, preamble
from ringtrace.wire.recent import Recent

THREADS = 8
#: More distinct schemas than the caches hold: every decode of one evicts another.
SCHEMAS = 64


@pytest.fixture
def switching_often() -> Iterator[None]:
    """Threads switch as often as the interpreter can: a race between them shows within a second."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(interval)


def on_threads(work: Callable[[int], None]) -> list[str]:
    """``work(i)`` on each of ``THREADS`` threads at once; what each raised."""
    errors: list[str] = []
    start = threading.Barrier(THREADS)

    def run(i: int) -> None:
        start.wait()
        try:
            work(i)
        except Exception as exc:
            errors.append(f"{type(exc).__name__}: {exc!r:.200}")

    threads = [threading.Thread(target=run, args=(i,)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return errors


def test_recent_forgets_the_oldest_first() -> None:
    recent: Recent[str, int] = Recent(3)
    for i, key in enumerate("abcde"):
        recent.put(key, i)
    assert len(recent) == 3
    assert [recent.get(key) for key in "abcde"] == [None, None, 2, 3, 4]
    assert recent.get("a", -1) == -1
    with pytest.raises(ValueError, match="size must be at least 1, got 0"):
        Recent(0)


@pytest.mark.usefixtures("switching_often")
def test_recent_shared_by_threads_never_raises_and_stays_bounded() -> None:
    recent: Recent[tuple[int, int], int] = Recent(16)

    def work(i: int) -> None:
        for n in range(20_000):
            recent.put((i, n), n)
            recent.get((i, n - 1))

    assert on_threads(work) == []
    assert len(recent) == 16


def _stream(i: int) -> bytes:
    """A file's stream that declares a schema of its own, ``i``."""
    hello = Hello(1000 + i, "host", f"p{i}", f"instance-{i}", "", 1, 2, "test")
    schema = Schema((KindSpec(64, f"Kind{i}", "event", (("n", "u32"),)),))
    return preamble() + encode(hello) + encode(schema)


@pytest.mark.usefixtures("switching_often")
def test_sessions_on_threads_decode_many_schemas() -> None:
    # What 8 snapshot readers do with the segments of clients of many versions: each decodes their SCHEMA frames,
    # through the caches the readers share (``Schema.decode_body``, the checked schemas of the session decoder).
    streams = [_stream(i) for i in range(SCHEMAS)]

    def work(i: int) -> None:
        for round_ in range(40):
            for n in range(SCHEMAS):
                decoder = SessionDecoder(Limits(), live=False)
                decoder.receive_data(streams[(n + i + round_) % SCHEMAS])
                frames = list(decoder)
                assert [type(frame) for frame in frames] == [Hello, Schema]
                assert decoder.tables.kinds[64].name == f"Kind{(n + i + round_) % SCHEMAS}"

    assert on_threads(work) == []
