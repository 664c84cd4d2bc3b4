"""The incidents' loop for the service: rules watched on what is stored, each firing held to its rule's limit, its
window captured and written whole, every outcome counted.

Theory of operation
-------------------
With rules that watch stored events, a task steps the watch (``watch.py``) on a worker thread, paced by
``watch_pacing.py``, the stored segments it reads pinned meanwhile (as a live tail's step is). A crash (a connection
ended without the GOODBYE its HELLO promised, and no reconnect within ``CRASH_GRACE_S``: ``crashed``) and ``POST
/incidents`` (``fire_by_hand``) make firings of their own. A firing within its rule's ``max_per_minute`` (a sliding
minute) and the bound on captures under way (``max_captures``) becomes an incident: its window pinned at once
(``capture.py``), its pending record written, and, once ``after`` has run and the connected clients have flushed, its
snapshot file and record written on a worker thread (``saving.py``); then its pins go, a line is logged and its rule's
webhook is told. A firing past either bound is counted suppressed (per rule; ``busy`` counts the captures bound's
share), as is one whose event's times cannot be right (``admission.py``: ``refused``), and one the watch did not make,
past its rule's limit within a step (``take_surplus``); a capture waits for ``after`` from its firing at most,
whatever its event's times say. Without rules there is no task and no store hook: the collector pays nothing.

Everything here runs on the event loop but the watch's steps and the file writing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any, Final

from ringtrace.collector.incidents.admission import AFTER_SLACK_S, Admission
from ringtrace.collector.incidents.capture import Capture, CaptureHold, CapturePins, Window
from ringtrace.collector.incidents.counts import IncidentCounts
from ringtrace.collector.incidents.engine_needs import Viewer, Watch
from ringtrace.collector.incidents.firing import Firing
from ringtrace.collector.incidents.firing_record import crash_firing, new_record, scope_processes
from ringtrace.collector.incidents.incident_store import IncidentStore
from ringtrace.collector.incidents.left_pending import Unsettled, resume_wall_ns, settle_left_pending
from ringtrace.collector.incidents.rules import BY_HAND, CrashCondition, IncidentCallCondition, Rule, RuleSet, Scope
from ringtrace.collector.incidents.saving import WindowSave, save_window
from ringtrace.collector.incidents.tellings import Tellings
from ringtrace.collector.incidents.watch_hold import WatchHold, step_pinned, stored_now
from ringtrace.collector.incidents.watch_pacing import WATCH_INTERVAL_S, WatchPacing
from ringtrace.collector.read.frame_walk import SnapshotView
from ringtrace.collector.read.selection import EventFilter
from ringtrace.collector.store.pinned_read import read_pinned
from ringtrace.collector.store.processes import ProcessRecord, Registry
from ringtrace.collector.store.ring import Store
from ringtrace.collector.store.views import StoreSnapshot
from ringtrace.wire.errors import ConfigError

if TYPE_CHECKING:
    from ringtrace.collector.incidents.webhook import WebhookOutcome  # (aiohttp: loaded with the first webhook)

__all__ = [
    "BY_HAND",
    "CRASH_GRACE_S",
    "MAX_CAPTURES",
    "CapturesBusy",
    "IncidentEngine",
    "Viewer",
    "Watch",
]

log = logging.getLogger("ringtrace.collector")

#: Captures under way at once, at most: each pins its window's segments (within ``--incident-capacity``).
MAX_CAPTURES: Final = 8
#: How long a capture waits for the connected clients to flush, at most, once ``after`` has run (an incident is
#: listed within a second of it; the record says how many answered).
FLUSH_TIMEOUT_S: Final = 0.25
#: How long a process whose connection ended without GOODBYE has to reconnect before its crash rules fire: a client
#: recovering from an error reconnects within its first backoff (0.1 s), and a network blip is as short.
CRASH_GRACE_S: Final = 1.0
#: How long a stopping collector gives the captures under way to write what they hold.
STOP_SAVE_TIMEOUT_S: Final = 5.0


class CapturesBusy(ConfigError):
    """``max_captures`` incidents are being captured: a new one must wait."""


async def _window_view(
    pins: CapturePins,
    viewer: Viewer,
    by_uid: Mapping[int, ProcessRecord],
    read_window: Callable[[tuple[int, int], EventFilter], Awaitable[SnapshotView]] | None,
    capture: Capture,
    flushed: tuple[int, int],
) -> tuple[SnapshotView, frozenset[int]]:
    """The capture's window as a snapshot, and its processes' uids there: the segments it pinned; or, with
    ``--jetstream``, what the stream holds of its processes (the local ring holds only what waits to be published:
    the stream is the fleet's ring, and is read, not pinned)."""
    if read_window is None:
        frames = StoreSnapshot(CaptureHold(pins, capture), pins.end(capture), None)
        return viewer.view_of(frames, *flushed), frozenset(capture.offsets)
    facts = {(p.pid, p.name, p.host) for uid, p in by_uid.items() if uid in capture.offsets}
    pins.release(capture)
    window = capture.window
    view = await read_window(flushed, EventFilter(since_ns=window.since_ns, until_ns=window.until_ns))
    seen = frozenset(uid for uid, p in view.processes.items() if (p.pid, p.name, p.host) in facts)
    return view, seen


def _clock_offset(registry: Registry, uid: int) -> int | None:
    """The clock offset of the process ``uid`` now (None if it is not known)."""
    process = registry.by_uid.get(uid)
    return None if process is None else process.clock_offset_ns


def watches(rules: RuleSet) -> bool:
    """Whether any rule is met by stored events (not only by crashes): the watch runs only then."""
    return any(not isinstance(rule.condition, CrashCondition) for rule in rules.rules)


class IncidentEngine:
    """Rules to incidents; see the module docstring.

    Args:
        store, registry, viewer: what is stored, the known processes, and pinned views over them.
        files: the saved incidents (a directory, or with ``--jetstream`` the fleet's object store).
        rules: the rules in force at start.
        capacity_bytes: ``--incident-capacity``: what segments kept for incidents may take beside the ring.
        make_watch: a watch over a rule set (None: stored events fire nothing).
        load_rules: reads the rules again (``reload``; None: nothing to reload).
        notify: tells a rule's webhook of an incident's record; returns what happened (written into the record).
        counts: where fired, saved, suppressed and failed are counted (the service's, which ``/metrics`` reads).
        read_window: with ``--jetstream``, reads a window from the stream (after a flush round trip), instead of
            the segments pinned in the local ring, which are published and leave.
        max_captures: captures under way at once, at most (past it, firings are suppressed: ``busy``).
    """

    def __init__(
        self,
        store: Store,
        registry: Registry,
        viewer: Viewer,
        files: IncidentStore,
        rules: RuleSet,
        capacity_bytes: int,
        *,
        make_watch: Callable[[RuleSet], Watch] | None = None,
        load_rules: Callable[[], RuleSet] | None = None,
        notify: Callable[[str, dict[str, Any]], Awaitable[WebhookOutcome]] | None = None,
        counts: IncidentCounts | None = None,
        read_window: Callable[[tuple[int, int], EventFilter], Awaitable[SnapshotView]] | None = None,
        max_captures: int = MAX_CAPTURES,
    ) -> None:
        self._store, self._registry, self._viewer = store, registry, viewer
        self.files = files
        self.rules = rules
        self.capacity_bytes = capacity_bytes
        self._make_watch, self._load_rules = make_watch, load_rules
        self._read_window = read_window
        self.max_captures = max_captures
        self.counts = counts if counts is not None else IncidentCounts()
        self.admission = Admission(self.counts, max_captures)
        self._pins: CapturePins | None = None
        self._hold: WatchHold | None = None
        self._watch: Watch | None = None
        self._watch_task: asyncio.Task[None] | None = None
        self._reloaded: RuleSet | None = None  # rules read again, for the watch to take between two steps
        self._captures: set[asyncio.Task[None]] = set()
        self._tellings = Tellings(files, notify)
        #: The records of the incidents being captured (``pending``), by id, each with ``ready_wall_ns``.
        self.under_way: dict[str, dict[str, Any]] = {}
        #: Set when the collector stops: captures under way write what they hold now.
        self._stopping = asyncio.Event()

    # -- start, stop, reload -----------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Settle the incidents a previous run left pending, then watch the rules (if any watch stored events)."""
        try:
            left = await asyncio.to_thread(self.files.pending)
        except OSError as exc:  # (the object store does not answer: its pending incidents wait for another start)
            log.warning("incidents: the pending incidents of %s cannot be read: %s", self.files.where, exc)
            left = []
        for record in left:  # (a window still running is written when it ends, its `after` part kept)
            ready_ns = resume_wall_ns(record, self._registry, time.time_ns()) if self._read_window is None else None
            if ready_ns is None:
                await self._settle_pending(record)
            else:
                self._track(record["id"], ready_ns, record, self._settle_pending(record))
        self._follow(self.rules)

    async def stop(self) -> None:
        """Stop watching; captures under way write what they hold (for ``STOP_SAVE_TIMEOUT_S`` at most)."""
        self._stopping.set()
        if self._watch_task is not None:
            self._watch_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch_task
            self._watch_task = None
        if self._captures:
            await asyncio.wait(set(self._captures), timeout=STOP_SAVE_TIMEOUT_S)
        for task in list(self._captures):
            task.cancel()
        tellings = self._tellings.cancel()
        if self._captures or tellings:  # (a cancelled save lets go of its pins once its worker ends, not here)
            await asyncio.wait(self._captures | tellings)
        if self._pins is not None:
            self._pins.close()
            self._pins = None
        if self._hold is not None:
            self._hold.close()

    async def reload(self) -> None:
        """Read the rule file again (SIGHUP): a file with an error keeps the rules in force, and the log says its
        line and why."""
        if self._load_rules is None or self._stopping.is_set():
            log.info("incidents: SIGHUP: %s", "no --rules file to read again" if self._load_rules else "stopping")
            return
        try:
            rules = await asyncio.to_thread(self._load_rules)
        except (ConfigError, OSError) as exc:
            log.error("incidents: rules not reloaded, the %d in force are kept: %s", len(self.rules.rules), exc)
            return
        self.rules = rules
        self.admission.limit.keep_only({rule.name for rule in rules.rules})
        if self._watch_task is not None and watches(rules):  # (a step may be running: taken between two)
            self._reloaded = rules
        else:
            self._follow(rules)
        log.info("incidents: %d rules in force (%s)", len(rules.rules), rules.source or "no file")

    def _follow(self, rules: RuleSet) -> None:
        """Watch ``rules`` (keeping the watch's place in what is stored), or stop watching if none needs it."""
        if watches(rules) and self._make_watch is not None:
            self._ensure_pins()  # (with the watch's hold, its begin pins nothing: it reads nothing)
            if self._watch is None:  # (what is stored already is not its to judge; all stored from now on is)
                self._watch = self._make_watch(rules)
                frames, now, kept = stored_now(self._registry, self._store, self._hold)
                with frames:
                    self._watch.begin(now, kept)
            else:
                self._watch = self._watch.with_rules(rules)
            if self._watch_task is None:
                self._watch_task = asyncio.create_task(self._watch_loop(), name="incidents watch")
        elif self._watch_task is not None:
            self._watch_task.cancel()
            self._watch_task, self._watch = None, None
        if rules.rules:
            self._ensure_pins()  # (crash rules: what the ring overwrote before a crash is counted)

    def _ensure_pins(self) -> CapturePins:
        if self._pins is None:
            offset_of, read_back = partial(_clock_offset, self._registry), self._read_window is not None
            self._pins = CapturePins(self._store, self.capacity_bytes, offset_of, published_read_back=read_back)
            # (segments overwritten or acknowledged stay until the watch read them, within the incidents' capacity)
            self._hold = WatchHold(self._store, self.capacity_bytes, self._pins.evicted, lambda: self._watch)
        return self._pins

    # -- firings ------------------------------------------------------------------------------------------------------

    async def _watch_loop(self) -> None:
        pacing = WatchPacing()
        pause_s = WATCH_INTERVAL_S
        while True:
            due = time.monotonic() + pause_s
            await asyncio.sleep(pause_s)
            late_s = time.monotonic() - due
            if self._reloaded is not None:
                self._follow(self._reloaded)
                self._reloaded = None
            spent: list[float] = []
            try:
                firings = await self._watch_step(spent)
            except Exception:  # the watch must go on: one bad step is logged
                log.exception("incidents: the rules' watch failed a step")
                continue
            # By the step's own time, not its waits for a worker and for a busy loop to take it back (``step_pinned``;
            # they stretched a loaded collector's pauses 20-fold, to seconds, and its rules fired that late).
            pause_s = pacing.pause_after(sum(spent), self._watch is not None and self._watch.behind, late_s)
            for firing in firings:
                rule = self.rules.by_name(firing.rule)
                if rule is None:
                    continue
                try:
                    self.fire(firing, rule)
                except Exception:  # (nor one firing: counted failed)
                    self.counts.add(self.counts.failed, firing.rule)
                    log.exception("incidents: rule %r fired, but its incident could not begin", firing.rule)

    async def _watch_step(self, spent: list[float]) -> list[Firing]:
        """One step of the watch on a worker thread, the stored segments it reads pinned meanwhile (the wall time it
        took appended to ``spent``)."""
        watch = self._watch
        if watch is None:
            return []
        firings = await step_pinned(watch, self._registry, self._store, self._hold, spent)
        self.counts.add_all(self.counts.suppressed, watch.take_surplus())  # (past max_per_minute in the step)
        return firings

    def crashed(self, process: ProcessRecord) -> None:
        """A connection of ``process`` ended without the GOODBYE its HELLO promised: the crash rules fire, at the
        time of the disconnect, unless the process reconnects within ``CRASH_GRACE_S``."""
        if any(isinstance(rule.condition, CrashCondition) for rule in self.rules.rules):
            when = (time.time_ns(), process.disconnected_at)
            asyncio.get_running_loop().call_later(CRASH_GRACE_S, self._crash_settled, process, *when)

    def _crash_settled(self, process: ProcessRecord, disconnect_ns: int, disconnected_at: float) -> None:
        """A crash's grace ran out: it fires unless ``process`` connected since (a later disconnect has its own)."""
        if self._stopping.is_set() or process.live_connections or process.disconnected_at != disconnected_at:
            return  # (it reconnected: not a crash)
        for rule in self.rules.rules:
            if isinstance(rule.condition, CrashCondition):
                self.fire(crash_firing(rule, process, disconnect_ns), rule)

    async def fire_by_hand(
        self,
        reason: str,
        *,
        scope: Scope,
        before_ns: int,
        after_ns: int,
        selected: EventFilter | None,
        args: dict[str, Any],
        processes: list[ProcessRecord] | None = None,
    ) -> str:
        """``POST /incidents``: an incident now, of ``scope`` around the processes ``processes`` (those ``selected``
        chose; the first is its trigger's), whatever the rules say. Returns its id.

        Raises:
            ConfigError: no process to take, or no trace for a ``trace`` scope.
            CapturesBusy: ``max_captures`` are under way.
        """
        if self._stopping.is_set():
            raise CapturesBusy("the collector is stopping: it begins no incident")
        chosen = processes if processes is not None else list(self._registry.by_uid.values())
        if not chosen:
            raise ConfigError("no known process is selected: an incident needs one")
        trace_id = selected.trace_id if selected is not None else None
        if scope == "trace" and trace_id is None:
            raise ConfigError("scope 'trace' needs a trace_id")
        now = time.time_ns()
        event = {"kind": "by_hand", "name": reason, "ts_ns": now, "dur_ns": 0, "args": args}
        firing = Firing(BY_HAND, chosen[0].uid, now, now, reason, event, trace_id)
        rule = Rule(BY_HAND, IncidentCallCondition(), scope, before_ns, after_ns, max_per_minute=2**31, origin="POST")
        owners = {p.uid for p in chosen} if selected is not None and scope == "process" else None
        incident_id = self.fire(firing, rule, owners=owners)
        if incident_id is None:
            raise CapturesBusy(f"{self.max_captures} incidents are being captured (max_captures): try again soon")
        return incident_id

    def fire(self, firing: Firing, rule: Rule, *, owners: set[int] | None = None) -> str | None:
        """Begin the incident of ``firing`` under ``rule``, within its limits; its id, or None if suppressed."""
        counts = self.counts
        if self._stopping.is_set() or not self.admission.admit(firing, rule, len(self._captures)):
            return None
        counts.add(counts.fired, rule.name)
        capture, record = self._begin(firing, rule, owners)
        ready_ns = min(capture.window.until_ns, record["fired_wall_ns"] + rule.after_ns + int(AFTER_SLACK_S * 1e9))
        collect = self._collect(capture, record, rule, firing, time.monotonic(), ready_ns)
        self._track(capture.incident_id, ready_ns, record, collect)
        return capture.incident_id

    def _track(
        self, incident_id: str, ready_ns: int, record: dict[str, Any], collect: Coroutine[Any, Any, None]
    ) -> None:
        """Run ``collect``, the capture of ``incident_id``, listed as pending (``under_way``) until it ends."""
        task = asyncio.create_task(collect, name=f"incident {incident_id}")
        self.under_way[incident_id] = {**record, "status": "pending", "ready_wall_ns": ready_ns}
        self._captures.add(task)
        task.add_done_callback(self._captures.discard)
        task.add_done_callback(lambda _: self.under_way.pop(incident_id, None))

    def _begin(self, firing: Firing, rule: Rule, owners: set[int] | None) -> tuple[Capture, dict[str, Any]]:
        registry = self._registry
        offsets = scope_processes(registry, firing, rule.scope)
        if owners is not None:
            offsets = {uid: p.clock_offset_ns for uid, p in registry.by_uid.items() if uid in owners}
        # (+1: the window is half-open, and with after = 0 the event that fired ends it: it is in its own incident)
        window = Window(firing.start_ns - rule.before_ns, firing.end_ns + rule.after_ns + 1)
        capture = Capture(self.files.new_id(rule.name, firing.start_ns), window, offsets)
        self._ensure_pins().begin(capture)
        return capture, new_record(registry, capture, firing, rule)

    # -- capture, save, tell ------------------------------------------------------------------------------------------

    async def _collect(
        self, capture: Capture, record: dict[str, Any], rule: Rule, firing: Firing, fired_s: float, ready_ns: int
    ) -> None:
        """Wait for ``after`` to run (from ``fired_s``, monotonic, at most: an event's time may lie), then write the
        incident whole; count and log what became of it. Its pending record says when it should be ready
        (``ready_ns``), for the fleet's other collectors to say it."""
        pins = self._ensure_pins()
        try:
            await asyncio.to_thread(self.files.begin, {**record, "ready_wall_ns": ready_ns})
            delay_s = min(
                (capture.window.until_ns - time.time_ns()) / 1e9,
                fired_s + rule.after_ns / 1e9 + AFTER_SLACK_S - time.monotonic(),
            )
            if delay_s > 0:
                with contextlib.suppress(TimeoutError):  # (a stopping collector writes what it holds now)
                    await asyncio.wait_for(self._stopping.wait(), delay_s)
            ran_out = time.monotonic()
            # (A trace's processes are known once its spans are stored: every client flushes for it.)
            owners = None if rule.scope == "trace" else set(capture.offsets)
            flushed = await self._viewer.flush_clients(FLUSH_TIMEOUT_S, owners)
            flush_s = time.monotonic() - ran_out
            by_uid, read_window = self._registry.by_uid, self._read_window
            view, owners_seen = await _window_view(pins, self._viewer, by_uid, read_window, capture, flushed)
            keep = WindowSave(
                capture.window.since_ns, capture.window.until_ns, owners_seen,
                firing.trace_id if rule.scope == "trace" else None,
                firing.process_uid if self._read_window is None else None,
                capture.overwritten_by_owner, capture.over_budget_by_owner,
            )  # fmt: skip
            flush_facts = {"acknowledged": flushed[0], "asked": flushed[1]}
            record = {**record, "lost": dict(capture.lost), "clients_flushed": flush_facts}
            written = await read_pinned(view.frames, lambda: save_window(self.files, view, record, keep))
        except Exception as exc:
            pins.release(capture)
            await self._failed(record, f"{type(exc).__name__}: {exc}")
            if not isinstance(exc, OSError):
                log.exception("incidents: %s failed", record["id"])
            return
        self.under_way.pop(written["id"], None)  # (listed saved from now: as counted)
        self.counts.add(self.counts.saved, rule.name)
        log.info(
            "incident %s: rule %r, %s; processes %s; %d events, %d bytes; lost %s; written %.2f s after its window "
            "(clients' flush %.2f s)", written["id"], rule.name, firing.reason,
            ", ".join(f"{p['name']} (pid {p['pid']})" for p in written["processes"]) or "none",
            written["events"], written["bytes"], written["lost"], time.monotonic() - ran_out, flush_s,
        )  # fmt: skip
        self._tellings.tell(written)

    async def _failed(self, record: dict[str, Any], reason: str) -> None:
        """Write the failed record, then count it: an incident counted failed is listed so, never still pending."""
        log.warning("incident %s (rule %r) failed: %s", record["id"], record["rule"], reason)
        with contextlib.suppress(OSError):
            await asyncio.to_thread(self.files.fail, record, reason)
        self.under_way.pop(record["id"], None)
        self.counts.add(self.counts.failed, record["rule"])

    async def _settle_pending(self, record: dict[str, Any]) -> None:
        """An incident a previous run fired but did not write (killed meanwhile): written when its window ends from
        what the store recovered of it (a data dir) and its processes stored since (``left_pending.py``), else
        failed, saying why."""
        rule = str(record.get("rule", ""))
        record = {key: value for key, value in record.items() if key != "ready_wall_ns"}  # (a pending one's only)
        try:
            written = await settle_left_pending(
                record, pins=self._ensure_pins(), registry=self._registry, viewer=self._viewer, files=self.files,
                stopping=self._stopping, flush_timeout_s=FLUSH_TIMEOUT_S, alone=self._read_window is None,
            )  # fmt: skip
        except (Unsettled, OSError) as exc:
            await self._failed(record, str(exc) if isinstance(exc, Unsettled) else f"{type(exc).__name__}: {exc}")
            return
        except Exception:  # (one bad record must not keep the collector from starting)
            self.counts.add(self.counts.failed, rule)
            log.exception("incidents: the pending incident %s could not be settled", record.get("id"))
            return
        self.under_way.pop(written["id"], None)
        self.counts.add(self.counts.saved, rule)
        log.info("incident %s (rule %r) saved after a restart from the recovered store: %d events; lost %s",
                 written["id"], rule, written["events"], written["lost"])  # fmt: skip
        self._tellings.tell(written)

    # -- what /stats shows ---------------------------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """Beside the totals the service reports (``counts``): the rules, the captures and their memory, per rule."""
        return _stats(self, len(self._captures), self._pins, self._watch)


def _stats(engine: IncidentEngine, captures: int, pins: CapturePins | None, watch: Watch | None) -> dict[str, Any]:
    hold = engine._hold
    return {
        "rules": len(engine.rules.rules),
        "captures": captures,
        "busy": engine.admission.busy,
        "refused": engine.admission.refused,
        "incident_capacity_bytes": engine.capacity_bytes,
        "incident_held_bytes": pins.held_bytes if pins is not None else 0,
        "incident_held_peak_bytes": pins.peak_bytes if pins is not None else 0,
        "unread_events": watch.unread_events if watch is not None else 0,
        "watch_held_bytes": hold.held_bytes if hold is not None else 0,
        "watch_hold_dropped_events": hold.dropped_events if hold is not None else 0,
        "by_rule": {name: dict(getattr(engine.counts, name)) for name in ("fired", "saved", "suppressed", "failed")},
    }
