"""The collector's memory, read from outside (VmRSS in /proc), against connections that fill every table limit: their
tables count against the capacity, so that what they take stays within it, and the memory comes back once they are
gone.

Bounds are generous (the allocator's slack varies), and fail on a collector that held 24-33 MB a connection with no
bound but --max-connections, and kept most of it after they closed."""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
from pathlib import Path

import pytest
from collector_process import CollectorProcess, RawClient, events, hello
from ringtrace.collector.ingest.connection import READ_SIZE
from ringtrace.collector.store.ring import table_charge_bound
from ringtrace.wire.frames import Goodbye, encode
from ringtrace.wire.model import THREAD_TRACK
from ringtrace.wire.stream_limits import Limits
from ringtrace.wire.table_frames import KindSpec, Schema, Strings, Track
from waiting import wait_for

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


def tables_at_every_limit(strings_per_frame: int = 1000) -> bytes:
    """STRINGS, TRACK and SCHEMA frames that declare all that one connection may (within the default limits)."""
    per_string = MAX_STRING_BYTES // MAX_STRINGS
    strings = [text(i, per_string) for i in range(MAX_STRINGS)]
    step = strings_per_frame
    frames = [encode(Strings(first, tuple(strings[first : first + step]))) for first in range(0, MAX_STRINGS, step)]
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


def refused_for_tables(raw: RawClient, payload: bytes) -> Goodbye:
    """Send ``payload``; the GOODBYE the collector answers (it reads what is sent after it a while)."""
    with contextlib.suppress(ConnectionError):  # (it stopped reading before all was sent: the GOODBYE is there)
        raw.send_raw(payload)
    while not isinstance(answer := raw.next_frame(), Goodbye):
        pass
    return answer


@pytest.mark.parametrize("strings_per_frame", [1000, 40_000], ids=["small-frames", "frames-of-1MiB"])
def test_connections_filling_every_table_limit_stay_within_the_capacity(strings_per_frame: int) -> None:
    collector = CollectorProcess("--capacity", str(CAPACITY), "--max-connections", str(2 * HOSTILE))
    try:
        payload = tables_at_every_limit(strings_per_frame)
        before = rss_bytes(collector.proc.pid)
        kept, closed, kept_rss = fill_tables(collector, payload)
        grown = rss_bytes(collector.proc.pid) - before
        assert kept and closed, f"{len(kept)} kept, {closed} closed: the capacity bounds how many fit"
        # (A connection refused for its tables is read until its peer closes, for its GOODBYE to arrive whole.)
        wait_for(
            lambda: collector.json("/stats"),
            until=lambda s: s["connections"] == len(kept),
            timeout_s=30,
            what="the refused ones gone",
        )
        stats = collector.json("/stats")
        assert stats["table_bytes"] <= CAPACITY // 2  # tables take at most half the capacity
        assert stats["connections_tables_refused"] == closed
        # Refused past their process's share of half the capacity, or past that half (all tables together).
        refused = re.compile(rf"exceeds table_share=\d+|exceeds table_room={CAPACITY // 2}")
        line = collector.wait_for_log(lambda line: "past what they may take" in line)
        assert refused.search(line), line
        with RawClient(collector.tcp_address, hello(pid=999, instance="told")) as told:  # the client is told why
            answer = refused_for_tables(told, payload)
            assert refused.search(answer.reason) and "--capacity is too small" in answer.reason, answer.reason
        # What the collector says the tables take (and counts against the capacity) and the read buffers (which it
        # counts beside) are at least what they took: nothing of a frame's texts outlives it (those of the last
        # STRINGS frame once did, 3 to 5 MB of them in frames of 1 MiB)...
        per_connection = (kept_rss - before) / len(kept)
        charged, buffers = stats["table_bytes"] / len(kept), stats["buffer_bytes"] / len(kept)
        assert charged <= table_charge_bound(DEFAULT_LIMITS)  # the bound the collector warns by at start
        assert buffers < 2 * READ_SIZE  # (not grown for a large frame)
        assert per_connection <= charged + buffers + PER_CONNECTION, f"{per_connection} bytes each, {charged} charged"
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
            wait_for(
                lambda: collector.json("/stats"),
                until=lambda s: s["processes"] == 0,
                timeout_s=30,
                what="every process forgotten",
            )
        # Given back to the OS (not only freed in the heap): within 64 MB of where it began, nothing being stored.
        bound = before + 64 * MIB
        wait_for(
            lambda: rss_bytes(collector.proc.pid),
            until=lambda rss: rss <= bound,
            timeout_s=30,
            what=f"RSS back within {bound} bytes",
        )
        assert collector.json("/stats")["held_bytes"] == 0
    finally:
        collector.stop()


#: A client that records sys.argv[2] instants, flushes and says whether the flush held, then does it again once told
#: to (a line on its standard input).
GOOD_CLIENT = (
    "import sys, ringtrace.client\n"
    "tl = ringtrace.client.connect(sys.argv[1], process_name='good')\n"
    "count = int(sys.argv[2])\n"
    "for i in range(count):\n"
    "    tl.instant('good', i=i)\n"
    "print(tl.flush(timeout_s=30), flush=True)\n"
    "sys.stdin.readline()\n"
    "for i in range(count, count + 1000):\n"
    "    tl.instant('good', i=i)\n"
    "print(tl.flush(timeout_s=30), flush=True)\n"
    "sys.stdin.readline()\n"
)


def test_processes_that_only_declare_tables_are_held_to_their_share_and_leave_other_processes_events_alone() -> None:
    capacity = 64 * MIB
    collector = CollectorProcess("--capacity", str(capacity), "--forget-after", "0.2")
    good = subprocess.Popen(
        [sys.executable, "-c", GOOD_CLIENT, collector.tcp_address, "100000"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert good.stdin is not None and good.stdout is not None
    try:
        assert good.stdout.readline().strip() == "True"
        held = collector.json("/stats")["held_bytes"]
        # Four processes that send only tables, each at every table limit (22 MB charged): 88 MB, more than the
        # whole capacity. Each is held to its share of half the capacity (among the 5 processes connected), refused
        # and told why; none of the good client's events goes for them.
        payload = tables_at_every_limit()
        fillers = [RawClient(collector.tcp_address, hello(pid=1000 + n, instance=f"tables-{n}")) for n in range(4)]
        for raw in fillers:
            answer = refused_for_tables(raw, payload)
            assert "exceeds table_share=" in answer.reason, answer.reason
        share = capacity // 2 // 5
        line = collector.wait_for_log(lambda line: "past what they may take" in line)
        assert f"exceeds table_share={share}" in line and "among 5 processes connected" in line, line
        good.stdin.write("go\n")
        good.stdin.flush()
        assert good.stdout.readline().strip() == "True"
        stats = collector.json("/stats")
        assert stats["connections_tables_refused"] == 4
        assert stats["overwritten_events"] == stats["discarded_events"] == stats["capped_events"] == 0
        assert stats["held_bytes"] >= held
        shown = sorted(e["args"]["i"] for e in events(collector.snapshot(), "i") if e["name"] == "good")
        assert shown == list(range(101_000))
        for raw in fillers:
            raw.close()
        good.stdin.write("done\n")
        good.stdin.flush()
        assert good.wait(timeout=30) == 0
        # Every connection gone: nothing of theirs is counted any more.
        wait_for(
            lambda: collector.json("/stats"),
            until=lambda s: s["connections"] == 0,
            timeout_s=30,
            what="every connection gone",
        )
        stats = collector.json("/stats")
        assert stats["table_bytes"] == stats["buffer_bytes"] == 0, stats
    finally:
        good.kill()
        good.communicate(timeout=30)  # (its pipes closed)
        collector.stop()


#: A client that connects once told to (a line on its standard input), records sys.argv[2] instants, flushes and says
#: whether the flush held.
LATE_CLIENT = (
    "import sys, ringtrace.client\n"
    "sys.stdin.readline()\n"
    "tl = ringtrace.client.connect(sys.argv[1], process_name='late')\n"
    "for i in range(int(sys.argv[2])):\n"
    "    tl.instant('late', i=i)\n"
    "print(tl.flush(timeout_s=30), flush=True)\n"
)


def test_tables_refused_are_given_back_at_once_not_held_while_their_connection_drains() -> None:
    capacity = 32 * MIB  # (tables may take half: less than one filler's, so that each is refused)
    collector = CollectorProcess("--capacity", str(capacity))
    late = subprocess.Popen(
        [sys.executable, "-c", LATE_CLIENT, collector.tcp_address, "100000"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert late.stdin is not None and late.stdout is not None
    try:
        # Four processes refused for their tables, their sockets left open: the collector reads and drops what they
        # still send a while after its GOODBYE. Their tables were all of the room tables may take; given back only
        # once those connections went, a client connecting meanwhile was refused for its first few KiB of tables.
        payload = tables_at_every_limit()
        fillers = [RawClient(collector.tcp_address, hello(pid=1000 + n, instance=f"tables-{n}")) for n in range(4)]
        for raw in fillers:
            refused_for_tables(raw, payload)
        assert collector.json("/stats")["table_bytes"] == 0
        late.stdin.write("go\n")
        late.stdin.flush()
        assert late.stdout.readline().strip() == "True"
        assert collector.json("/stats")["connections_tables_refused"] == 4
        shown = sorted(e["args"]["i"] for e in events(collector.snapshot(), "i") if e["name"] == "late")
        assert shown == list(range(100_000))
        for raw in fillers:
            raw.close()
    finally:
        late.kill()
        late.communicate(timeout=30)  # (its pipes closed)
        collector.stop()


def test_a_read_buffer_grown_for_large_table_frames_is_counted_and_goes_back_once_they_are_read() -> None:
    collector = CollectorProcess("--capacity", str(CAPACITY), "--forget-after", "0.2")
    try:
        payload = tables_at_every_limit(strings_per_frame=40_000)  # STRINGS frames of about 1 MiB
        raw = RawClient(collector.tcp_address, hello(pid=1000, instance="large-frames"))
        raw.send_raw(payload)
        raw.flush()
        # Its read buffer grew to hold those frames (twice one of them) and went back once they were read: the
        # connection holds its READ_SIZE, counted in buffer_bytes.
        stats = collector.json("/stats")
        assert 0 < stats["buffer_bytes"] < 2 * READ_SIZE, stats["buffer_bytes"]
        raw.close()
        wait_for(
            lambda: collector.json("/stats"),
            until=lambda s: s["processes"] == 0,
            timeout_s=30,
            what="its process forgotten",
        )
        stats = collector.json("/stats")
        assert stats["table_bytes"] == stats["buffer_bytes"] == stats["held_bytes"] == 0, stats
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
    assert "capacity 256.0 MiB holds about 8,400,000 events" in said and "room for 1 such" in said, said
    for collector in (small, roomy):  # not a warning: nothing is wrong
        assert not [line for line in collector.lines if " WARNING " in line], collector.lines
