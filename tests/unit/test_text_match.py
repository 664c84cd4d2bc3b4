"""A message's text rendered and globbed from tables (``text_match.py``, what both twins of ``rule_verdicts`` read):
a glob program matches exactly the texts its ``Pattern`` matches, and a render program renders a message as
``render`` does, on any glob, text, kind and values (odd format strings, missing and extra values, non-ASCII text);
what it does not render (floats, bytes, containers) is left to Python."""

from __future__ import annotations

import warnings
from array import array
from typing import Any

from hypothesis import assume, given, settings
from hypothesis import strategies as st
from ringtrace.collector.incidents.text_match import add_glob, add_render, glob_holds, render_text
from ringtrace.collector.read.selection import Pattern
from ringtrace.wire.message_format import render
from ringtrace.wire.table_frames import KindSpec

#: The characters globs and texts are made of: every one the glob syntax gives a meaning, and some that are not ASCII.
GLOB_CHARACTERS = "ab-]![^\\*?&~|z{}$é€𝄞\n\x00"
NAMES = ["what", "who", "value1", "value2", "value3", "value10", "é", "x_y"]


def pattern(text: str) -> Pattern | None:
    """``Pattern(text)``, or None where its regex cannot be compiled (a rule file refuses it)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (a set that looks nested or like a set operation: the regex says)
        try:
            return Pattern(text)
        except Exception:
            return None


@settings(max_examples=2000, deadline=None)
@given(st.text(GLOB_CHARACTERS, max_size=9), st.lists(st.text(GLOB_CHARACTERS, max_size=9), max_size=6))
def test_a_glob_program_matches_exactly_what_its_pattern_matches(glob: str, texts: list[str]) -> None:
    expected = pattern(glob)
    assume(expected is not None)
    globs = array("q", [7, 7])  # (a program starts anywhere in its table)
    start = add_glob(globs, glob)
    assert start == 2  # every glob ``Pattern`` takes is one a program holds
    for text in [*texts, glob, glob.replace("*", "")]:
        assert glob_holds(globs, start, text) is expected(text), (glob, text)  # type: ignore[misc]


def test_globs_of_every_shape_match_as_their_patterns() -> None:
    cases = {
        "*timeout*": ["a timeout b", "timeout", "time out"],
        "[!a-c]?*": ["dxy", "ax", "d", "\n\n"],
        "[z-a]*": ["z", "a", ""],  # (an empty range: never)
        "[!z-a]": ["q", "", "qq"],  # (an empty range negated: any one)
        "*[]-]": ["a]", "a-", "a"],
        "exact": ["exact", "exactly", "Exact"],
        "é*𝄞": ["é𝄞", "éa𝄞", "e𝄞"],
        "a*a*a*a*a*b": ["a" * 40, "a" * 40 + "b"],
    }
    for glob, texts in cases.items():
        globs = array("q")
        start = add_glob(globs, glob)
        for text in texts:
            assert glob_holds(globs, start, text) is Pattern(glob)(text), (glob, text)


placeholder_texts = st.lists(
    st.sampled_from([*(f"${n}" for n in NAMES), *(f"${{{n}}}" for n in NAMES), "$", "${", "}", " ", "é", "$$", "a*"]),
    max_size=6,
).map("".join)
renderable = st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.text(max_size=5)


@settings(max_examples=1000, deadline=None)
@given(
    st.lists(st.sampled_from(NAMES), max_size=4),
    placeholder_texts,
    st.lists(renderable, max_size=12),
)
def test_a_render_program_renders_a_message_as_render_does(names: list[str], text: str, values: list[Any]) -> None:
    # (more values than fields, fewer, names given twice, placeholders of no field, ``value{n}`` past the fields)
    kind = KindSpec(3, "app", "message", tuple((name, "any") for name in names), text, "error")
    renders = array("q", [1, 9])
    start = add_render(renders, kind)
    assert render_text(renders, start, values) == render(kind, values)[0]


def test_values_a_program_does_not_render_are_left_to_python() -> None:
    kind = KindSpec(3, "app", "message", (("what", "any"),), "took $what", "error")
    renders = array("q")
    start = add_render(renders, kind)
    assert render_text(renders, start, [5]) == "took what(5)"
    for value in [1.5, b"x", [1], {"a": 1}]:
        assert render_text(renders, start, [value]) is None
        assert render_text(renders, start, ["shown", value]) is None  # (even one not shown)
