"""The second pass: whether a candidate (a stored event the first pass found, ``frame_match.py``) meets each rule it
may meet, judged on its args, and the ``Firing`` of each rule it does meet, its reason said in a line.

A counter's condition holds when its value crosses the threshold: the last value of each counter (per process, track
and counter name) is kept, and a value past the threshold fires only if the one before was not past it (or there
was none before: the first value the watch sees of a counter already past it fires once). At most
``MAX_COUNTERS`` counters are remembered; past that the one updated longest ago is forgotten.

A rule begins at most ``max_per_minute`` incidents in any minute, and the firings of one step reach the engine at
one instant: past that many in a step (``new_step``), a rule's firings are not made, only counted (``surplus``, which
the engine counts suppressed, as it would have them). One whose event's times the engine would refuse is made
(the engine says why) and takes no place among them, as it takes no slot of the rule's minute. The places left
(``room``) and the firings counted (``surplus_counts``) are arrays by rule's place, which the rules' verdicts
(``rule_verdicts.py``) write too for the rules they decide: a firing they made reaches ``firings`` as made.

Trace ids come from the event's own args (``trace_id``: ringtrace's spans of a trace, OTLP spans and their events, OTLP
log records carry one). A message or an instant nested in a span of a trace but without a ``trace_id`` of its own
has none here: finding its enclosing span would take every span of its track, which the watch does not keep.
"""

from __future__ import annotations

from array import array
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any, Final

from ringtrace.collector.incidents.admission import refusal_of
from ringtrace.collector.incidents.criteria import Watcher
from ringtrace.collector.incidents.firing import Firing
from ringtrace.collector.incidents.rules import (
    CounterCondition,
    IncidentCallCondition,
    MessageCondition,
    OtlpErrorCondition,
    Rule,
    SpanCondition,
)
from ringtrace.collector.read.frame_walk import ProcessView
from ringtrace.collector.read.selection import category_of
from ringtrace.wire.call_records import call_args, is_call
from ringtrace.wire.message_format import render
from ringtrace.wire.stream_tables import StreamTables, typed_args
from ringtrace.wire.table_frames import KindSpec

__all__ = ["MAX_COUNTERS", "Judge", "StoredEvent"]

MAX_COUNTERS: Final = 1 << 16
#: Characters of a message's text a reason quotes.
_REASON_TEXT: Final = 200
_HEX: Final = frozenset("0123456789abcdef")
_MAX_DEPTH: Final = 32


@dataclass(slots=True)
class StoredEvent:
    """A candidate as the judge sees it (``args`` as stored: a map, a list of a message's values, a stack id ...)."""

    process: ProcessView
    tables: StreamTables
    track_id: int
    track: str
    kind: KindSpec
    name: str
    wall_ns: int
    dur_ns: int
    args: Any


class Judge:
    """Judges candidates for the rules they may meet; keeps each counter's last value (see the module docstring)."""

    def __init__(self) -> None:
        self._counters: dict[tuple[int, int, str], float] = {}
        #: The same counters' keys by process (uid) and (track id, name).
        self._of_process: dict[int, dict[tuple[int, str], None]] = {}
        #: Per rule's place in the step's rules: firings it may still make this step, and those past its
        #: ``max_per_minute`` counted, not made, this step; per rule's name, those counted since taken.
        self._rules: tuple[Rule, ...] = ()
        self.room = array("q")
        self.surplus_counts = array("q")
        self.surplus: dict[str, int] = {}
        self.now_ns = 0

    def new_step(self, now_ns: int, rules: Sequence[Rule]) -> None:
        """A step of ``rules`` (a watcher's ``order`` is its rule's place among them) begins at ``now_ns``
        (wall-clock): each rule may make ``max_per_minute`` firings again."""
        self.fold_surplus()
        self._rules = tuple(rules)
        self.room = array("q", [rule.max_per_minute for rule in rules])
        self.surplus_counts = array("q", bytes(8 * len(rules)))
        self.now_ns = now_ns

    def fold_surplus(self) -> None:
        """Add the firings counted this step to ``surplus`` (by rule's name)."""
        counts = self.surplus_counts
        for place, count in enumerate(counts):
            if count:
                name = self._rules[place].name
                self.surplus[name] = self.surplus.get(name, 0) + count
                counts[place] = 0

    def _room(self, watcher: Watcher, event: StoredEvent) -> bool:
        """Whether the watcher's rule makes this firing (else it is counted in ``surplus_counts``)."""
        if refusal_of(event.wall_ns, event.wall_ns + event.dur_ns, self.now_ns) is not None:
            return True
        place = watcher.order
        if self.room[place] <= 0:
            self.surplus_counts[place] += 1
            return False
        self.room[place] -= 1
        return True

    def firings(
        self, watchers: Sequence[Watcher], event: StoredEvent, made: Collection[int] = (), *, remember: bool = True
    ) -> list[Firing]:
        """A ``Firing`` per watcher whose rule ``event`` meets; those whose ``order`` is in ``made`` were judged
        already, and made (by the rules' verdicts). A counter's value is remembered unless ``remember`` is false
        (the rules' verdicts logged it, for the caller to remember)."""
        fired: list[Firing] = []
        value = _counter_value(event.args)
        key = (event.process.uid, event.track_id, event.name)
        before = self._counters.get(key)
        shown: tuple[str, Any] | None = None
        for watcher in watchers:
            reason = self._reason(watcher, event, value, before)
            if reason is None:
                continue
            message = isinstance(watcher.condition, MessageCondition)
            if shown is None and message:
                shown = _shown(event)
            decided = watcher.order in made
            if not decided and message and not watcher.pattern(shown[0]):  # type: ignore[index]
                continue
            if not decided and not self._room(watcher, event):
                continue
            if shown is None:
                shown = _shown(event)
            if message:
                reason = f"{reason}: {shown[0][:_REASON_TEXT]}"
            fired.append(_firing(watcher, event, reason, shown))
        if remember and value is not None and any(isinstance(w.condition, CounterCondition) for w in watchers):
            self.remember(key, value)
        return fired

    def remember(self, key: tuple[int, int, str], value: float) -> None:
        """A counter's last value (its process's uid, track id and name): to the end of the order, the one updated
        longest ago forgotten past ``MAX_COUNTERS``."""
        counters = self._counters
        counters.pop(key, None)
        if len(counters) >= MAX_COUNTERS:
            oldest = next(iter(counters))
            del counters[oldest]
            of_process = self._of_process[oldest[0]]
            del of_process[oldest[1:]]
            if not of_process:
                del self._of_process[oldest[0]]
        counters[key] = value
        self._of_process.setdefault(key[0], {})[key[1:]] = None

    def room_for_counters(self) -> int:
        """Counters that can be remembered before one is forgotten."""
        return MAX_COUNTERS - len(self._counters)

    def known(self, uid: int, keys: dict[str, int]) -> tuple[array[int], array[float]]:
        """The last values of a process's counters named in ``keys`` (a name's key): (track, key) pairs, and the
        values (``rule_verdicts.py``)."""
        pairs, values, counters = array("q"), array("d"), self._counters
        for track, name in self._of_process.get(uid, {}):
            key = keys.get(name)
            if key is not None:
                pairs.extend((track, key))
                values.append(counters[uid, track, name])
        return pairs, values

    def _reason(self, watcher: Watcher, event: StoredEvent, value: float | None, before: float | None) -> str | None:
        """Why ``event`` meets the watcher's condition; None if it does not (a message's text is judged after)."""
        condition, name, dur = watcher.condition, event.name, event.dur_ns
        match condition:
            case SpanCondition(_, min_ns):
                if event.kind.shape == "span" and dur >= min_ns:
                    return f"{event.kind.name} {name!r} lasted {_duration(dur)} (>= {_duration(min_ns, exact=True)})"
            case OtlpErrorCondition():
                args = event.args
                if type(args) is dict and args.get("status") == "error":
                    message = args.get("status_message")
                    said = f": {str(message)[:_REASON_TEXT]}" if message else ""
                    return f"span {name!r} ended with error status{said}"
            case CounterCondition(_, above, below):
                if value is None:
                    return None
                if above is not None and value > above and not (before is not None and before > above):
                    return f"counter {name!r} rose to {value:g} (> {above:g})"
                if below is not None and value < below and not (before is not None and before < below):
                    return f"counter {name!r} fell to {value:g} (< {below:g})"
            case IncidentCallCondition():
                return f"the program reported incident {name!r}"
            case MessageCondition():
                return f"{event.kind.priority} message {category_of(event.kind)!r}"
        return None


def _counter_value(args: Any) -> float | None:
    value = args.get("value") if type(args) is dict else None
    return float(value) if isinstance(value, int | float) and type(value) is not bool else None


def _duration(ns: int, *, exact: bool = False) -> str:
    """A duration as a reason says it: in ms from 1 ms up ("250.1 ms"), else in us or ns; a threshold as given."""
    for unit, size in (("ms", 10**6), ("us", 10**3)):
        if ns >= size:
            return f"{ns / size:g} {unit}" if exact else f"{ns / size:.1f} {unit}"
    return f"{ns} ns"


def _shown(event: StoredEvent) -> tuple[str, Any]:
    """The event's name and args as a snapshot shows them: a message rendered, a typed event's fields by name, a
    traced call's file and line."""
    kind, args = event.kind, event.args
    if kind.shape == "message" and type(args) is list:
        return render(kind, args)
    if kind.fields and type(args) is list:
        return event.name, typed_args(kind, args, event.tables.kinds)
    if is_call(kind):
        return event.name, call_args(event.tables.stacks.innermost(args))
    return event.name, args


def _firing(watcher: Watcher, event: StoredEvent, reason: str, shown: tuple[str, Any]) -> Firing:
    name, args = shown
    trace_id = args.get("trace_id") if type(args) is dict else None
    if not (type(trace_id) is str and len(trace_id) == 32 and _HEX.issuperset(trace_id)):
        trace_id = None
    fields = {
        "kind": event.kind.name,
        "name": name,
        "track": event.track,
        "ts_ns": event.wall_ns,
        "dur_ns": event.dur_ns,
        "args": _plain(args, 0),
    }
    end_ns = event.wall_ns + event.dur_ns
    return Firing(watcher.rule.name, event.process.uid, event.wall_ns, end_ns, reason, fields, trace_id)


def _plain(value: Any, depth: int) -> Any:
    """``value`` as JSON can hold it: bytes as hex, map keys as text, anything else unknown as its text."""
    if value is None or type(value) in (str, int, float, bool):
        return value
    if depth >= _MAX_DEPTH:
        return "<nested too deep>"
    if isinstance(value, dict):
        return {str(key): _plain(item, depth + 1) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item, depth + 1) for item in value]
    if isinstance(value, bytes):
        return value.hex()
    return str(value)
