"""Args values packed as msgpack whose structure reads (every length within the bytes, no byte msgpack never uses)
but which do not all read strictly: strs that are not UTF-8, maps with keys msgpack-python cannot hash, values of the
wrong type where a status or a counter's value belongs, containers nested about as deep as the C reader goes. For the
property tests that hold the first pass's C twin (which checks only the structure of args it does not read) and the
rules' verdicts to their Python twins."""

from __future__ import annotations

import msgpack
from hypothesis import strategies as st

#: The C reader's depth (MAX_DEPTH in _msgpack_read.h): an args value's top is at 0.
C_DEPTH = 32


def raw_str(data: bytes) -> bytes:
    """A msgpack str of any bytes (fixstr or str 8)."""
    return (bytes([0xA0 | len(data)]) if len(data) < 32 else bytes([0xD9, len(data)])) + data


def raw_map(pairs: list[tuple[bytes, bytes]]) -> bytes:
    return bytes([0x80 | len(pairs)]) + b"".join(key + value for key, value in pairs)


def raw_array(items: list[bytes]) -> bytes:
    return bytes([0x90 | len(items)]) + b"".join(items)


NOT_UTF8 = [b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"st\xffatus", b"\xe2\x82", b"error\x80", b"\xc0\xaf" * 20]
texts = st.one_of(
    st.sampled_from(["status", "value", "error", "x", ""]).map(msgpack.packb),
    st.sampled_from(NOT_UTF8).map(raw_str),
)
keys = texts | st.sampled_from([msgpack.packb(v) for v in ([1], {"a": 1}, [], b"status", 1.5, None, True, 3)])
scalars = st.one_of(
    texts,
    st.sampled_from([b"error", True, None, "5", 5, 995, 2**64 - 1, -7, 0.5, 1e300, float("nan")]).map(msgpack.packb),
    st.floats(width=32).map(lambda v: msgpack.packb(v, use_single_float=True)),
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(st.tuples(keys, inner), max_size=3).map(raw_map) | st.lists(inner, max_size=3).map(raw_array)
    ),
    max_leaves=8,
)
#: A status map or a counter's args at a depth around the C reader's (inside arrays or maps).
deep = st.tuples(st.integers(C_DEPTH - 3, C_DEPTH + 2), st.booleans(), values).map(
    lambda shape: (b"\x91" if shape[1] else b"\x81\xa1k") * shape[0] + raw_map([(msgpack.packb("status"), shape[2])])
)
LOOSE_ARGS = st.one_of(
    st.lists(st.tuples(keys, values), max_size=4).map(raw_map),
    st.lists(st.tuples(st.sampled_from(["status", "value"]).map(msgpack.packb), values), max_size=3).map(raw_map),
    values,
    deep,
)
