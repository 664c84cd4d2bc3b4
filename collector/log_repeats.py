"""Log lines that could repeat without bound (refused peers: a misconfigured fleet, a scanner, a crowd of clients past
``--max-connections``): each key is logged at once the first time, then at most once per ``REPEAT_LOG_INTERVAL_S``
with the count of the lines not logged meanwhile."""

from __future__ import annotations

import time
from collections.abc import Hashable
from typing import Final

from ringtrace.wire.recent import Recent

__all__ = ["REPEAT_LOG_INTERVAL_S", "Repeats"]

#: A key is logged at most this often.
REPEAT_LOG_INTERVAL_S: Final = 60.0
#: Keys remembered at most (the oldest are forgotten first).
_REMEMBERED: Final = 4096


class Repeats:
    """When each key was last logged, and how many of its lines were not logged since."""

    def __init__(self) -> None:
        self._logged: Recent[Hashable, list[float]] = Recent(_REMEMBERED)

    def due(self, key: Hashable) -> int | None:
        """None when the line of ``key`` is not to be logged now (it is counted); else how many were not logged since
        the last one (0 the first time)."""
        now = time.monotonic()
        seen = self._logged.get(key)
        if seen is not None and now - seen[0] < REPEAT_LOG_INTERVAL_S:
            seen[1] += 1
            return None
        self._logged.put(key, [now, 0])
        return int(seen[1]) if seen is not None else 0

    def recent(self, key: Hashable) -> bool:
        """Whether the line of ``key`` was logged less than ``REPEAT_LOG_INTERVAL_S`` ago (nothing is counted)."""
        seen = self._logged.get(key)
        return seen is not None and time.monotonic() - seen[0] < REPEAT_LOG_INTERVAL_S

    @staticmethod
    def since(unlogged: int, what: str) -> str:
        """The words that end a line logged after ``unlogged`` were not: ``what`` names them."""
        return f"; {unlogged} more {what} in the last {REPEAT_LOG_INTERVAL_S:.0f}s" if unlogged else ""
