"""What a firing takes and what its incident's record says as it fires: the processes of its scope (each with its
clock offset), and the record's fields (``incident_files.py`` names them; saving completes them)."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any, Final

from ringtrace.collector.incidents.capture import Capture
from ringtrace.collector.incidents.firing import Firing
from ringtrace.collector.incidents.rules import Rule, Scope
from ringtrace.collector.incidents.saving import process_facts
from ringtrace.collector.read.frame_walk import ProcessView
from ringtrace.collector.store.processes import ProcessRecord, Registry

__all__ = ["MAX_TRIGGER_ARGS_BYTES", "crash_firing", "new_record", "pending_trace", "scope_processes"]

#: A record's trigger event keeps its args up to this much JSON (a record is listed, logged and posted to webhooks).
MAX_TRIGGER_ARGS_BYTES: Final = 4096


def scope_processes(registry: Registry, firing: Firing, scope: Scope) -> dict[int, int]:
    """The processes (uid -> clock offset) a firing's scope takes at fire: a ``trace`` takes all, narrowed at save
    to those with a span of the trace in the window (one without a trace: its own process)."""
    by_uid = registry.by_uid
    trigger = by_uid.get(firing.process_uid)
    if scope == "process" or (scope == "trace" and firing.trace_id is None):
        chosen = [trigger] if trigger is not None else []
    elif scope == "host":
        chosen = [p for p in by_uid.values() if trigger is not None and p.host == trigger.host]
    else:
        chosen = list(by_uid.values())
    return {p.uid: p.clock_offset_ns for p in chosen}


def crash_firing(rule: Rule, process: ProcessRecord, disconnect_ns: int) -> Firing:
    """The firing of a crash rule for ``process``, whose connection ended without GOODBYE at ``disconnect_ns``."""
    reason = f"process {process.name} (pid {process.pid}, {process.host}) disconnected without GOODBYE"
    event = {"kind": "crash", "name": process.name, "ts_ns": disconnect_ns, "dur_ns": 0, "args": {}}
    return Firing(rule.name, process.uid, disconnect_ns, disconnect_ns, reason, event)


def new_record(registry: Registry, capture: Capture, firing: Firing, rule: Rule) -> dict[str, Any]:
    """An incident's record as it fires (``incident_files.py`` names its fields); saving completes it."""
    trigger = registry.by_uid.get(firing.process_uid)
    return {
        "id": capture.incident_id,
        "rule": rule.name,
        "status": "pending",
        "reason": firing.reason,
        "time_ns": firing.start_ns,
        "fired_wall_ns": time.time_ns(),
        "scope": rule.scope,
        "trace_id": firing.trace_id,
        "window": capture.window.as_dict(),
        "trigger": {
            "process": process_facts(ProcessView.of(trigger)) if trigger is not None else None,
            "event": _cut(firing.event),
        },
        # (connected: a restart that finds it pending waits for these to connect again: ``left_pending.py``)
        "processes": [
            {**process_facts(ProcessView.of(process)), "connected": process.live_connections > 0}
            for process in (registry.by_uid[uid] for uid in sorted(capture.offsets))
        ],
        "lost": capture.lost,
        "webhook": {"url": rule.url, "status": None, "attempts": 0} if rule.url else None,
    }


def _cut(event: dict[str, Any]) -> dict[str, Any]:
    """The trigger event as the record keeps it: its args left out past ``MAX_TRIGGER_ARGS_BYTES`` (as JSON), saying
    so (the snapshot holds them whole)."""
    args = event.get("args")
    size = len(json.dumps(args, default=str)) if args else 0
    if size <= MAX_TRIGGER_ARGS_BYTES:
        return event
    cut = f"{size} bytes of args, more than {MAX_TRIGGER_ARGS_BYTES}: see the snapshot"
    return {**event, "args": {}, "args_cut": cut}


def pending_trace(
    record: dict[str, Any], owners: Mapping[int, int], by_facts: Mapping[tuple[Any, Any, Any], int]
) -> tuple[str | None, int | None]:
    """A pending record's trace, if its scope is ``trace``, and its trigger's process among ``owners`` (known by
    pid, name and host), which its save keeps even when the trace names none."""
    trace_id = record.get("trace_id")
    if record.get("scope") != "trace" or not isinstance(trace_id, str):
        return None, None
    trigger = (record.get("trigger") or {}).get("process") or {}
    uid = by_facts.get((trigger.get("pid"), trigger.get("name"), trigger.get("host")))
    return trace_id, uid if uid in owners else None
