"""What a selection takes, level by level: processes, what starts in a span of time (a frame, an index entry),
a frame by its track, then events, with a limit's cutoff and its ties."""

from __future__ import annotations

from ringtrace.collector.read.selection import EVERYTHING, EventFilter, Pattern, Selection, unclosed_set
from ringtrace.wire.frames import Events
from ringtrace.wire.model import FIRST_SAMPLER_TRACK_ID, SAMPLER_TRACK_SUFFIX


class _Process:
    def __init__(self, pid: int, name: str, host: str = "h") -> None:
        self.pid = self.trace_pid = pid
        self.name, self.host = name, host


def test_everything_takes_every_process_time_and_event() -> None:
    selection = Selection(EVERYTHING)
    assert selection.selects_process(_Process(1, "web"))
    assert not selection.by_time and selection.in_time(0, 2**63 - 1)
    assert selection.event(None, "anything", 0)


def test_processes_are_taken_by_pid_name_and_host() -> None:
    selection = Selection(EventFilter(pids=frozenset({7}), process=Pattern("web-*")))
    assert selection.selects_process(_Process(7, "web-1"))
    assert not selection.selects_process(_Process(8, "web-1"))
    assert not selection.selects_process(_Process(7, "db"))


def test_what_starts_in_the_window_or_overlaps_it_may_hold_events_of_it() -> None:
    selection = Selection(EventFilter(since_ns=100, until_ns=200))
    assert selection.by_time
    assert selection.in_time(50, 100) and selection.in_time(199, 300)
    assert not selection.in_time(0, 99) and not selection.in_time(200, 300)
    assert selection.event(None, "e", 100) and not selection.event(None, "e", 200)


def test_a_limits_cutoff_leaves_out_older_frames_and_takes_its_ties_first_arrived() -> None:
    selection = Selection(EVERYTHING, cutoff=(100, 2))
    assert selection.by_time
    assert not selection.in_time(0, 99) and selection.in_time(0, 100)
    assert not selection.event(None, "e", 99)
    assert [selection.event(None, "e", 100) for _ in range(3)] == [True, True, False]
    assert selection.event(None, "e", 101)


def test_a_thread_s_name_selects_its_sampler_track_too_and_only_a_sampler_s() -> None:
    frame = Events(1, 1, 100, 100, b"")
    by_thread = Selection(EventFilter(track=Pattern("MainThread")))
    assert by_thread.frame((1, 5), "MainThread", 100, 100, frame)
    assert by_thread.frame((1, FIRST_SAMPLER_TRACK_ID), "MainThread" + SAMPLER_TRACK_SUFFIX, 100, 100, frame)
    # A track of the program's own that happens to end the same way is matched by its whole name only.
    assert not by_thread.frame((1, 6), "MainThread" + SAMPLER_TRACK_SUFFIX, 100, 100, frame)
    assert not by_thread.frame((1, FIRST_SAMPLER_TRACK_ID), "worker" + SAMPLER_TRACK_SUFFIX, 100, 100, frame)
    assert EventFilter(track=Pattern("MainThread")).track_matches(
        "MainThread" + SAMPLER_TRACK_SUFFIX, FIRST_SAMPLER_TRACK_ID + 3
    )
    assert Selection(EventFilter(track=Pattern("*samples"))).frame((1, 6), "x samples", 100, 100, frame)


def test_unclosed_set_finds_a_glob_s_first_bracket_that_nothing_closes_as_fnmatch_reads_sets() -> None:
    assert unclosed_set("abc") is None and unclosed_set("a[bc]d") is None
    assert unclosed_set("a[bc") == 1 and unclosed_set("a[b]c[") == 5
    # A ] right after [ or [! is in the set, not its end; [[] is the character [ itself.
    assert unclosed_set("[]]") is None and unclosed_set("[!]]") is None and unclosed_set("[[]") is None
    assert unclosed_set("[]") == 0 and unclosed_set("x[!]") == 1
