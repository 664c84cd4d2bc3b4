"""A rule set compiled against one segment's tables: the ``Criteria`` both twins of ``frame_match.py`` read, and which
rules' conditions to judge for each candidate.

Theory of operation
-------------------
``RulePlan`` is the rule set split by the family of events each condition looks at, once per rule set:

- spans (kind ``span``) by name: ``SpanCondition`` (a least duration) and ``OtlpErrorCondition`` (``STATUS_ERROR``);
- calls (``call``, ``call_raised``) by name: ``SpanCondition``;
- async slices (``async_begin``, ``async_end``) by name: ``OtlpErrorCondition``;
- counters by name: ``CounterCondition`` (their thresholds: the first pass gives the values that pass other
  thresholds than the value before, where a crossing can be; a ``*`` glob is matched name by name, each name's
  thresholds its own);
- incidents (kind ``incident``) by name, their reason: ``IncidentCallCondition``;
- messages by kind (a message kind is its category at one priority): ``MessageCondition``.

A family is a name group of ``Criteria``. A ``SegmentCriteria`` follows one segment's tables as its decoder grows
them: the kinds' table is made again when kinds are declared (they are few), and only the strings declared since are
matched against the globs, each text once per rule set (``RulePlan`` remembers what each text matched, for the next
segments, which declare the same names again). A new segment whose tables are its process's previous segment's (each
segment replays them) copies that segment's criteria (``following``) instead of compiling them again. A glob of ``*``
puts its criterion on the kind instead of on every name. A string table reset gives the decoder new tables, and the
segment new criteria.

Built-in kinds are watched by their id only where the segment declares that id with the built-in name, and kinds
with ids past ``MAX_KIND_ID`` (no client numbers them so) are not watched.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import islice
from typing import Final

from ringtrace.collector.export.chrome_frames import column_order
from ringtrace.collector.incidents.frame_match import (
    ANY,
    COUNTER_SLOTS,
    CROSSING,
    KIND_SLOTS,
    NAME_SLOTS,
    NEVER,
    STATE_SLOTS,
    STATUS_ERROR,
    Criteria,
)
from ringtrace.collector.incidents.rule_verdicts import (
    ALWAYS,
    ASK,
    CROSSES,
    ENTRY_SLOTS,
    ERROR,
    KIND_ENTRY_SLOTS,
    LIMIT_SLOTS,
    LONG,
    NAME_ENTRY_SLOTS,
    TEXT,
    RuleTables,
)
from ringtrace.collector.incidents.rules import (
    Condition,
    CounterCondition,
    IncidentCallCondition,
    MessageCondition,
    OtlpErrorCondition,
    Rule,
    RuleSet,
    SpanCondition,
)
from ringtrace.collector.incidents.text_match import add_glob, add_render
from ringtrace.collector.read.selection import Pattern, category_of
from ringtrace.wire.message_format import PRIORITIES
from ringtrace.wire.model import ASYNC_BEGIN, ASYNC_END, CALL, CALL_RAISED, COUNTER, INCIDENT, SPAN
from ringtrace.wire.stream_tables import StreamTables
from ringtrace.wire.table_frames import KindSpec

__all__ = ["MAX_KIND_ID", "RulePlan", "SegmentCriteria", "Watcher"]

#: Kind ids past this are not watched (a table indexed by id would be too large); string ids past ``MAX_NAME_ID``
#: neither.
MAX_KIND_ID: Final = 1 << 16
MAX_NAME_ID: Final = 1 << 22
#: Texts ``RulePlan`` remembers the matches of; past it, it starts again.
MAX_REMEMBERED_TEXTS: Final = 1 << 16

#: The name groups: each family's kinds, by id and built-in name.
SPANS, CALLS, ASYNC, COUNTERS, INCIDENTS = range(5)
_FAMILIES: Final[tuple[tuple[tuple[int, str], ...], ...]] = (
    ((SPAN, "span"),),
    ((CALL, "call"), (CALL_RAISED, "call_raised")),
    ((ASYNC_BEGIN, "async_begin"), (ASYNC_END, "async_end")),
    ((COUNTER, "counter"),),
    ((INCIDENT, "incident"),),
)


@dataclass(frozen=True, slots=True, eq=False)
class Watcher:
    """One rule's condition on one family of events: what it adds to the criteria, and what the name must match.
    Each is made once per rule set, and compared (and hashed, as the keys of tuples of them) by identity: a tuple's
    hash would otherwise hash each rule whole, once per name matched in every process's tables."""

    #: Its rule's place in the rule set: an event's firings come in the rules' order.
    order: int
    rule: Rule
    condition: Condition
    pattern: Pattern
    min_dur: int
    flags: int

    @property
    def any_name(self) -> bool:
        """Whether it takes every name (its criterion is its kind's; a counter's thresholds are per name)."""
        return self.pattern.text == "*" and not isinstance(self.condition, CounterCondition)


class RulePlan:
    """A rule set split by family (see the module docstring); shared by every segment's criteria."""

    def __init__(self, rules: RuleSet) -> None:
        self.rules = rules
        self.families: tuple[list[Watcher], ...] = tuple([] for _ in _FAMILIES)
        #: Per message condition: its watcher (whose pattern is the text's), the last priority level it takes, and
        #: the category's pattern.
        self.messages: list[tuple[Watcher, int, Pattern]] = []
        for order, rule in enumerate(rules.rules):
            self._add(order, rule, rule.condition)
        #: The families whose watchers match names one by one (not all by ``*``).
        self._named = tuple(
            family for family, watchers in enumerate(self.families) if any(not w.any_name for w in watchers)
        )
        #: Per text, what ``named_all`` found; per message kind, ``message_rules``'s watchers. Every segment declares
        #: the same names and kinds again: they are judged once per rule set, not once per segment.
        self._texts: dict[str, tuple[tuple[int, tuple[Watcher, ...], tuple[int, int]], ...]] = {}
        self._message_kinds: dict[KindSpec, tuple[Watcher, ...]] = {}

    def _add(self, order: int, rule: Rule, condition: Condition) -> None:
        match condition:
            case SpanCondition(name, min_duration_ns):
                for family in (SPANS, CALLS):
                    self.families[family].append(Watcher(order, rule, condition, Pattern(name), min_duration_ns, 0))
            case OtlpErrorCondition(name):
                for family in (SPANS, ASYNC):
                    self.families[family].append(Watcher(order, rule, condition, Pattern(name), NEVER, STATUS_ERROR))
            case CounterCondition(name):
                self.families[COUNTERS].append(Watcher(order, rule, condition, Pattern(name), NEVER, CROSSING))
            case IncidentCallCondition(reason):
                self.families[INCIDENTS].append(Watcher(order, rule, condition, Pattern(reason), ANY, 0))
            case MessageCondition():
                watcher = Watcher(order, rule, condition, Pattern(condition.text), ANY, 0)
                level = PRIORITIES.index(condition.min_priority)
                self.messages.append((watcher, level, Pattern(condition.category)))
            case _:  # a crash: the engine sees those, not the stored events
                pass

    @property
    def empty(self) -> bool:
        """Whether no stored event can meet a rule (nothing to read)."""
        return not self.messages and not any(self.families)

    def named_all(self, text: str) -> tuple[tuple[int, tuple[Watcher, ...], tuple[int, int]], ...]:
        """Per family whose globs (other than ``*``) match ``text``: its watchers that do, and their merged
        criterion (``_merged``)."""
        found = self._texts.get(text)
        if found is None:
            if len(self._texts) >= MAX_REMEMBERED_TEXTS:
                self._texts.clear()
            matched = []
            for family in self._named:
                watchers = tuple(w for w in self.families[family] if not w.any_name and w.pattern(text))
                if watchers:
                    matched.append((family, watchers, _merged(watchers)))
            found = self._texts[text] = tuple(matched)
        return found

    def message_rules(self, kind: KindSpec) -> tuple[Watcher, ...]:
        """Watchers of the message conditions a message kind meets (by priority and category)."""
        if kind.shape != "message" or kind.priority not in PRIORITIES:
            return ()
        found = self._message_kinds.get(kind)
        if found is None:
            if len(self._message_kinds) >= MAX_REMEMBERED_TEXTS:
                self._message_kinds.clear()
            level, category = PRIORITIES.index(kind.priority), category_of(kind)
            found = self._message_kinds[kind] = tuple(
                watcher
                for watcher, max_level, category_pattern in self.messages
                if level <= max_level and category_pattern(category)
            )
        return found


class SegmentCriteria:
    """The criteria of one segment's tables (see the module docstring), kept up to date by ``sync``."""

    __slots__ = (
        "_entry_ranges", "_globs", "_kinds_seen", "_strings_seen", "by_kind", "by_name", "columns", "counter_keys",
        "criteria", "group_of", "plan", "rule_tables", "tables",
    )  # fmt: skip

    def __init__(self, plan: RulePlan, tables: StreamTables) -> None:
        self.plan, self.tables = plan, tables
        self.criteria = Criteria(array("q"), tuple(array("q") for _ in _FAMILIES), array("q"), array("d"), array("q"))
        #: Per kind id watched: the watchers of every name (``*`` globs, message conditions), and its name group.
        self.by_kind: dict[int, tuple[Watcher, ...]] = {}
        self.group_of: dict[int, int] = {}
        #: Per name group: the watchers of each string id that some glob matched.
        self.by_name: tuple[dict[int, tuple[Watcher, ...]], ...] = tuple({} for _ in _FAMILIES)
        #: Where kind, name, ts, dur and args are among the segment's columns; None if it declares others.
        self.columns: tuple[int, ...] | None = None
        #: The same watchers by kind and name id for the rules' verdicts (``rule_verdicts.py``); each tuple of
        #: watchers has one range of entries.
        self.rule_tables = RuleTables(array("q"), array("q"), tuple(array("q") for _ in _FAMILIES), array("d"))
        self._entry_ranges: dict[tuple[Watcher, ...], tuple[int, int]] = {}
        #: Per message rule's text glob: where its glob program starts in ``rule_tables.globs`` (-1: Python's).
        self._globs: dict[str, int] = {}
        #: Per counter name matched: its key (``rule_verdicts.py``).
        self.counter_keys: dict[str, int] = {}
        self._kinds_seen = -1
        self._strings_seen = 0

    @classmethod
    def following(cls, previous: SegmentCriteria | None, plan: RulePlan, tables: StreamTables) -> SegmentCriteria:
        """The criteria of a new segment's ``tables``: a copy of ``previous`` (its process's latest segment's, up to
        date) where they declare the same strings, kinds and columns (as a segment replays its process's tables,
        unchanged since the one before), else compiled anew. Copied, not shared: either may grow on its own; the
        counters' state starts afresh, as in new criteria. Where the new segment took its previous one's decoder
        over (``tables`` are ``previous``'s own: that segment's cursor let go of both), ``previous`` itself is taken
        over, its counters' state started afresh: nothing else holds it, and a copy would only cost time."""
        if previous is not None and previous.plan is plan and previous.tables is tables:
            previous.criteria.state = array("q", bytes(len(previous.criteria.state) * previous.criteria.state.itemsize))
            return previous
        if (
            previous is None
            or previous.plan is not plan
            or previous._strings_seen != len(previous.tables.strings)
            or previous._kinds_seen != len(previous.tables.kinds)
            or tables.columns != previous.tables.columns
            or tables.strings != previous.tables.strings
            or tables.kinds != previous.tables.kinds
        ):
            return cls(plan, tables)
        copy = cls(plan, tables)
        old = previous.criteria
        copy.criteria = Criteria(
            old.kinds[:], tuple(names[:] for names in old.names), old.counters[:], old.thresholds[:],
            array("q", bytes(len(old.state) * old.state.itemsize)),
        )  # fmt: skip
        copy.by_kind, copy.group_of = dict(previous.by_kind), dict(previous.group_of)
        copy.by_name = tuple(dict(by_name) for by_name in previous.by_name)
        old_tables = previous.rule_tables
        copy.rule_tables = RuleTables(
            old_tables.entries[:], old_tables.kinds[:], tuple(names[:] for names in old_tables.names),
            old_tables.limits[:], old_tables.globs[:], old_tables.renders[:],
        )  # fmt: skip
        copy._entry_ranges, copy.counter_keys = dict(previous._entry_ranges), dict(previous.counter_keys)
        copy._globs = dict(previous._globs)
        copy.columns, copy._kinds_seen, copy._strings_seen = previous.columns, previous._kinds_seen, len(tables.strings)
        return copy

    def sync(self, tables: StreamTables) -> SegmentCriteria:
        """These criteria, or new ones for new tables, brought up to what ``tables`` declares."""
        if tables is not self.tables:
            return SegmentCriteria(self.plan, tables).sync(tables)
        if len(tables.kinds) != self._kinds_seen:
            self._sync_kinds()
        if len(tables.strings) != self._strings_seen:
            self._sync_strings()
        return self

    def watchers(self, kind: int, name: int) -> Sequence[Watcher]:
        """The watchers to judge a candidate of kind id ``kind`` and name id ``name`` by."""
        group = self.group_of.get(kind)
        named = self.by_name[group].get(name, ()) if group is not None else ()
        every = self.by_kind.get(kind, ())
        return sorted(every + named, key=_in_order) if every and named else every or named

    def _sync_kinds(self) -> None:
        kinds = self.tables.kinds
        self._kinds_seen = len(kinds)
        self.columns = column_order(self.tables)  # (SCHEMA sets both; a later one cannot change the columns)
        self.by_kind.clear()
        self.group_of.clear()
        for family, members in enumerate(_FAMILIES):
            for kind_id, name in members:
                declared = kinds.get(kind_id)
                if declared is not None and declared.name == name and self.plan.families[family]:
                    self.group_of[kind_id] = family
                    self.by_kind[kind_id] = tuple(w for w in self.plan.families[family] if w.any_name)
        if self.plan.messages:
            for kind_id, kind in kinds.items():
                watchers = self.plan.message_rules(kind) if 0 <= kind_id < MAX_KIND_ID else ()
                if watchers:
                    self.by_kind[kind_id] = watchers
        table = array("q", [NEVER, 0, -1]) * (max(self.by_kind, default=-1) + 1)
        for kind_id, watchers in self.by_kind.items():
            at = kind_id * KIND_SLOTS
            table[at : at + KIND_SLOTS] = array("q", (*_merged(watchers), self.group_of.get(kind_id, -1)))
        self.criteria.kinds = table
        kind_entries = array("q", [0, 0, -1, 0, -1]) * (len(table) // KIND_SLOTS)
        renders = self.rule_tables.renders = array("q")
        for kind_id, watchers in self.by_kind.items():
            start, count = self._entries_of(watchers)
            kind = kinds[kind_id]
            texts = kind.shape == "message" and any(_test_of(w.condition) == TEXT for w in watchers)
            render = add_render(renders, kind) if texts else -1
            at = kind_id * KIND_ENTRY_SLOTS
            group = self.group_of.get(kind_id, -1)
            kind_entries[at : at + KIND_ENTRY_SLOTS] = array("q", (start, count, group, kind.shape == "span", render))
        self.rule_tables.kinds = kind_entries

    def _sync_strings(self) -> None:
        """Match the strings declared since the last sync against the globs (tables only grow)."""
        strings = self.tables.strings
        named_all, by_name, names_of = self.plan.named_all, self.by_name, self.criteria.names
        for string_id, text in islice(strings.items(), self._strings_seen, None):
            matched = named_all(text)
            if not matched or not 0 <= string_id < MAX_NAME_ID:
                continue
            at = string_id * NAME_SLOTS
            for family, watchers, (min_dur, flags) in matched:
                by_name[family][string_id] = watchers
                self._name_entries(family, string_id, watchers, text)
                names = names_of[family]
                if len(names) <= at:  # (room up to this id: the ids between pass nothing)
                    names.extend(_NO_NAME * (string_id + 1 - len(names) // NAME_SLOTS))
                names[at], names[at + 1] = min_dur, flags
                if family == COUNTERS:
                    self._add_thresholds(string_id, watchers)
        self._strings_seen = len(strings)

    def _name_entries(self, family: int, string_id: int, watchers: tuple[Watcher, ...], text: str) -> None:
        names = self.rule_tables.names[family]
        at = string_id * NAME_ENTRY_SLOTS
        if len(names) <= at:
            names.extend(array("q", [0, 0, -1]) * (string_id + 1 - len(names) // NAME_ENTRY_SLOTS))
        key = self.counter_keys.setdefault(text, len(self.counter_keys)) if family == COUNTERS else -1
        names[at : at + NAME_ENTRY_SLOTS] = array("q", (*self._entries_of(watchers), key))

    def _entries_of(self, watchers: tuple[Watcher, ...]) -> tuple[int, int]:
        """The range of entries of these watchers (in their order), added once."""
        found = self._entry_ranges.get(watchers)
        if found is None:
            entries = self.rule_tables.entries
            found = self._entry_ranges[watchers] = (len(entries) // ENTRY_SLOTS, len(watchers))
            limits = self.rule_tables.limits
            for watcher in watchers:
                condition = watcher.condition
                if isinstance(condition, CounterCondition):  # (its limits' index in place of a least duration)
                    entries.extend((watcher.order, len(limits) // LIMIT_SLOTS, CROSSES))
                    above, below = condition.above, condition.below
                    limits.extend((float(above is not None), above or 0.0, float(below is not None), below or 0.0))
                elif isinstance(condition, MessageCondition) and _test_of(condition) == TEXT:
                    glob = self._globs.get(condition.text)
                    if glob is None:
                        glob = self._globs[condition.text] = add_glob(self.rule_tables.globs, condition.text)
                    entries.extend((watcher.order, glob, TEXT if glob >= 0 else ASK))
                else:
                    entries.extend((watcher.order, watcher.min_dur, _test_of(condition)))
        return found

    def _add_thresholds(self, string_id: int, watchers: Sequence[Watcher]) -> None:
        """A counter's thresholds (its rules', ``above`` ones then ``below`` ones), and room for its state."""
        criteria = self.criteria
        conditions = [w.condition for w in watchers if isinstance(w.condition, CounterCondition)]
        above = sorted({c.above for c in conditions if c.above is not None})
        below = sorted({c.below for c in conditions if c.below is not None})
        for table, slots in ((criteria.counters, COUNTER_SLOTS), (criteria.state, STATE_SLOTS)):
            if len(table) < (string_id + 1) * slots:
                table.extend(array("q", [0]) * ((string_id + 1) * slots - len(table)))
        at = string_id * COUNTER_SLOTS
        criteria.counters[at : at + COUNTER_SLOTS] = array("q", (len(criteria.thresholds), len(above), len(below)))
        criteria.thresholds.extend(above + below)


#: A name no glob matched: its criterion passes nothing.
_NO_NAME: Final = array("q", [NEVER, 0])


def _test_of(condition: Condition) -> int:
    """How the rules' verdicts test a watcher's condition (``rule_verdicts.py``)."""
    match condition:
        case SpanCondition():
            return LONG
        case OtlpErrorCondition():
            return ERROR
        case IncidentCallCondition():
            return ALWAYS
        case MessageCondition(text="*"):
            return ALWAYS
        case MessageCondition():
            return TEXT
    return ASK


def _in_order(watcher: Watcher) -> int:
    return watcher.order


def _merged(watchers: Sequence[Watcher]) -> tuple[int, int]:
    """One criterion that every event passing any of the watchers' passes."""
    min_dur, flags = NEVER, 0
    for watcher in watchers:
        if watcher.min_dur != NEVER:
            min_dur = min(min_dur, watcher.min_dur)
        flags |= watcher.flags
    return min_dur, flags
