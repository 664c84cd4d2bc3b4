"""The collector's memory, read from outside (VmRSS in /proc), against connections that fill every table limit: their
tables count against the capacity, so that what they take stays within it, and the memory comes back once they are
gone.

Bounds are generous (the allocator's slack varies), and fail on a collector that held 24-33 MB a connection with no
bound but --max-connections, and kept most of it after they closed."""

from __future__ import annotations

import re
import time
from pathlib import Path

from collector_process import CollectorProcess, RawClient, hello
from ringtrace.client.wire.decoder import Limits
from ringtrace.client.wire.frames import Goodbye, KindSpec, Schema, Strings, Track, encode
from ringtrace.client.wire.model import THREAD_TRACK
from ringtrace.collector.store.ring import table_charge_bound

MIB = 1024 * 1024
CAPACITY = 96 * MIB
#: The collector's default table limits (docs/collector.md, "Table limits and memory").
MAX_STRINGS, MAX_STRING_BYTES, MAX_SCHEMA_BYTES, MAX_TRACKS, MAX_KINDS = 100_000, 2 * MIB, 256 * 1024, 10_000, 1000
DEFAULT_LIMITS = Limits(
    max_strings=MAX_STRINGS,
    max_tracks=MAX_TRACKS,
    max_kinds=MAX_KINDS,
    max_string_bytes=MAX_STRING_BYTES,
    max_schema_bytes=MAX_SCHEMA_BYTES,
)
#: Connections that try to fill every table limit: more than the capacity has room for.
HOSTILE = 10
#: What a connection holds besides its tables (its read buffer of 256 KiB, its objects), with room for the allocator.
PER_CONNECTION = 1 * MIB


def rss_bytes(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+)", status).group(1)) * 1024  # type: ignore[union-attr]


def text(i: int, utf8_bytes: int) -> str:
    """A text of ``utf8_bytes`` bytes of UTF-8 that Python keeps in 4 bytes a character (its last one, an emoji, makes
    it so): the most memory a byte of the limits can cost."""
    return f"{i:08d}" + "a" * (utf8_bytes - 12) + "\U0001f600"


def tables_at_every_limit() -> bytes:
    """STRINGS, TRACK and SCHEMA frames that declare all that one connection may (within the default limits)."""
    per_string = MAX_STRING_BYTES // MAX_STRINGS
    strings = [text(i, per_string) for i in range(MAX_STRINGS)]
    frames = [encode(Strings(first, tuple(strings[first : first + 1000]))) for first in range(0, MAX_STRINGS, 1000)]
    per_name = MAX_STRING_BYTES // MAX_TRACKS  # the live tracks' names have a budget of max_string_bytes too
    frames += [encode(Track(i + 1, THREAD_TRACK, text(i, per_name), i + 1)) for i in range(MAX_TRACKS)]
    per_kind = MAX_SCHEMA_BYTES // MAX_KINDS - len("span")  # (its name and its shape count)
    kinds = [KindSpec(i + 100, text(i, per_kind), "span") for i in range(MAX_KINDS)]
    frames += [encode(Schema(tuple(kinds[first : first + 50]))) for first in range(0, len(kinds), 50)]
    return b"".join(frames)


def fill_tables(collector: CollectorProcess, payload: bytes) -> tuple[list[RawClient], int, int]:
    """HOSTILE connections, each sending ``payload``; returns those still open (all of it stored), how many the
    collector closed, and its RSS after the last one it kept (before any it closed left its garbage)."""
    kept: list[RawClient] = []
    closed = kept_rss = 0
    for n in range(HOSTILE):
        raw = RawClient(collector.tcp_address, hello(pid=1000 + n, instance=f"hostile-{n}"))
        try:
            raw.send_raw(payload)
            raw.flush()
        except ConnectionError:  # closed for its tables (a timeout on a loaded machine is not that: it fails)
            raw.close()
            closed += 1
            continue
        kept.append(raw)
        if not closed:
            kept_rss = rss_bytes(collector.proc.pid)
    return kept, closed, kept_rss


def wait_for(condition: object, what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"not within {timeout_s} s: {what}"
        time.sleep(0.1)


def test_connections_filling_every_table_limit_stay_within_the_capacity() -> None:
    collector = CollectorProcess("--capacity", str(CAPACITY), "--max-connections", str(2 * HOSTILE))
    try:
        payload = tables_at_every_limit()
        before = rss_bytes(collector.proc.pid)
        kept, closed, kept_rss = fill_tables(collector, payload)
        grown = rss_bytes(collector.proc.pid) - before
        assert kept and closed, f"{len(kept)} kept, {closed} closed: the capacity bounds how many fit"
        # (A connection refused for its tables is read until its peer closes, for its GOODBYE to arrive whole.)
        wait_for(lambda: collector.json("/stats")["connections"] == len(kept), "the refused ones gone")
        stats = collector.json("/stats")
        assert stats["table_bytes"] <= CAPACITY
        line = collector.wait_for_log(lambda line: "every connection's tables" in line)
        assert f"exceeds capacity={CAPACITY}" in line
        with RawClient(collector.tcp_address, hello(pid=999, instance="told")) as told:  # the client is told why
            told.send_raw(payload)
            while not isinstance(answer := told.next_frame(), Goodbye):
                pass
            assert f"exceeds capacity={CAPACITY}" in answer.reason and "--capacity is too small" in answer.reason
        # What the collector says the tables take (and counts against the capacity) is at least what they took...
        per_connection = (kept_rss - before) / len(kept)
        charged = stats["table_bytes"] / len(kept)
        assert charged <= table_charge_bound(DEFAULT_LIMITS)  # the bound the collector warns by at start
        assert per_connection <= 1.1 * charged + PER_CONNECTION, f"{per_connection} bytes each, {charged} charged"
        # ... so that the whole stays within the capacity, however many connections try.
        assert grown <= 1.1 * CAPACITY + HOSTILE * PER_CONNECTION, f"grew by {grown} bytes"
        for raw in kept:
            raw.close()
    finally:
        collector.stop()


def test_memory_comes_back_once_connections_that_filled_their_tables_are_gone() -> None:
    collector = CollectorProcess("--capacity", str(CAPACITY), "--forget-after", "0.2", "--max-connections", "64")
    try:
        payload = tables_at_every_limit()
        before = rss_bytes(collector.proc.pid)
        for _ in range(3):  # waves: what one leaves behind would add up
            kept, _, _ = fill_tables(collector, payload)
            for raw in kept:
                raw.close()
            wait_for(lambda: collector.json("/stats")["processes"] == 0, "every process forgotten")
        # Given back to the OS (not only freed in the heap): within 64 MB of where it began, nothing being stored.
        bound = before + 64 * MIB
        wait_for(lambda: rss_bytes(collector.proc.pid) <= bound, f"RSS back within {bound} bytes", timeout_s=15)
        assert collector.json("/stats")["held_bytes"] == 0
    finally:
        collector.stop()


def test_what_the_capacity_holds_is_one_calm_line_at_start() -> None:
    small = CollectorProcess("--capacity", "8MB")
    roomy = CollectorProcess()  # the default capacity
    for collector in (small, roomy):
        collector.stop()
    (said,) = [line for line in small.lines if " capacity " in line and "holds about" in line]
    assert " INFO " in said and "capacity 7.6 MiB holds about 250,000 events" in said, said
    assert "a process whose tables do not fit is refused, and says so); for more, raise --capacity" in said
    (said,) = [line for line in roomy.lines if " capacity " in line and "holds about" in line]
    assert "capacity 256.0 MiB holds about 8,400,000 events" in said and "room for 6 such" in said, said
    for collector in (small, roomy):  # not a warning: nothing is wrong
        assert not [line for line in collector.lines if " WARNING " in line], collector.lines
