"""An incident a previous run fired but did not save (the collector was killed while its ``after`` ran), taken up at
start from what the data dir recovered.

Its window's processes are known by pid, name and host (a restarted collector gives them uids of its own, and a
client that reconnects may get another). Its window is pinned at once, so that the ring cannot overwrite what was
recovered; if the window is still running, what its processes store until it ends (the ``after`` part, sent once
they reconnect) is kept too. Once the window has ended, the processes that were connected when it fired are given
``RECONNECT_WAIT_S`` to connect again (what a client held unsent while the collector was down is part of the window),
then the incident is written after a flush round trip, as a capture's is; those that did not come back are counted
in its ``lost`` (``processes_not_back``), never left out in silence. In a fleet a process may reconnect to another
collector: there it is written at once. Runs on the event loop; the file writing on a worker thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any, Final

from ringtrace.collector.incidents.capture import Capture, CaptureHold, CapturePins, Window
from ringtrace.collector.incidents.engine_needs import Viewer
from ringtrace.collector.incidents.firing_record import pending_trace
from ringtrace.collector.incidents.incident_store import IncidentStore
from ringtrace.collector.incidents.saving import WindowSave, save_window
from ringtrace.collector.store.pinned_read import read_pinned
from ringtrace.collector.store.processes import Registry
from ringtrace.collector.store.views import StoreSnapshot

__all__ = [
    "MAX_RESUMED_WAIT_S",
    "RECONNECT_WAIT_S",
    "Unsettled",
    "ready_wall_ns",
    "resume_wall_ns",
    "settle_left_pending",
]

log = logging.getLogger("ringtrace.collector")

#: A window is at most an hour on either side of its event: a resumed incident waits no longer than this for its end,
#: whatever its record says.
MAX_RESUMED_WAIT_S: Final = 3600.0 + 1.0
#: How long a resumed incident whose window has ended waits for the processes connected when it fired to connect
#: again: a client tries at most ``backoff_max_s`` (1 s by default) apart, so this is a few of its tries.
RECONNECT_WAIT_S: Final = 5.0
#: How often the processes that have connected again are looked at meanwhile.
_RECONNECT_POLL_S: Final = 0.05


class Unsettled(Exception):
    """Why a pending incident could not be saved (its record says it as its ``failure``)."""


def ready_wall_ns(record: dict[str, Any], registry: Registry, now_ns: int) -> int | None:
    """When a pending incident left by a previous run is to be written (its window's end, wall-clock ns), if that is
    still to come and the store recovered any of its processes; None: at once (with nothing recovered, its
    ``before`` is gone, and it fails)."""
    until_ns = (record.get("window") or {}).get("until_ns")
    if not isinstance(until_ns, int) or until_ns <= now_ns or not _owners(registry, record):
        return None
    return min(until_ns, now_ns + int(MAX_RESUMED_WAIT_S * 1e9))


def resume_wall_ns(record: dict[str, Any], registry: Registry, now_ns: int) -> int | None:
    """When a collector on its own takes up a pending incident left by a previous run: its window's end
    (``ready_wall_ns``), or now if that is past (it is written once its processes connect again, within
    ``RECONNECT_WAIT_S``); None: at once (the store recovered none of its processes: it fails)."""
    if not _owners(registry, record):
        return None
    ready_ns = ready_wall_ns(record, registry, now_ns)
    return now_ns if ready_ns is None else ready_ns


def _owners(registry: Registry, record: dict[str, Any]) -> dict[int, int]:
    """The processes (uid -> clock offset) of the record's window: every uid of each of its pid, name and host."""
    facts = {(p.get("pid"), p.get("name"), p.get("host")) for p in record.get("processes") or []}
    return {uid: p.clock_offset_ns for uid, p in registry.by_uid.items() if (p.pid, p.name, p.host) in facts}


async def settle_left_pending(
    record: dict[str, Any],
    *,
    pins: CapturePins,
    registry: Registry,
    viewer: Viewer,
    files: IncidentStore,
    stopping: asyncio.Event,
    flush_timeout_s: float,
    alone: bool = True,
    reconnect_wait_s: float = RECONNECT_WAIT_S,
) -> dict[str, Any]:
    """Write the incident of ``record`` (pending, left by a previous run) when its window ends, from what its
    processes stored of it; returns the record as written (``collector_stopped``: true). ``alone``: a collector on
    its own, where its processes connected when it fired have ``reconnect_wait_s`` to connect again once it has ended
    (a fleet's are not waited for, nor counted: they may connect to another collector).

    Raises:
        Unsettled: nothing of its window was kept.
        OSError: it could not be written.
    """
    window = record.get("window") or {}
    if "since_ns" not in window or "until_ns" not in window:
        raise Unsettled("the collector stopped before it was saved, and kept nothing of its window")
    capture = Capture(record["id"], Window(window["since_ns"], window["until_ns"]), _owners(registry, record))
    pins.begin(capture)  # (what was recovered is held from now on; a process known later is taken at the end)
    flushed = (0, 0)
    not_back: list[dict[str, Any]] = []
    try:
        ready_ns = ready_wall_ns(record, registry, time.time_ns())
        if ready_ns is not None:
            with contextlib.suppress(TimeoutError):  # (a stopping collector writes what it holds now)
                await asyncio.wait_for(stopping.wait(), (ready_ns - time.time_ns()) / 1e9)
        if alone and capture.offsets:
            not_back = await _await_reconnects(record, registry, stopping, reconnect_wait_s)
        if ready_ns is not None or alone:
            capture.offsets.update(_owners(registry, record))  # (a process that reconnected under a new uid)
            flushed = await viewer.flush_clients(flush_timeout_s, set(capture.offsets))
        segments = pins.end(capture)
    except BaseException:
        pins.release(capture)
        raise
    if not capture.offsets or not segments:
        pins.release(capture)
        kept = "kept nothing" if not capture.offsets else "recovered nothing"
        raise Unsettled(f"the collector stopped before it was saved, and {kept} of its window")
    view = viewer.view_of(StoreSnapshot(CaptureHold(pins, capture), segments, None), *flushed)
    lost = {**record.get("lost", {})}  # (saved after a restart: lost says what is known of it)
    for cause, count in capture.lost.items():  # (what the budget could not keep since the restart)
        lost[cause] = lost.get(cause, 0) + count
    record = {**record, "collector_stopped": True, "lost": lost}
    if alone:
        lost["processes_not_back"] = len(not_back)
        record["not_back"] = not_back
        if not_back:
            names = ", ".join(f"{p['name']} (pid {p['pid']})" for p in not_back)
            log.warning("incident %s: %s did not connect again within %.0f s once its window had ended (after the "
                        "restart): what they held unsent is missing from it", record["id"], names,
                        reconnect_wait_s)  # fmt: skip
    by_facts = {(p.pid, p.name, p.host): uid for uid, p in registry.by_uid.items() if uid in capture.offsets}
    trace_id, trigger_owner = pending_trace(record, capture.offsets, by_facts)
    keep = WindowSave(
        capture.window.since_ns, capture.window.until_ns, frozenset(capture.offsets), trace_id, trigger_owner
    )
    return await read_pinned(view.frames, lambda: save_window(files, view, record, keep))


def _connected_when_fired(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The record's processes that were connected when it fired (a record written before it said so: all)."""
    return [p for p in record.get("processes") or [] if p.get("connected", True)]


def _not_back(registry: Registry, record: dict[str, Any]) -> list[dict[str, Any]]:
    """The record's processes connected when it fired that are not connected now (known by pid, name and host)."""
    connected = {(p.pid, p.name, p.host) for p in registry.by_uid.values() if p.live_connections}
    return [
        {"pid": p.get("pid"), "name": p.get("name"), "host": p.get("host")}
        for p in _connected_when_fired(record)
        if (p.get("pid"), p.get("name"), p.get("host")) not in connected
    ]


async def _await_reconnects(
    record: dict[str, Any], registry: Registry, stopping: asyncio.Event, wait_s: float
) -> list[dict[str, Any]]:
    """Wait until every process of the record connected when it fired is connected again, ``wait_s`` at most (or
    until the collector stops); returns those that are not."""
    deadline = time.monotonic() + wait_s
    while (missing := _not_back(registry, record)) and not stopping.is_set():
        left_s = deadline - time.monotonic()
        if left_s <= 0:
            break
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stopping.wait(), min(_RECONNECT_POLL_S, left_s))
    return missing
