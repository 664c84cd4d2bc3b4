"""An incident a previous run fired but did not save (the collector was killed while its ``after`` ran), taken up at
start from what the data dir recovered.

Its window's processes are known by pid, name and host (a restarted collector gives them uids of its own, and a
client that reconnects may get another). Its window is pinned at once, so that the ring cannot overwrite what was
recovered; if the window is still running, what its processes store until it ends (the ``after`` part, sent once
they reconnect) is kept too, and the incident is written then, after a flush round trip, as a capture's is. A window
that ended is written at once. Runs on the event loop; the file writing on a worker thread.
"""

from __future__ import annotations

import asyncio
import contextlib
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

__all__ = ["MAX_RESUMED_WAIT_S", "Unsettled", "ready_wall_ns", "settle_left_pending"]

#: A window is at most an hour on either side of its event: a resumed incident waits no longer than this for its end,
#: whatever its record says.
MAX_RESUMED_WAIT_S: Final = 3600.0 + 1.0


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
) -> dict[str, Any]:
    """Write the incident of ``record`` (pending, left by a previous run) when its window ends, from what its
    processes stored of it; returns the record as written (``collector_stopped``: true).

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
    try:
        ready_ns = ready_wall_ns(record, registry, time.time_ns())
        if ready_ns is not None:
            with contextlib.suppress(TimeoutError):  # (a stopping collector writes what it holds now)
                await asyncio.wait_for(stopping.wait(), (ready_ns - time.time_ns()) / 1e9)
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
    record = {**record, "collector_stopped": True}  # (saved after a restart: lost says what is known of it)
    by_facts = {(p.pid, p.name, p.host): uid for uid, p in registry.by_uid.items() if uid in capture.offsets}
    trace_id, trigger_owner = pending_trace(record, capture.offsets, by_facts)
    keep = WindowSave(
        capture.window.since_ns, capture.window.until_ns, frozenset(capture.offsets), trace_id, trigger_owner
    )
    return await read_pinned(view.frames, lambda: save_window(files, view, record, keep))
