"""What a rule is: a condition on what is stored, the scope and window of what it keeps, and its limits.

Types only: reading rules from a TOML file or a ``--trigger`` flag is ``rule_file.py``'s, matching stored events
against them is ``frame_match.py``'s and ``watch.py``'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

__all__ = [
    "BY_HAND",
    "DEFAULT_AFTER_NS",
    "DEFAULT_BEFORE_NS",
    "DEFAULT_MAX_PER_MINUTE",
    "SCOPES",
    "Condition",
    "CounterCondition",
    "CrashCondition",
    "IncidentCallCondition",
    "MessageCondition",
    "OtlpErrorCondition",
    "Rule",
    "RuleSet",
    "Scope",
    "SpanCondition",
]

Scope = Literal["process", "host", "trace", "fleet"]
SCOPES: Final[tuple[Scope, ...]] = ("process", "host", "trace", "fleet")
DEFAULT_BEFORE_NS: Final = 30 * 10**9
DEFAULT_AFTER_NS: Final = 5 * 10**9
DEFAULT_MAX_PER_MINUTE: Final = 6
#: The rule an incident taken by hand (``POST /incidents``) is listed under: no rule of a file may take it.
BY_HAND: Final = "by hand"


@dataclass(frozen=True, slots=True)
class SpanCondition:
    """A complete span (kinds ``span``, ``call``, ``call_raised``) whose name matches ``name`` (a glob) lasting at
    least ``min_duration_ns``."""

    name: str = "*"
    min_duration_ns: int = 0


@dataclass(frozen=True, slots=True)
class MessageCondition:
    """A message (a client's, or an OTLP log record) at or above ``min_priority`` (one of ``PRIORITIES``; ``error``
    takes ``fatal`` too), whose category (its kind's name) matches ``category`` and rendered text matches ``text``
    (globs)."""

    min_priority: str = "error"
    category: str = "*"
    text: str = "*"


@dataclass(frozen=True, slots=True)
class OtlpErrorCondition:
    """An OTLP span with error status, its name matching ``name`` (a glob)."""

    name: str = "*"


@dataclass(frozen=True, slots=True)
class CounterCondition:
    """A counter whose name matches ``name`` (a glob) at a value above ``above`` or below ``below`` (at least one is
    given). It fires when the value crosses the threshold (the previous value of that counter did not pass it)."""

    name: str
    above: float | None = None
    below: float | None = None


@dataclass(frozen=True, slots=True)
class CrashCondition:
    """A process whose connection ended without GOODBYE (it crashed, or was killed)."""


@dataclass(frozen=True, slots=True)
class IncidentCallCondition:
    """An explicit ``tl.incident(reason, **args)`` from a program (or ``POST /incidents``), ``reason`` matching
    ``reason`` (a glob)."""

    reason: str = "*"


Condition = (
    SpanCondition | MessageCondition | OtlpErrorCondition | CounterCondition | CrashCondition | IncidentCallCondition
)


@dataclass(frozen=True, slots=True)
class Rule:
    """One ``[[rule]]``: when ``condition`` holds of a stored event, keep ``before_ns`` before it and ``after_ns`` after
    it (from its start and its end) of every process of ``scope``, at most ``max_per_minute`` times a minute (the rest
    counted suppressed), and tell ``url`` (a webhook), if given."""

    name: str
    condition: Condition
    scope: Scope = "process"
    before_ns: int = DEFAULT_BEFORE_NS
    after_ns: int = DEFAULT_AFTER_NS
    max_per_minute: int = DEFAULT_MAX_PER_MINUTE
    url: str | None = None
    #: Where it was declared, for messages: ``file:line``, or ``--trigger``.
    origin: str = ""


@dataclass(frozen=True, slots=True)
class RuleSet:
    """The rules in force (names unique), and where they came from."""

    rules: tuple[Rule, ...] = ()
    source: str = ""

    def by_name(self, name: str) -> Rule | None:
        for rule in self.rules:
            if rule.name == name:
                return rule
        return None
