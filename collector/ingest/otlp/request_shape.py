"""How many resources, scopes and items an OTLP request holds, bounded before it is decoded.

A request's bytes are bounded (``--otlp-max-body``), but not what they cost to read: 8 MiB of empty ``ResourceSpans``
(2 bytes each, 8 KB gzipped) are 4 million resources, and reading them held the event loop for seconds (the C reader
holds the GIL). So the body's top levels are counted first, each count stopping at its bound: a request past one is
refused whole (413, naming the bound) before anything of it is read. Real exporters group their data by resource and
scope (an SDK sends one ``ResourceSpans`` per resource), so the bounds are far past what they send.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Final

from ringtrace.collector.ingest.otlp.answers import BadRequest

__all__ = ["MAX_ITEMS", "MAX_RESOURCES", "MAX_SCOPES", "check_json_shape", "check_shape", "read_varint"]

#: Resource entries (``ResourceSpans``, ``ResourceLogs``, ``ResourceMetrics``) a request may hold.
MAX_RESOURCES: Final = 4096
#: Scope entries (``ScopeSpans``...) a request may hold, over all its resources.
MAX_SCOPES: Final = 16384
#: The fields of a ``Metric`` that hold its data points (gauge, sum, histogram, exponential histogram, summary).
_METRIC_DATA: Final = frozenset((5, 7, 9, 10, 11))
_METRIC_ITEMS: Final = "metrics and data points"
#: Items a request may hold (spans, log records; metrics and their data points together), over all its scopes: 8 MiB
#: of real spans are fewer than 200,000.
MAX_ITEMS: Final = 1 << 20


def check_shape(body: bytes, what: str) -> None:
    """Refuse the protobuf request in ``body`` if it holds more resources, scopes or items than the bounds allow (a
    metric and its data points are its items). What is not protobuf is left to the decoder to refuse (it says why).
    ``what``: the items' name (``spans``).

    Raises:
        BadRequest: 413, naming the bound passed.
    """
    view = memoryview(body)
    counts = _Counts()
    for resource in _entries(view, 0, len(view), 1, counts.resources):
        for scope in _entries(view, *resource, 2, counts.scopes):
            if what != "data points":
                for _ in _entries(view, *scope, 2, counts.item(what)):
                    pass
                continue
            for metric in _entries(view, *scope, 2, counts.item(_METRIC_ITEMS)):
                for data in _entries(view, *metric, _METRIC_DATA, None):
                    for _ in _entries(view, *data, 1, counts.item(_METRIC_ITEMS)):
                        pass


def check_json_shape(request: dict[str, Any], what: str) -> None:
    """``check_shape`` of an OTLP/JSON request (its lists counted as they are, a metric's data points among them)."""
    counts = [0, 0, 0]
    what = _METRIC_ITEMS if what == "data points" else what
    for resource in _listed(request.values(), counts, 0, MAX_RESOURCES, "resources"):
        for scope in _listed(resource.values(), counts, 1, MAX_SCOPES, "scopes"):
            items = _listed(scope.values(), counts, 2, MAX_ITEMS, what)
            if what == _METRIC_ITEMS:
                for data in (value for item in items for value in item.values() if isinstance(value, dict)):
                    _listed(data.values(), counts, 2, MAX_ITEMS, what)


def _listed(values: Iterable[object], counts: list[int], level: int, bound: int, name: str) -> list[dict[str, Any]]:
    """The maps in the lists among ``values``, counted at ``level``."""
    out: list[dict[str, Any]] = []
    for value in values:
        if isinstance(value, list):
            counts[level] += len(value)
            if counts[level] > bound:
                _refuse(bound, name)
            out += (item for item in value if isinstance(item, dict))
    return out


class _Counts:
    """The entries counted so far, each level refused past its bound."""

    def __init__(self) -> None:
        self.counted = {"resources": 0, "scopes": 0}

    def resources(self) -> None:
        self._count("resources", MAX_RESOURCES)

    def scopes(self) -> None:
        self._count("scopes", MAX_SCOPES)

    def item(self, what: str) -> Callable[[], None]:
        return functools.partial(self._count, what, MAX_ITEMS)

    def _count(self, name: str, bound: int) -> None:
        counted = self.counted[name] = self.counted.get(name, 0) + 1
        if counted > bound:
            _refuse(bound, name)


def _entries(view: memoryview, start: int, end: int, fields: int | frozenset[int], count: Callable[[], None] | None
             ) -> Iterator[tuple[int, int]]:  # fmt: skip
    """The (start, end) of each length-delimited entry of ``fields`` in ``view[start:end]``, each ``count``ed; stops
    at what is not protobuf."""
    wanted = frozenset((fields,)) if isinstance(fields, int) else fields
    at = start
    while at < end:
        key, at = read_varint(view, at, end)
        wire = -1 if key is None else key & 7
        if wire == 0:
            value, at = read_varint(view, at, end)
            if value is None:
                return
        elif wire == 1:
            at += 8
        elif wire == 5:
            at += 4
        elif wire == 2:
            size, at = read_varint(view, at, end)
            if size is None or at + size > end:
                return
            if key is not None and key >> 3 in wanted:
                if count is not None:
                    count()
                yield at, at + size
            at += size
        else:
            return


def read_varint(view: memoryview, at: int, end: int) -> tuple[int | None, int]:
    """The protobuf varint at ``at`` in ``view`` (before ``end``), and where it ends; None where it runs past ``end``
    or past 64 bits."""
    value = shift = 0
    while at < end and shift < 64:
        byte = view[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7
    return None, at


def _refuse(bound: int, name: str) -> None:
    raise BadRequest(413, f"the request holds more than {bound} {name}, the most one may hold: send fewer a request")
