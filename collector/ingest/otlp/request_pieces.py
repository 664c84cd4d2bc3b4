"""A large OTLP protobuf request cut into pieces, each an export request of its own, read and stored one after the
other: what reading a request holds is bounded by a piece, not by its body.

A request's objects take many times its bytes (about 40 times for small spans or events), so an 8 MiB body read whole
held hundreds of MB at once. The three signals' requests have the same shape (field numbers and types): a request
is resource entries (field 1: ``ResourceSpans``, ``ResourceLogs``, ``ResourceMetrics``), each its ``resource`` (1),
scope entries (2) and ``schema_url`` (3); a scope entry is its ``scope`` (1), items (2: spans, log records, metrics)
and ``schema_url`` (3). A piece holds consecutive items, about ``PIECE_BYTES`` of them (one item larger is a piece of
its own; a piece that begins with a copy of its resource and scope entries' other fields holds at least as many bytes
of items, so that those copied are read, over all the pieces, no more than the request's own bytes), each under a copy
of its resource entry's and scope entry's other fields: decoded, a piece is the items it
holds, of the same resources and scopes, as the whole request would be. Every resource and scope entry is in a piece,
those without items too, in the order of the body.

The body is checked as it is cut (each length against what is left); one that is not protobuf of this shape at the
levels cut (a field of those above with another wire type, a group, a length past the end) is not cut: ``plan`` gives
None, and the request is read whole, as before (and refused, if it is not a request).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

from ringtrace.collector.ingest.otlp.request_shape import read_varint

__all__ = ["PIECE_BYTES", "Piece", "RequestPlan", "plan"]

#: Bytes of items a piece holds, about (a larger item is a piece of its own): a request of more is cut into pieces.
PIECE_BYTES: Final = 128 * 1024

#: A field: (field number, wire type, where its key starts, where its value starts, where it ends).
_Field = tuple[int, int, int, int, int]


class Piece:
    """One piece: its bytes (an export request), and how many items it holds."""

    __slots__ = ("body", "items")

    def __init__(self, body: bytes, items: int) -> None:
        self.body = body
        self.items = items


class RequestPlan:
    """A request's resource entries (each one's fields but its scope entries: ``resource_headers``), and its pieces
    (``pieces``)."""

    def __init__(self, body: bytes, resources: list[tuple[int, int]], headers: list[bytes]) -> None:
        self._view = memoryview(body)
        self._resources = resources
        #: Each resource entry's fields but its scope entries, in the order of the body: a ``ResourceSpans`` (or
        #: ``ResourceLogs``, ``ResourceMetrics``: the same fields) of no scope.
        self.resource_headers = headers

    def items_of(self, resource: int) -> int:
        """The items of resource entry ``resource`` (its index in ``resource_headers``)."""
        view = self._view
        start, end = self._resources[resource]
        return sum(
            sum(1 for item in _fields(view, scope[3], scope[4]) if item[0] == 2)
            for scope in _fields(view, start, end)
            if scope[0] == 2
        )

    def pieces(self, skipped: frozenset[int] = frozenset(), piece_bytes: int = PIECE_BYTES) -> Iterator[Piece]:
        """The pieces of the request, in order, each of about ``piece_bytes`` of items, but those of the resource
        entries ``skipped`` (by their index)."""
        view = self._view
        done: list[bytes | memoryview] = []  # (the parts of the piece's resource entries so far, joined once)
        size = items = 0
        budget = piece_bytes  # (a piece's items: at least the bytes of the entries' fields it begins with a copy of)
        for index, (start, end) in enumerate(self._resources):
            if index in skipped:
                continue
            header = self.resource_headers[index]
            scopes: list[bytes | memoryview] = []
            for scope in _fields(view, start, end):
                if scope[0] != 2:
                    continue
                scope_header = b"".join(view[f[2] : f[4]] for f in _fields(view, scope[3], scope[4]) if f[0] != 2)
                held: list[bytes | memoryview] = [scope_header]
                for field, _, at, _, stop in _fields(view, scope[3], scope[4]):
                    if field != 2:
                        continue
                    if size and size + stop - at > budget:  # the piece is full: sent, and another begun
                        _add_entry(scopes, 2, held)
                        _add_entry(done, 1, [header, *scopes])
                        yield Piece(b"".join(done), items)
                        done, scopes, held, size, items = [], [], [scope_header], 0, 0
                        budget = max(piece_bytes, len(header) + len(scope_header))
                    held.append(view[at:stop])
                    size += stop - at
                    items += 1
                _add_entry(scopes, 2, held)
            _add_entry(done, 1, [header, *scopes])
        if done:
            yield Piece(b"".join(done), items)


def plan(body: bytes) -> RequestPlan | None:
    """The plan of the protobuf request in ``body``; None if it is not of the shape cut here (read it whole)."""
    view = memoryview(body)
    resources: list[tuple[int, int]] = []
    headers: list[bytes] = []
    try:
        for field, wire, _, start, end in _fields(view, 0, len(view)):
            if field != 1:
                continue
            _wanted(wire)
            header: list[memoryview] = []
            for scope in _fields(view, start, end):
                if scope[0] in (1, 2, 3):
                    _wanted(scope[1])
                if scope[0] != 2:
                    header.append(view[scope[2] : scope[4]])
                    continue
                for item in _fields(view, scope[3], scope[4]):
                    if item[0] in (1, 2, 3):
                        _wanted(item[1])
            resources.append((start, end))
            headers.append(b"".join(header))
    except _NotCut:
        return None
    return RequestPlan(body, resources, headers)


class _NotCut(Exception):
    """The body is not of the shape cut here."""


def _wanted(wire: int) -> None:
    if wire != 2:
        raise _NotCut


def _fields(view: memoryview, start: int, end: int) -> Iterator[_Field]:
    """The fields of the message in ``view[start:end]``.

    Raises:
        _NotCut: it is not protobuf (a group, a length past its end).
    """
    at = start
    while at < end:
        key_at = at
        key, at = read_varint(view, at, end)
        if key is None:
            raise _NotCut
        wire = key & 7
        if wire == 0:
            value, at = read_varint(view, at, end)
            if value is None:
                raise _NotCut
            value_at = at
        elif wire == 1 or wire == 5:
            value_at = at
            at += 8 if wire == 1 else 4
        elif wire == 2:
            size, value_at = read_varint(view, at, end)
            if size is None:
                raise _NotCut
            at = value_at + size
        else:
            raise _NotCut
        if at > end or key >> 3 == 0:
            raise _NotCut
        yield key >> 3, wire, key_at, value_at, at


def _add_entry(into: list[bytes | memoryview], field: int, parts: list[bytes | memoryview]) -> None:
    """The parts of a length-delimited field ``field`` of ``parts`` (not joined: the piece is, once) added to
    ``into``."""
    into.append(_key_and_size(field, sum(len(part) for part in parts)))
    into += parts


def _key_and_size(field: int, size: int) -> bytes:
    out = bytearray((field << 3 | 2,))
    while size >= 0x80:
        out.append(size & 0x7F | 0x80)
        size >>= 7
    out.append(size)
    return bytes(out)
