"""Incident rules read from a TOML rule file and from ``--trigger`` flags: the issue's example as users write it, every
condition form, every error with the line it names, and the docs' keys held to the code's."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from ringtrace.collector.incidents.rule_file import (
    MAX_RULE_FILE_BYTES,
    RuleFileError,
    load_rules,
    parse_rules,
    parse_trigger,
)
from ringtrace.collector.incidents.rule_keys import KNOWN_KEYS, MAX_WINDOW_NS
from ringtrace.collector.incidents.rules import (
    CounterCondition,
    CrashCondition,
    IncidentCallCondition,
    MessageCondition,
    OtlpErrorCondition,
    Rule,
    RuleSet,
    SpanCondition,
)
from ringtrace.wire.errors import ConfigError
from ringtrace.wire.message_format import PRIORITIES
from ringtrace.wire.parsing import format_duration_ns, parse_duration_ns

ROOT = Path(__file__).parents[2]
S = 10**9

#: The issue's example (issue 36), comments and all: users' files of this form keep working.
ISSUE_EXAMPLE = """\
[[rule]]
name = "slow checkout"
span = "checkout*"          # or: message = "*" with min_priority = "error"; crash = true; counter = "queue depth"
min_duration = "200ms"      #     with above = 1000; otlp_error = true; incident_call = true
scope = "trace"             # process | host | trace | fleet
before = "30s"
after = "5s"
max_per_minute = 6
"""


def one_rule(body: str) -> Rule:
    (rule,) = parse_rules(f'[[rule]]\nname = "r"\n{body}\n', "rules.toml").rules
    return rule


def refused(text: str) -> str:
    with pytest.raises(RuleFileError) as caught:
        parse_rules(text, "rules.toml")
    return str(caught.value)


def test_the_issue_example_parses_exactly() -> None:
    rules = parse_rules(ISSUE_EXAMPLE, "rules.toml")
    assert rules == RuleSet(
        (
            Rule(
                name="slow checkout",
                condition=SpanCondition(name="checkout*", min_duration_ns=200_000_000),
                scope="trace",
                before_ns=30 * S,
                after_ns=5 * S,
                max_per_minute=6,
                url=None,
                origin="rules.toml:1",
            ),
        ),
        "rules.toml",
    )
    assert rules.by_name("slow checkout") is rules.rules[0]


def test_every_condition_form() -> None:
    text = """\
[[rule]]
name = "any span"
span = "*"

[[rule]]
name = "errors"
message = "*"
min_priority = "error"

[[rule]]
name = "db warnings"
message = "db.*"
min_priority = "warning"
text = "*timeout*"

[[rule]]
name = "otlp errors"
otlp_error = true

[[rule]]
name = "otlp checkout errors"
otlp_error = true
span = "POST /checkout*"

[[rule]]
name = "queue"
counter = "queue depth"
above = 1000

[[rule]]
name = "pool"
counter = "pool.*"
above = 90.5
below = 2

[[rule]]
name = "crash"
crash = true
scope = "host"

[[rule]]
name = "asked"
incident_call = true

[[rule]]
name = "asked to pay"
incident_call = true
reason = "payment*"
scope = "fleet"
before = "2m"
after = "1.5s"
max_per_minute = 60000
url = "https://hooks.example.com/ringtrace?team=pay"
"""
    rules = {rule.name: rule for rule in parse_rules(text, "rules.toml").rules}
    assert {name: rule.condition for name, rule in rules.items()} == {
        "any span": SpanCondition("*", 0),
        "errors": MessageCondition("error", "*", "*"),
        "db warnings": MessageCondition("warning", "db.*", "*timeout*"),
        "otlp errors": OtlpErrorCondition("*"),
        "otlp checkout errors": OtlpErrorCondition("POST /checkout*"),
        "queue": CounterCondition("queue depth", 1000.0, None),
        "pool": CounterCondition("pool.*", 90.5, 2.0),
        "crash": CrashCondition(),
        "asked": IncidentCallCondition("*"),
        "asked to pay": IncidentCallCondition("payment*"),
    }
    assert rules["errors"] == Rule("errors", MessageCondition(), origin="rules.toml:5")  # the defaults
    paying = rules["asked to pay"]
    assert (paying.scope, paying.before_ns, paying.after_ns) == ("fleet", 120 * S, 1_500_000_000)
    assert (paying.max_per_minute, paying.url) == (60000, "https://hooks.example.com/ringtrace?team=pay")
    assert rules["crash"].scope == "host"


def test_a_message_rule_takes_error_by_default_and_any_priority() -> None:
    assert one_rule('message = "*"').condition == MessageCondition("error", "*", "*")
    for priority in ("fatal", "info", "trace+++"):
        assert one_rule(f'message = "*"\nmin_priority = "{priority}"').condition == MessageCondition(priority)


def test_durations_take_every_unit() -> None:
    for text, ns in [("0s", 0), ("800ns", 800), ("250us", 250_000), ("1.5s", 1_500_000_000), ("1h", 3600 * S)]:
        assert one_rule(f'span = "x"\nmin_duration = "{text}"').condition == SpanCondition("x", ns)
    assert one_rule('span = "x"\nbefore = "0s"\nafter = "1m"').before_ns == 0


@given(st.integers(min_value=0, max_value=10**15))
def test_durations_render_and_parse_back(ns: int) -> None:
    text = format_duration_ns(ns)
    assert re.fullmatch(r"\d+(ns|us|ms|s|m|h)", text)
    assert parse_duration_ns(text) == ns


def test_format_duration_picks_the_largest_whole_unit() -> None:
    assert [format_duration_ns(ns) for ns in (0, 200_000_000, 1_500_000_000, 120 * S, 7200 * S, 1001)] == [
        "0s",
        "200ms",
        "1500ms",
        "2m",
        "2h",
        "1001ns",
    ]


def test_an_empty_file_has_no_rules() -> None:
    assert parse_rules("# nothing yet\n", "rules.toml") == RuleSet((), "rules.toml")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # The brief's own example: the line of the key, the rule's name, the value as written, the units.
        (
            '# rules\n\n[[rule]]\nname = "slow checkout"\nspan = "checkout*"\n\nmin_duration = "200"\n',
            'rules.toml:7: rule "slow checkout": min_duration "200" has no unit (ns, us, ms, s, m, h), like "200ms"',
        ),
        ('[[rule]]\nname = "a"\nspan = "x"\nbefore = 30\n', 'rules.toml:4: rule "a": before 30 has no unit'),
        ('[[rule]]\nname = "a"\nspan = "x"\nafter = "soon"\n', 'rules.toml:4: rule "a": after "soon" is not a dur'),
        ('[[rule]]\nname = "a"\nspan = "x"\nafter = "-1s"\n', 'rules.toml:4: rule "a": after must not be negative'),
        ('[[rule]]\nname = "a"\nspan = "x"\nbefore = "9999999999h"\n', 'rules.toml:4: rule "a": before is at most 1h,'),
        ('[[rule]]\nname = "a"\nspan = "x"\nbefore = "61m"\n', 'rules.toml:4: rule "a": before is at most 1h, got'),
        ('[[rule]]\nname = "a"\nspan = "x"\nmin_duration = "2h"\n', 'rules.toml:4: rule "a": min_duration is at most'),
        (
            '[[rule]]\nname = "a"\nspan = "x"\nbefore = "0s"\nafter = "0ms"\n',
            'rules.toml:5: rule "a": before and after',
        ),
        ('[[rule]]\nname = "a"\nspan = "x"\nbefore = true\n', 'rules.toml:4: rule "a": before takes a duration'),
        # Unknown keys name the key and list the known ones.
        ('[[rule]]\nname = "a"\nspan = "x"\nmin_durration = "1s"\n', 'rules.toml:4: rule "a": unknown key "min_durr'),
        # Conditions: none, two (both named), a key of another condition, a flag that is not true.
        ('[[rule]]\nname = "a"\nscope = "host"\n', 'rules.toml:1: rule "a": no condition: a rule has one of span, mes'),
        ('[[rule]]\nname = "a"\nmin_priority = "error"\n', "min_priority goes with message"),
        ('[[rule]]\nname = "a"\nspan = "x"\ncrash = true\n', 'rules.toml:4: rule "a": conditions span and crash in'),
        ('[[rule]]\nname = "a"\nmessage = "*"\nmin_duration = "1s"\n', 'rules.toml:4: rule "a": min_duration goes wi'),
        (
            '[[rule]]\nname = "a"\ncrash = true\nreason = "x"\n',
            'rules.toml:4: rule "a": reason goes with incident_call',
        ),
        ('[[rule]]\nname = "a"\ncrash = false\n', 'rules.toml:3: rule "a": crash takes true (leave it out otherwise)'),
        ('[[rule]]\nname = "a"\notlp_error = "yes"\n', 'rules.toml:3: rule "a": otlp_error takes true'),
        ('[[rule]]\nname = "a"\notlp_error = true\nmin_duration = "1s"\n', "min_duration goes with span, not with otl"),
        ('[[rule]]\nname = "a"\ncounter = "q"\n', 'rules.toml:3: rule "a": counter needs above or below'),
        ('[[rule]]\nname = "a"\ncounter = "q"\nabove = "1000"\n', 'rules.toml:4: rule "a": above takes a finite num'),
        ('[[rule]]\nname = "a"\ncounter = "q"\nbelow = nan\n', 'rules.toml:4: rule "a": below takes a finite number'),
        ('[[rule]]\nname = "a"\ncounter = "q"\nabove = true\n', 'rules.toml:4: rule "a": above takes a finite number'),
        ('[[rule]]\nname = "a"\ncounter = "q"\nabove = 1' + "0" * 400 + "\n", "above takes a finite number, got 1000"),
        ('[[rule]]\nname = "a"\nspan = ""\n', 'rules.toml:3: rule "a": span takes a glob'),
        ('[[rule]]\nname = "a"\nspan = 5\n', 'rules.toml:3: rule "a": span takes a glob'),
        ('[[rule]]\nname = "a"\nspan = "db[12"\n', 'rules.toml:3: rule "a": span "db[12" has a [ at character 3 that'),
        ('[[rule]]\nname = "a"\nmessage = "*"\nmin_priority = "bad"\n', 'rules.toml:4: rule "a": min_priority is one'),
        # Scope, limits, webhook.
        ('[[rule]]\nname = "a"\nspan = "x"\nscope = "cluster"\n', 'rules.toml:4: rule "a": scope is one of process, h'),
        ('[[rule]]\nname = "a"\ncrash = true\nscope = "trace"\n', 'rules.toml:4: rule "a": scope "trace" does not go'),
        ('[[rule]]\nname = "a"\ncounter = "q"\nabove = 1\nscope = "trace"\n', 'rules.toml:5: rule "a": scope "trace"'),
        ('[[rule]]\nname = "a"\nspan = "x"\nmax_per_minute = 0\n', 'rules.toml:4: rule "a": max_per_minute takes a w'),
        ('[[rule]]\nname = "a"\nspan = "x"\nmax_per_minute = 60001\n', "from 1 to 60000, got 60001"),
        ('[[rule]]\nname = "a"\nspan = "x"\nmax_per_minute = 1.5\n', "from 1 to 60000, got 1.5"),
        ('[[rule]]\nname = "a"\nspan = "x"\nurl = "ftp://h/x"\n', 'rules.toml:4: rule "a": url takes an http:// or'),
        ('[[rule]]\nname = "a"\nspan = "x"\nurl = "http:///x"\n', 'rules.toml:4: rule "a": url takes an http://'),
        ('[[rule]]\nname = "a"\nspan = "x"\nurl = "http://h:99999/"\n', 'rules.toml:4: rule "a": url takes an http'),
        ('[[rule]]\nname = "a"\nspan = "x"\nurl = "http://h/a b"\n', 'rules.toml:4: rule "a": url takes an http://'),
        # Names: required, a string, unique (naming where the first one is).
        ('[[rule]]\nspan = "x"\n', "rules.toml:1: rule 1 (no name): name is required"),
        ('[[rule]]\nname = ""\nspan = "x"\n', "rules.toml:2: rule 1 (no name): name must be a non-empty string"),
        ('[[rule]]\nname = 7\nspan = "x"\n', "rules.toml:2: rule 1 (no name): name must be a non-empty string, got 7"),
        (
            '[[rule]]\nname = "a"\nspan = "x"\n\n[[rule]]\nname = "a"\ncrash = true\n',
            'rules.toml:6: rule name "a" is already used at rules.toml:1 (names are unique)',
        ),
        # The file's shape.
        ('[rule]\nname = "a"\nspan = "x"\n', "rules.toml:1: each rule is a table headed [[rule]] (two brackets)"),
        ('version = 2\n[[rule]]\nname = "a"\nspan = "x"\n', 'rules.toml:1: unknown key "version" (a rule file holds'),
        ('[[rule]]\nname = "a"\nspan = "x"\n[rules]\nx = 1\n', 'rules.toml:4: unknown key "rules"'),
    ],
)
def test_an_error_names_its_line_and_reason(text: str, expected: str) -> None:
    message = refused(text)
    assert expected in message
    assert message.startswith("rules.toml:")


def test_the_line_is_that_of_the_key_in_its_own_rule() -> None:
    text = '[[rule]]\nname = "a"\nspan = "x"\nscope = "host"\n\n[[rule]]\nname = "b"\nspan = "y"\nscope = "nope"\n'
    assert refused(text).startswith('rules.toml:9: rule "b": scope is one of')
    # A key written as a quoted key is found; one not found on a line of its own is said at its rule's header.
    assert refused('[[rule]]\nname = "a"\n"span" = "x"\n"scope" = "x"\n').startswith("rules.toml:4:")
    assert refused('[[rule]]\nname = "a"\nspan = "x"\n\n[[rule]]\nname = "b"\n').startswith("rules.toml:5: rule")


def test_an_unknown_key_lists_the_known_ones() -> None:
    message = refused('[[rule]]\nname = "a"\nspan = "x"\nwindow = "1s"\n')
    assert f"(known: {', '.join(KNOWN_KEYS)})" in message
    for key in ("min_duration", "min_priority", "otlp_error", "incident_call", "max_per_minute", "url"):
        assert key in message


def test_toml_syntax_errors_keep_tomllib_line_and_column() -> None:
    message = refused('[[rule]]\nname = "a"\nspan = checkout*\n')
    assert message.startswith("rules.toml:3: not valid TOML: ")
    assert "(at line 3, column 8)" in message
    assert refused('[[rule]]\nname = "a\n').startswith("rules.toml:2: not valid TOML")
    assert refused('[[rule]]\nname = "a"\nname = "b"\n').startswith("rules.toml:3: not valid TOML")


def test_rules_written_inline_are_read_and_said_at_their_key() -> None:
    (rule,) = parse_rules('rule = [{name = "a", span = "x"}]\n', "r.toml").rules
    assert rule == Rule("a", SpanCondition("x"), origin="r.toml:1")
    assert refused('\nrule = [{name = "a", span = "x", scope = "no"}]\n').startswith('rules.toml:2: rule "a": scope')


def test_trigger_flags() -> None:
    assert parse_trigger("slow checkout: span=checkout*, min_duration=200ms, scope=trace") == Rule(
        "slow checkout", SpanCondition("checkout*", 200_000_000), scope="trace", origin="--trigger"
    )
    assert parse_trigger("errors: message=*").condition == MessageCondition()
    assert parse_trigger("sets: span=db[12]*, ").condition == SpanCondition("db[12]*")
    assert parse_trigger("bracket: span=[[]x]").condition == SpanCondition("[[]x]")
    assert parse_trigger("db: message=db.*, min_priority=warning, text=*timeout*").condition == MessageCondition(
        "warning", "db.*", "*timeout*"
    )
    assert parse_trigger("otlp: otlp_error=true, span=POST *").condition == OtlpErrorCondition("POST *")
    assert parse_trigger("q: counter=queue depth, above=1000, below=-2.5").condition == CounterCondition(
        "queue depth", 1000.0, -2.5
    )
    assert parse_trigger("crashed: crash=true, scope=host").condition == CrashCondition()
    asked = parse_trigger('asked: incident_call=true, reason="pay*", before=1m, after=0s, max_per_minute=100')
    assert asked.condition == IncidentCallCondition("pay*")
    assert (asked.before_ns, asked.after_ns, asked.max_per_minute) == (60 * S, 0, 100)
    hooked = parse_trigger("hook: crash=true, url=http://127.0.0.1:9000/hook?x=1,")  # a trailing comma is fine
    assert hooked.url == "http://127.0.0.1:9000/hook?x=1"


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("span=checkout*", '--trigger takes "NAME: key=value, key=value, ...", like'),
        (": span=x", "--trigger takes"),
        ("slow, span: span=x", "--trigger takes"),
        ("slow: span", '--trigger "slow: span": "span" is not key=value'),
        ("slow: =x", '"=x" is not key=value'),
        ("slow: span=x, span=y", "span is given twice (a key is given once)"),
        ("slow: span=x, name=y", "name is given twice (the name comes before the colon)"),
        ("slow: span=x, min_duration=200", 'min_duration "200" has no unit (ns, us, ms, s, m, h), like "200ms"'),
        ("slow: span=x, crash=true", "conditions span and crash in one rule"),
        ("slow: crash=yes", 'crash takes true (leave it out otherwise), got "yes"'),
        ("slow: counter=q, above=lots", 'above takes a finite number, got "lots"'),
        ("slow: counter=q, above=inf", "above takes a finite number, got inf"),
        ("slow: counter=q, below=1" + "0" * 400, "below takes a finite number, got 1000"),
        ("slow: span=x, max_per_minute=6.5", 'max_per_minute takes a whole number from 1 to 60000, got "6.5"'),
        ("slow: span=x, colour=red", 'unknown key "colour" (known: name, scope,'),
        ("slow: ", "no condition: a rule has one of span"),
    ],
)
def test_a_bad_trigger_names_the_flag_and_the_reason(spec: str, expected: str) -> None:
    with pytest.raises(RuleFileError) as caught:
        parse_trigger(spec)
    assert expected in str(caught.value)
    assert str(caught.value).startswith("--trigger ")


_GLOBS = st.text(alphabet="abcxyz*?.-/ ", min_size=1, max_size=12).map(str.strip).filter(bool)
_DURATIONS = st.integers(0, MAX_WINDOW_NS).map(format_duration_ns)
_NUMBERS = st.integers(-(10**9), 10**9) | st.floats(allow_nan=False, allow_infinity=False)
_CONDITIONS = st.one_of(
    st.fixed_dictionaries({"span": _GLOBS}, optional={"min_duration": _DURATIONS}),
    st.fixed_dictionaries({"message": _GLOBS}, optional={"min_priority": st.sampled_from(PRIORITIES), "text": _GLOBS}),
    st.fixed_dictionaries({"otlp_error": st.just(True)}, optional={"span": _GLOBS}),
    st.fixed_dictionaries({"counter": _GLOBS, "above": _NUMBERS}, optional={"below": _NUMBERS}),
    st.fixed_dictionaries({"crash": st.just(True)}),
    st.fixed_dictionaries({"incident_call": st.just(True)}, optional={"reason": _GLOBS}),
)
_COMMON = st.fixed_dictionaries(
    {"name": st.text(alphabet="abc xyz-_.", min_size=1, max_size=20).map(str.strip).filter(bool)},
    optional={
        "scope": st.sampled_from(["process", "host", "fleet"]),
        "before": _DURATIONS,
        "after": _DURATIONS.filter(lambda text: text != "0s"),
        "max_per_minute": st.integers(1, 60000),
        "url": st.sampled_from(["http://127.0.0.1:9000/hook", "https://hooks.example.com/a?b=c"]),
    },
)


def _toml_value(value: object) -> str:
    return json.dumps(value) if isinstance(value, str | bool) else repr(value)


def _trigger_value(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value) if isinstance(value, bool) else repr(value)


@given(_COMMON, _CONDITIONS)
def test_a_file_and_a_trigger_declare_the_same_rule(common: dict[str, object], condition: dict[str, object]) -> None:
    table = {**common, **condition}
    text = "[[rule]]\n" + "".join(f"{key} = {_toml_value(value)}\n" for key, value in table.items())
    spec = f"{common['name']}: " + ", ".join(
        f"{key}={_trigger_value(value)}" for key, value in table.items() if key != "name"
    )
    (from_file,) = parse_rules(text, "rules.toml").rules
    assert dataclasses.replace(parse_trigger(spec), origin="rules.toml:1") == from_file
    assert from_file.name == common["name"]
    assert from_file.max_per_minute == common.get("max_per_minute", 6)
    if "before" in common:
        assert format_duration_ns(from_file.before_ns) == common["before"]


def test_load_rules_joins_the_file_and_the_triggers(tmp_path: Path) -> None:
    path = tmp_path / "rules.toml"
    path.write_text(ISSUE_EXAMPLE)
    rules = load_rules(path, ["crashed: crash=true"])
    assert [(rule.name, rule.origin) for rule in rules.rules] == [
        ("slow checkout", f"{path}:1"),
        ("crashed", "--trigger"),
    ]
    assert rules.source == str(path)
    assert load_rules(None, ["crashed: crash=true"]).source == "--trigger"
    assert load_rules(None) == RuleSet()
    with pytest.raises(RuleFileError, match=rf"already used at {re.escape(str(path))}:1 \(names are unique\)"):
        load_rules(path, ["slow checkout: crash=true"])
    with pytest.raises(RuleFileError, match="already used at --trigger"):
        load_rules(None, ["a: crash=true", "a: span=x"])


def test_load_rules_refuses_a_file_it_cannot_use(tmp_path: Path) -> None:
    with pytest.raises(RuleFileError, match="cannot read the rule file"):
        load_rules(tmp_path / "missing.toml")
    big = tmp_path / "big.toml"
    big.write_text("#" * (MAX_RULE_FILE_BYTES + 1))
    with pytest.raises(RuleFileError, match=f"at most {MAX_RULE_FILE_BYTES} bytes"):
        load_rules(big)
    binary = tmp_path / "binary.toml"
    binary.write_bytes(b'[[rule]]\nname = "\xff"\n')
    with pytest.raises(RuleFileError, match=r"binary.toml:2: not UTF-8"):
        load_rules(binary)
    bad = tmp_path / "bad.toml"
    bad.write_text('[[rule]]\nname = "a"\nspan = "x"\nbefore = "1d"\n')
    with pytest.raises(ConfigError, match=rf'{re.escape(str(bad))}:4: rule "a": before "1d" is not a duration'):
        load_rules(bad)


def test_window_bound_is_said_in_its_unit() -> None:
    assert format_duration_ns(MAX_WINDOW_NS) == "1h"


def test_the_docs_name_every_key() -> None:
    page = (ROOT / "docs" / "incidents.md").read_text(encoding="utf-8")
    assert [key for key in KNOWN_KEYS if f"`{key}`" not in page] == []


def test_the_name_incidents_taken_by_hand_are_listed_under_is_refused() -> None:
    with pytest.raises(RuleFileError, match="'by hand' is taken"):
        parse_trigger("by hand: span=x")
