"""One rule from its keys, as a rule file's ``[[rule]]`` table or a ``--trigger`` flag gives them: the keys each
condition takes, every value checked against what it may be, an error naming the key and what it takes.

Where a key was written (a file's line, the flag) is ``rule_file.py``'s to say: errors here carry the key.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Final, Literal, TypeVar
from urllib.parse import urlsplit

from ringtrace.collector.incidents.rules import (
    BY_HAND,
    DEFAULT_AFTER_NS,
    DEFAULT_BEFORE_NS,
    DEFAULT_MAX_PER_MINUTE,
    SCOPES,
    Condition,
    CounterCondition,
    CrashCondition,
    IncidentCallCondition,
    MessageCondition,
    OtlpErrorCondition,
    Rule,
    SpanCondition,
)
from ringtrace.collector.read.selection import unclosed_set
from ringtrace.wire.errors import ConfigError, OutOfRange
from ringtrace.wire.message_format import PRIORITIES
from ringtrace.wire.parsing import format_duration_ns, parse_duration_ns

__all__ = [
    "COMMON_KEYS",
    "CONDITION_KEYS",
    "KNOWN_KEYS",
    "MAX_MAX_PER_MINUTE",
    "MAX_NAME_CHARS",
    "MAX_TEXT_CHARS",
    "MAX_WINDOW_NS",
    "RuleKeyError",
    "build_rule",
]

#: Each condition by the key that declares it, with the keys that go with it (the first is the declaring one).
CONDITION_KEYS: Final[Mapping[str, tuple[str, ...]]] = {
    "span": ("span", "min_duration"),
    "message": ("message", "min_priority", "text"),
    "otlp_error": ("otlp_error", "span"),
    "counter": ("counter", "above", "below"),
    "crash": ("crash",),
    "incident_call": ("incident_call", "reason"),
}
#: The keys every rule takes, whatever its condition.
COMMON_KEYS: Final = ("name", "scope", "before", "after", "max_per_minute", "url")
KNOWN_KEYS: Final = tuple(dict.fromkeys((*COMMON_KEYS, *(k for keys in CONDITION_KEYS.values() for k in keys))))

#: The longest min_duration, before and after: an hour (a ring holds minutes; an incident is a window around a moment).
MAX_WINDOW_NS: Final = 3600 * 10**9
MAX_MAX_PER_MINUTE: Final = 60_000
MAX_NAME_CHARS: Final = 200
#: The longest glob or URL (a rule is read by people; a longer value is a mistake, not a pattern).
MAX_TEXT_CHARS: Final = 2048

Kind = Literal["text", "flag", "number", "count", "duration"]
#: What each key's value is; a ``--trigger``'s values are text, read as this kind.
_KINDS: Final[Mapping[str, Kind]] = {
    "min_duration": "duration",
    "before": "duration",
    "after": "duration",
    "otlp_error": "flag",
    "crash": "flag",
    "incident_call": "flag",
    "above": "number",
    "below": "number",
    "max_per_minute": "count",
}
_Choice = TypeVar("_Choice", bound=str)
_UNITS: Final = "ns, us, ms, s, m, h"
_BARE_NUMBER: Final = re.compile(r"\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*")
_CONTROL: Final = re.compile(r"[\x00-\x1f\x7f]")


class RuleKeyError(ConfigError):
    """A rule's key (``key``; None for the rule as a whole) has a value that cannot work; the message says why."""

    def __init__(self, key: str | None, reason: str) -> None:
        super().__init__(reason)
        self.key = key
        self.reason = reason


def build_rule(table: Mapping[str, object], *, origin: str, from_text: bool = False) -> Rule:
    """The rule ``table`` declares (a ``[[rule]]`` table's keys and values; a ``--trigger``'s if ``from_text``, every
    value a string read as its key takes it: ``true``/``false``, numbers).

    Raises:
        RuleKeyError: an unknown key, a value out of its bounds or of the wrong type, no condition or two; names the
            key.
    """
    values = {key: _from_text(key, value) if from_text else value for key, value in table.items()}
    for key in values:
        if key not in KNOWN_KEYS:
            raise RuleKeyError(key, f"unknown key {_shown(key)} (known: {', '.join(KNOWN_KEYS)})")
    if "name" not in values:
        raise RuleKeyError(None, "name is required (a rule's name, unique among the rules)")
    name = _name(values["name"])
    condition = _condition(values)
    scope = _choice(values, "scope", SCOPES, "process")
    if scope == "trace" and isinstance(condition, CrashCondition | CounterCondition):
        what = "a crash" if isinstance(condition, CrashCondition) else "a counter"
        raise RuleKeyError(
            "scope", f'scope "trace" does not go with {what}, which has no trace: process, host or fleet'
        )
    before_ns = _duration(values, "before", DEFAULT_BEFORE_NS)
    after_ns = _duration(values, "after", DEFAULT_AFTER_NS)
    if before_ns + after_ns == 0:
        raise RuleKeyError("after", "before and after are both 0: an incident keeps a window of some length")
    return Rule(
        name=name,
        condition=condition,
        scope=scope,
        before_ns=before_ns,
        after_ns=after_ns,
        max_per_minute=_per_minute(values.get("max_per_minute", DEFAULT_MAX_PER_MINUTE)),
        url=_url(values["url"]) if "url" in values else None,
        origin=origin,
    )


def _condition(values: Mapping[str, object]) -> Condition:
    # ``span`` is a condition of its own, and the name glob of an ``otlp_error`` one.
    declared = [key for key in CONDITION_KEYS if key in values and not (key == "span" and "otlp_error" in values)]
    if not declared:
        strays = [key for key in values if key not in COMMON_KEYS]
        hint = f"; {_owners(strays[0])}" if strays else ""
        raise RuleKeyError(None, f"no condition: a rule has one of {', '.join(CONDITION_KEYS)}{hint}")
    if len(declared) > 1:
        raise RuleKeyError(
            declared[1], f"conditions {' and '.join(declared)} in one rule: a rule has one (write a rule for each)"
        )
    kind = declared[0]
    for key in values:
        if key not in COMMON_KEYS and key not in CONDITION_KEYS[kind]:
            takes = ", ".join(CONDITION_KEYS[kind][1:]) or "no other key"
            raise RuleKeyError(key, f"{_owners(key)}, not with {kind} (which takes {takes})")
    if kind == "span":
        return SpanCondition(_glob(values, "span"), _duration(values, "min_duration", 0))
    if kind == "message":
        return MessageCondition(
            _choice(values, "min_priority", PRIORITIES, "error"), _glob(values, "message"), _glob(values, "text")
        )
    if kind == "counter":
        above, below = _number(values, "above"), _number(values, "below")
        if above is None and below is None:
            raise RuleKeyError("counter", "counter needs above or below (or both): the value it fires at")
        return CounterCondition(_glob(values, "counter"), above, below)
    flag = values[kind]
    if flag is not True:
        raise RuleKeyError(kind, f"{kind} takes true (leave it out otherwise), got {_shown(flag)}")
    if kind == "otlp_error":
        return OtlpErrorCondition(_glob(values, "span"))
    if kind == "incident_call":
        return IncidentCallCondition(_glob(values, "reason"))
    return CrashCondition()


def _owners(key: str) -> str:
    owners = [kind for kind, keys in CONDITION_KEYS.items() if key in keys[1:]]
    return f"{key} goes with {' or '.join(owners)}" if owners else f"{key} is a condition of its own"


def _from_text(key: str, text: object) -> object:
    """A ``--trigger`` value (text) as its key takes it; text a kind cannot read is left as it is, to be refused."""
    kind = _KINDS.get(key, "text")
    if not isinstance(text, str) or kind in ("text", "duration"):
        return text
    if kind == "flag":
        return {"true": True, "false": False}.get(text, text)
    try:
        return int(text) if kind == "count" or text.isdigit() else float(text)
    except ValueError:
        return text


def _name(value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise RuleKeyError("name", f"name must be a non-empty string, got {_shown(value)}")
    if value.strip() == BY_HAND:
        raise RuleKeyError("name", f"name {BY_HAND!r} is taken: incidents made by POST /incidents are listed under it")
    if len(value) > MAX_NAME_CHARS or _CONTROL.search(value):
        raise RuleKeyError(
            "name", f"name must be at most {MAX_NAME_CHARS} characters without control characters, got {_shown(value)}"
        )
    return value


def _glob(values: Mapping[str, object], key: str) -> str:
    value = values.get(key, "*")
    if not isinstance(value, str) or not value or len(value) > MAX_TEXT_CHARS:
        raise RuleKeyError(
            key,
            f'{key} takes a glob (a non-empty string of at most {MAX_TEXT_CHARS} characters, like "checkout*"), '
            f"got {_shown(value)}",
        )
    unclosed = unclosed_set(value)
    if unclosed is not None:  # fnmatch would take it as the character itself: most likely a typo
        raise RuleKeyError(
            key,
            f"{key} {_shown(value)} has a [ at character {unclosed + 1} that no ] closes (a glob's [ ] is a set of "
            "characters; [[] is the character [ itself)",
        )
    return value


def _choice(values: Mapping[str, object], key: str, choices: tuple[_Choice, ...], default: _Choice) -> _Choice:
    value = values.get(key, default)
    if value not in choices:
        raise RuleKeyError(key, f"{key} is one of {', '.join(choices)}, got {_shown(value)}")
    return choices[choices.index(value)]


def _duration(values: Mapping[str, object], key: str, default_ns: int) -> int:
    if key not in values:
        return default_ns
    value = values[key]
    if (isinstance(value, int | float) and not isinstance(value, bool)) or (
        isinstance(value, str) and _BARE_NUMBER.fullmatch(value)
    ):
        example = f"{str(value).strip()}ms" if key == "min_duration" else f"{str(value).strip()}s"
        raise RuleKeyError(key, f'{key} {_shown(value)} has no unit ({_UNITS}), like "{example}"')
    if not isinstance(value, str):
        raise RuleKeyError(key, f'{key} takes a duration, a string like "200ms" or "1.5s", got {_shown(value)}')
    try:
        ns = parse_duration_ns(value)
    except OutOfRange:
        if value.strip().startswith("-"):
            raise RuleKeyError(key, f"{key} must not be negative, got {_shown(value)}") from None
        ns = MAX_WINDOW_NS + 1  # (past 64 bits of ns: past the hour too, said as such below)
    except ConfigError:
        raise RuleKeyError(
            key, f'{key} {_shown(value)} is not a duration: a number and a unit ({_UNITS}), like "200ms" or "1.5s"'
        ) from None
    if ns > MAX_WINDOW_NS:
        raise RuleKeyError(key, f"{key} is at most {format_duration_ns(MAX_WINDOW_NS)}, got {_shown(value)}")
    return ns


def _number(values: Mapping[str, object], key: str) -> float | None:
    value = values.get(key)
    if value is None:
        return None
    try:
        number = float(value) if isinstance(value, int | float) and not isinstance(value, bool) else math.nan
    except OverflowError:  # an integer past a float's range
        number = math.inf
    if not math.isfinite(number):
        raise RuleKeyError(key, f"{key} takes a finite number, got {_shown(value)}")
    return number


def _per_minute(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_MAX_PER_MINUTE:
        raise RuleKeyError(
            "max_per_minute", f"max_per_minute takes a whole number from 1 to {MAX_MAX_PER_MINUTE}, got {_shown(value)}"
        )
    return value


def _url(value: object) -> str:
    form = "url takes an http:// or https:// URL with a host (a webhook)"
    if not isinstance(value, str) or len(value) > MAX_TEXT_CHARS or re.search(r"[\s\x00-\x1f\x7f]", value):
        raise RuleKeyError("url", f"{form} of at most {MAX_TEXT_CHARS} characters, no spaces, got {_shown(value)}")
    try:
        parts = urlsplit(value)
        usable = parts.scheme in ("http", "https") and bool(parts.hostname) and (parts.port or 1) > 0
    except ValueError:  # a port out of range, a bracketed host that is no IPv6 address
        usable = False
    if not usable:
        raise RuleKeyError("url", f"{form}, got {_shown(value)}")
    return value


def _shown(value: object) -> str:
    """A value as a rule file writes it (strings quoted, ``true``), cut short."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value[:80] + ("..." if len(value) > 80 else ""), ensure_ascii=False)
    return f"{type(value).__name__} {str(value)[:80]}" if isinstance(value, list | dict) else str(value)[:80]
