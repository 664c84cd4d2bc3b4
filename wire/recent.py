"""A bounded map of the entries put lately, for caches that threads share (the collector's snapshot readers and its
event loop decode the same SCHEMA bodies; a program's threads end spans elsewhere).

Evicting from a dict with a bare ``del d[next(iter(d))]`` is not safe there: two threads may both pick the same
oldest key, and the second ``del`` raises ``KeyError``; another thread may add a key between ``iter`` and ``next``,
and ``next`` raises ``RuntimeError`` (the dict changed size during iteration). Here each of those is taken as another
thread having evicted first: the eviction stops, and the map is back within its size at the next ``put``. A plain
dict, not an ``OrderedDict``: its operations stay whole on free-threaded builds too (the client's pure-Python
recorder runs there), where an ``OrderedDict`` shared without a lock is not safe before CPython 3.14. No lock:
nothing a fork could leave held.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Generic, TypeVar

__all__ = ["Recent"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Recent(Generic[K, V]):
    """The last ``size`` entries put, by key; the oldest is forgotten first. Safe for threads to share."""

    __slots__ = ("_entries", "size")

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"Recent: size must be at least 1, got {size}")
        self.size = size
        self._entries: dict[K, V] = {}

    def get(self, key: K, default: V | None = None) -> V | None:
        return self._entries.get(key, default)

    def put(self, key: K, value: V) -> None:
        """Remember ``value`` for ``key`` (a new key as the newest), forgetting the oldest past ``size``."""
        entries = self._entries
        entries[key] = value
        while len(entries) > self.size:
            try:
                del entries[next(iter(entries))]
            except (KeyError, RuntimeError, StopIteration):  # another thread evicted, or put, meanwhile
                break

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def values(self) -> list[V]:
        """The values, as a copy made in one call (another thread's ``put`` cannot change it midway)."""
        return list(self._entries.values())

    def __len__(self) -> int:
        return len(self._entries)
