"""The short cuts of reading a caller's trace context held to the rules they stand in for: ``parse_traceparent``'s
reading of the usual version-00 header without its general regex, and ``extract``'s answer for a plain dict without
the scan of every key (Hypothesis, against the rules written out plainly here)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from ringtrace.client import MemoryListener, SpanContext, Timeline, extract
from ringtrace.client.recording.traceparent import parse_traceparent

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN = "00f067aa0ba902b7"
VALID = f"00-{TRACE}-{SPAN}-01"
_RULES = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?", re.DOTALL)


def by_the_rules(value: object, tracestate: object = None) -> SpanContext | None:
    """The W3C rules as ``traceparent.py``'s docstring gives them, read with one regex and no short cut."""
    if type(value) is not str:
        return None
    match = _RULES.fullmatch(value.strip(" \t"))
    if match is None:
        return None
    version, trace_id, span_id, flags, rest = match.groups()
    if version == "ff" or (version == "00" and rest is not None) or set(trace_id) == {"0"} or set(span_id) == {"0"}:
        return None
    state = ""
    if type(tracestate) is str and tracestate and len(tracestate) <= 512:
        state = tracestate.strip(" \t")
        if not (state.isascii() and state.isprintable()):
            state = ""
    return SpanContext(trace_id, span_id, int(flags, 16), state)


# -- parse_traceparent --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "header",
    [
        VALID,
        f"00-{TRACE}-{SPAN}-00",
        f"00-{TRACE}-{SPAN}-ff",  # flags this version does not define: read, sent on as zero
        f"00-{TRACE.upper()}-{SPAN}-01",  # uppercase hex, 55 characters
        f"00-{TRACE}-{SPAN[:-1]}B-01",
        f"00-{TRACE}-{SPAN}-0A",
        f"0A-{TRACE}-{SPAN}-01",
        f"00_{TRACE}-{SPAN}-01",  # 55 characters, a separator not a dash
        f"00-{TRACE}_{SPAN}-01",
        f"00-{TRACE}-{SPAN}_01",
        f"00-{TRACE}-{SPAN} 01",
        f"00-{TRACE[:10]}-{TRACE[11:]}-{SPAN}-01",  # a dash where a digit goes
        f"ff-{TRACE}-{SPAN}-01",  # version ff
        f"01-{TRACE}-{SPAN}-01",  # a later version, exactly 55 characters
        f"cc-{TRACE}-{SPAN}-01-and-more",  # a later version with fields of its own
        f"cc-{TRACE}-{SPAN}-01-",
        f"00-{TRACE}-{SPAN}-01-and-more",  # version 00 with more: invalid
        f"00-{'0' * 32}-{SPAN}-01",  # all-zero ids
        f"00-{TRACE}-{'0' * 16}-01",
        f"00-{'0' * 32}-{'0' * 16}-00",
        f" {VALID}",  # spaces and tabs around: stripped
        f"{VALID} ",
        f"\t{VALID}\t ",
        f" {VALID[1:]}",  # 55 characters with a space where the version begins
        f"{VALID[:-1]} ",
        f"\n{VALID}",  # not a space or tab: invalid
        f"{VALID}\n",
        f"00-{TRACE}-{SPAN}-1",
        f"00-{TRACE}-{SPAN}-\u0660\u0661",  # digits, but not ASCII ones
        "-" * 55,
        "0" * 55,
    ],
)
def test_every_edge_of_the_usual_form_reads_as_the_rules_read_it(header: str) -> None:
    assert parse_traceparent(header) == by_the_rules(header)
    assert parse_traceparent(header, " congo=t61rcWkgMzE ") == by_the_rules(header, " congo=t61rcWkgMzE ")


_PADDING = st.sampled_from(["", " ", "\t", " \t", "\n", "\x00"])
_SEPARATOR = st.sampled_from(["-", "-", "-", "_", " ", "x", "--", ""])


def _digits(length: int) -> st.SearchStrategy[str]:
    return st.one_of(
        st.text(alphabet="0123456789abcdef", min_size=length, max_size=length),
        st.sampled_from(["0" * length, "f" * length]),
        st.text(alphabet="0123456789abcdefABCDEF-g \u0660", min_size=length - 1, max_size=length + 1),
    )


@given(
    _PADDING,
    st.one_of(st.sampled_from(["00", "01", "cc", "fe", "ff", "FF", "0A"]), _digits(2)),
    _SEPARATOR,
    _digits(32),
    _SEPARATOR,
    _digits(16),
    _SEPARATOR,
    _digits(2),
    st.sampled_from(["", "", "-", "-more", "x", "-\n"]),
    _PADDING,
    st.one_of(st.none(), st.text(max_size=20)),
)
@example(" ", "00", "-", TRACE, "-", SPAN, "-", "01", "", "", None)
def test_a_header_near_the_usual_form_reads_as_the_rules_read_it(
    before: str,
    version: str,
    dash1: str,
    trace_id: str,
    dash2: str,
    span_id: str,
    dash3: str,
    flags: str,
    rest: str,
    after: str,
    tracestate: str | None,
) -> None:
    header = f"{before}{version}{dash1}{trace_id}{dash2}{span_id}{dash3}{flags}{rest}{after}"
    assert parse_traceparent(header, tracestate) == by_the_rules(header, tracestate)


@given(st.text(max_size=70), st.one_of(st.none(), st.text(max_size=20)))
def test_any_text_reads_as_the_rules_read_it(header: str, tracestate: str | None) -> None:
    assert parse_traceparent(header, tracestate) == by_the_rules(header, tracestate)


# -- extract from a plain dict ------------------------------------------------------------------------------------


class Name(str):
    """A header name of a str subclass."""


def header_by_the_rules(headers: dict[Any, Any], name: str) -> object:
    """A plain dict's header: the key as given, else the first key that is it in any case, or as WSGI names it."""
    value = headers.get(name)
    if value is None:
        wanted = (name, "http_" + name)
        value = next((v for k, v in headers.items() if isinstance(k, str) and k.lower() in wanted), None)
    return value


_KEYS = st.sampled_from(
    [
        "traceparent",
        "TraceParent",
        "HTTP_TRACEPARENT",
        "tracestate",
        "TraceState",
        "TRACESTATE",
        "HTTP_TRACESTATE",
        "http_tracestate",
        "x-tracestate",
        "tracestates",
        "trace state",
        "host",
        "Content-Type",
        "ΣTRACESTATE",
        b"tracestate",
        1,
        Name("Http_TraceState"),
    ]
)


@given(
    st.dictionaries(_KEYS, st.sampled_from([VALID, f"01-{TRACE}-{SPAN}-00", "a=b", "c=d", None, 7]), max_size=8),
    st.booleans(),
)
@example({"traceparent": VALID}, False)
@example({"traceparent": VALID, "TraceState": "a=b"}, False)
@example({"traceparent": VALID, "tracestate": None, "HTTP_TRACESTATE": "a=b"}, False)
def test_extract_from_a_dict_reads_each_header_as_a_scan_of_every_key_would(
    headers: dict[Any, Any], exact_first: bool
) -> None:
    if exact_first:
        headers = {"traceparent": VALID, **headers}
    traceparent = header_by_the_rules(headers, "traceparent")
    expected = None if traceparent is None else by_the_rules(traceparent, header_by_the_rules(headers, "tracestate"))
    assert extract(headers) == expected


# -- the plain scope a span of a trace records --------------------------------------------------------------------


def test_a_span_of_a_trace_records_its_args_then_its_ids_each_entry_in_a_map_of_its_own() -> None:
    """The args map is made once per entry and handed to the plain scope (not copied again): each entry records its
    own, in the order of a call with ``**args``, and an exception's name is added to a copy."""
    listener = MemoryListener()
    tl = Timeline("trace", [listener])
    span = tl.server_span("handle", {"traceparent": VALID}, route="/a", span_id="the caller's", user=1)
    for _ in range(2):
        with span:
            pass
    with pytest.raises(KeyError), span:
        raise KeyError("x")
    with tl.trace_scope("root", n=0):
        pass
    tl.close()
    events = [event for event in listener.events if event.name in ("handle", "root")]
    first, second, failed, root = (event.args for event in events)
    assert list(first) == ["route", "span_id", "user", "trace_id", "parent_span_id", "kind"]
    assert first == {"route": "/a", "span_id": first["span_id"], "user": 1, "trace_id": TRACE,
                     "parent_span_id": SPAN, "kind": "server"}  # fmt: skip
    assert first["span_id"] != second["span_id"] and first is not second
    assert failed == {**{key: value for key, value in second.items() if key != "span_id"},
                      "span_id": failed["span_id"], "exception": "KeyError"}  # fmt: skip
    assert list(root) == ["n", "trace_id", "span_id", "kind"] and root["kind"] == "internal"
