"""Generated blocks in the docs' pages: the text between two markers, read and written again.

The collector's flag table, the client's options table and the table of snapshot formats are each written from the
one table that declares them, between markers of their own (``<!-- flags:start -->`` ... ``<!-- flags:end -->``);
a test holds each page's block equal to what its table writes.
"""

from __future__ import annotations

__all__ = ["marked_block", "with_marked_block"]


def marked_block(text: str, start_marker: str, end_marker: str) -> str | None:
    """What ``text`` holds between the two markers (None: no such block), without the blank lines around it."""
    start, end = text.find(start_marker), text.find(end_marker)
    if start < 0 or end < start:
        return None
    return text[start + len(start_marker) : end].strip("\n") + "\n"


def with_marked_block(text: str, start_marker: str, end_marker: str, block: str) -> str:
    """``text`` with ``block`` between the two markers in place of what was there.

    Raises:
        ValueError: ``text`` has no ``start_marker`` ... ``end_marker`` block.
    """
    if marked_block(text, start_marker, end_marker) is None:
        raise ValueError(f"no {start_marker} ... {end_marker} block")
    start, end = text.index(start_marker) + len(start_marker), text.index(end_marker)
    return f"{text[:start]}\n{block}{text[end:]}"
