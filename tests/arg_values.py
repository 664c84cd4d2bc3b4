"""Argument values of every shape a recording call may be given, for the property tests that hold the C writers to
the Python walk."""

from __future__ import annotations

from hypothesis import strategies as st

ARG_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.floats(width=32)
    | st.text()
    | st.binary(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8) | st.integers(0, 9), inner),
    max_leaves=12,
)
