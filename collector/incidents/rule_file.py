"""The rules in force, from a TOML rule file (``--rules``) and one-line ``--trigger`` flags, every error naming where
(``file:line``, or the flag) and why.

A file holds ``[[rule]]`` tables (``docs/incidents.md`` lists the keys); the keys and their checks are
``rule_keys.py``'s, shared by both forms. ``tomllib`` gives no positions, so a key's line is found in the text: the
n-th ``[[rule]]`` header, then the ``key =`` line in its block (the header's line if that is not found).
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from ringtrace.collector.incidents.rule_keys import RuleKeyError, build_rule
from ringtrace.collector.incidents.rules import Rule, RuleSet
from ringtrace.wire.errors import ConfigError

__all__ = [
    "MAX_RULES",
    "MAX_RULE_FILE_BYTES",
    "TRIGGER_ORIGIN",
    "RuleFileError",
    "load_rules",
    "parse_rules",
    "parse_trigger",
]

#: A rule file is at most this large, and holds at most this many rules (each is checked against every stored frame).
MAX_RULE_FILE_BYTES: Final = 1 << 20
MAX_RULES: Final = 1000
#: Where a ``--trigger``'s rule comes from (its ``origin``).
TRIGGER_ORIGIN: Final = "--trigger"

_TRIGGER_FORM: Final = (
    'takes "NAME: key=value, key=value, ...", like "slow checkout: span=checkout*, min_duration=200ms"'
)
_RULE_HEADER: Final = re.compile(r"\s*\[\[\s*(rule|\"rule\"|'rule')\s*\]\]\s*(#.*)?")
_ANY_HEADER: Final = re.compile(r"\s*\[")
_TOML_POSITION: Final = re.compile(r"\(at line (\d+), column \d+\)")


class RuleFileError(ConfigError):
    """A rule file or ``--trigger`` that cannot be used: the message names ``file:line`` (or the flag) and the
    reason; the rules in force, if any, stay as they were."""


def load_rules(path: Path | None, triggers: Sequence[str] = ()) -> RuleSet:
    """The rules of the file at ``path`` (if any) and of each ``--trigger`` spec, their names unique among them all.

    Raises:
        RuleFileError: the file cannot be read or holds an error; a trigger is not one; a name is used twice.
    """
    rules: list[Rule] = []
    if path is not None:
        rules.extend(parse_rules(_read(path), str(path)).rules)
    for spec in triggers:
        rule = parse_trigger(spec)
        for earlier in rules:
            if earlier.name == rule.name:
                raise RuleFileError(
                    f"{TRIGGER_ORIGIN} {_quoted(spec)}: rule name {_quoted(rule.name)} is already used at "
                    f"{earlier.origin} (names are unique)"
                )
        rules.append(rule)
    if len(rules) > MAX_RULES:
        raise RuleFileError(f"{TRIGGER_ORIGIN}: at most {MAX_RULES} rules in all, got {len(rules)}")
    source = str(path) if path is not None else TRIGGER_ORIGIN if triggers else ""
    return RuleSet(tuple(rules), source)


def parse_rules(text: str, source: str) -> RuleSet:
    """The rules of a rule file's ``text``; ``source`` names the file in errors and in each rule's ``origin``.

    Raises:
        RuleFileError: not TOML (tomllib's reason, line and column), not ``[[rule]]`` tables, or a rule with an error
            (``source:line: rule "name": reason``).
    """
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        position = _TOML_POSITION.search(str(exc))
        line = int(position.group(1)) if position else max(1, len(text.splitlines()))
        raise RuleFileError(f"{source}:{line}: not valid TOML: {exc}") from None
    lines = _Lines(text)
    for key in document:
        if key != "rule":
            raise RuleFileError(
                f"{source}:{lines.top_level(key)}: unknown key {_quoted(key)} (a rule file holds [[rule]] tables)"
            )
    tables = document.get("rule", [])
    if not isinstance(tables, list) or not all(isinstance(table, dict) for table in tables):
        raise RuleFileError(
            f"{source}:{lines.top_level('rule')}: each rule is a table headed [[rule]] (two brackets), one per rule"
        )
    if len(tables) > MAX_RULES:
        raise RuleFileError(f"{source}: at most {MAX_RULES} rules in a file, got {len(tables)}")
    lines.expect(len(tables))
    rules: list[Rule] = []
    for index, table in enumerate(tables):
        rule = _rule(table, index, source, lines)
        for earlier in rules:
            if earlier.name == rule.name:
                raise RuleFileError(
                    f"{source}:{lines.key(index, 'name')}: rule name {_quoted(rule.name)} is already used at "
                    f"{earlier.origin} (names are unique)"
                )
        rules.append(rule)
    return RuleSet(tuple(rules), source)


def parse_trigger(spec: str) -> Rule:
    """The rule a ``--trigger`` flag declares: ``"NAME: key=value, key=value"``, the keys of a ``[[rule]]`` table
    with their values unquoted (``true``/``false``, numbers, durations like ``200ms``, globs); a value cannot hold a
    comma, nor the name a colon.

    Raises:
        RuleFileError: not of that form, or the rule has an error (naming the flag, the key and the reason).
    """
    name, colon, rest = spec.partition(":")
    if not colon or not name.strip() or "=" in name or "," in name:
        raise RuleFileError(f"{TRIGGER_ORIGIN} {_TRIGGER_FORM}, got {_quoted(spec)}")
    table: dict[str, object] = {"name": name.strip()}
    for item in rest.split(","):
        if not item.strip():
            continue
        key, equals, value = (part.strip() for part in item.partition("="))
        if not equals or not key:
            raise RuleFileError(f"{TRIGGER_ORIGIN} {_quoted(spec)}: {_quoted(item.strip())} is not key=value")
        if key in table:
            what = "the name comes before the colon" if key == "name" else "a key is given once"
            raise RuleFileError(f"{TRIGGER_ORIGIN} {_quoted(spec)}: {key} is given twice ({what})")
        # Quotes a shell or a habit from the file left around a value are not part of it.
        table[key] = value[1:-1] if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'" else value
    try:
        return build_rule(table, origin=TRIGGER_ORIGIN, from_text=True)
    except RuleKeyError as exc:
        raise RuleFileError(f"{TRIGGER_ORIGIN} {_quoted(spec)}: {exc.reason}") from None


def _rule(table: dict[str, Any], index: int, source: str, lines: _Lines) -> Rule:
    try:
        return build_rule(table, origin=f"{source}:{lines.header(index)}")
    except RuleKeyError as exc:
        name = table.get("name")
        label = _quoted(name) if isinstance(name, str) and name.strip() else f"{index + 1} (no name)"
        line = lines.key(index, exc.key) if exc.key else lines.header(index)
        raise RuleFileError(f"{source}:{line}: rule {label}: {exc.reason}") from None


def _read(path: Path) -> str:
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_RULE_FILE_BYTES + 1)
    except OSError as exc:
        raise RuleFileError(f"{path}: cannot read the rule file: {exc.strerror or exc}") from None
    if len(raw) > MAX_RULE_FILE_BYTES:
        raise RuleFileError(f"{path}: a rule file is at most {MAX_RULE_FILE_BYTES} bytes, this one is larger")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise RuleFileError(f"{path}:{line}: not UTF-8 text (TOML is)") from None


class _Lines:
    """Where things are in a rule file's text (1-based lines), found by scanning it: TOML parsers give no positions.

    A string that spans lines could hold text that looks like a header or a key; then a line said is off, never the
    reason.
    """

    def __init__(self, text: str) -> None:
        self.lines = text.splitlines()
        self.headers = [number for number, line in enumerate(self.lines, 1) if _RULE_HEADER.fullmatch(line)]

    def expect(self, count: int) -> None:
        # Rules written another way (``rule = [{...}]``) have no headers to count: all are said at ``rule =``.
        if len(self.headers) != count:
            self.headers = [self.top_level("rule")] * count

    def header(self, index: int) -> int:
        return self.headers[index] if index < len(self.headers) else 1

    def key(self, index: int, key: str) -> int:
        start = self.header(index)
        pattern = re.compile(rf"\s*({re.escape(key)}|\"{re.escape(key)}\"|'{re.escape(key)}')\s*[=.]")
        for number in range(start + 1, len(self.lines) + 1):
            line = self.lines[number - 1]
            if _ANY_HEADER.match(line):
                break
            if pattern.match(line):
                return number
        return start

    def top_level(self, key: str) -> int:
        """The line of a table headed ``[key...`` or ``[[key...``, else of ``key =`` before the first table."""
        name = rf"({re.escape(key)}|\"{re.escape(key)}\"|'{re.escape(key)}')"
        table, assignment = re.compile(rf"\s*\[\[?\s*{name}\s*[.\]]"), re.compile(rf"\s*{name}\s*[=.]")
        first_table = next((n for n, line in enumerate(self.lines, 1) if _ANY_HEADER.match(line)), None)
        for number, line in enumerate(self.lines, 1):
            if table.match(line) or ((first_table is None or number < first_table) and assignment.match(line)):
                return number
        return 1


def _quoted(text: object) -> str:
    shown = str(text)
    return '"' + (shown[:80] + "..." if len(shown) > 80 else shown).replace('"', '\\"') + '"'
