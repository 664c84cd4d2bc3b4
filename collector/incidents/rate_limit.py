"""Each rule held to its ``max_per_minute``: a sliding minute of the incidents it began (the rest are suppressed)."""

from __future__ import annotations

from collections import deque
from typing import Final

__all__ = ["MINUTE_NS", "RateLimit"]

MINUTE_NS: Final = 60 * 10**9


class RateLimit:
    """When each rule last began incidents, within the last minute (monotonic ns)."""

    __slots__ = ("_begun",)

    def __init__(self) -> None:
        self._begun: dict[str, deque[int]] = {}

    def take(self, rule: str, max_per_minute: int, now_ns: int) -> bool:
        """Whether ``rule`` may begin one more incident at ``now_ns`` (and count it begun if so)."""
        begun = self._begun.setdefault(rule, deque())
        while begun and begun[0] <= now_ns - MINUTE_NS:
            begun.popleft()
        if len(begun) >= max_per_minute:
            return False
        begun.append(now_ns)
        return True

    def keep_only(self, rules: set[str]) -> None:
        """Forget rules no longer in force (a reload); those kept keep their minute."""
        for name in set(self._begun) - rules:
            del self._begun[name]
