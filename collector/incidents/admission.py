"""Which firings may become incidents at all: one whose event claims to be far in the future, or to last absurdly
long, would have its capture wait (or pin) for as long, holding a capture slot from every other rule. Such a firing is
refused and counted, saying why; a capture's wait is bounded by its rule's ``after`` in any case."""

from __future__ import annotations

from typing import Final

from ringtrace.collector.incidents.firing import Firing

__all__ = ["AFTER_SLACK_S", "MAX_AHEAD_NS", "MAX_DURATION_NS", "refusal"]

#: How far past the collector's clock a firing's event may start (clocks of a fleet differ, a little).
MAX_AHEAD_NS: Final = 60 * 10**9
#: How long a firing's event may last: longer is a bad timestamp, not a request.
MAX_DURATION_NS: Final = 24 * 3600 * 10**9
#: Beside ``after``, how long a capture waits at most from its firing (monotonic) for its window to end.
AFTER_SLACK_S: Final = 1.0


def refusal(firing: Firing, now_ns: int) -> str | None:
    """Why ``firing`` cannot become an incident at ``now_ns`` (wall-clock), or None if it may."""
    ahead_ns = max(firing.start_ns, firing.end_ns) - now_ns
    if ahead_ns > MAX_AHEAD_NS:
        return (
            f"its event is {ahead_ns / 1e9:.1f} s in the future (at most {MAX_AHEAD_NS // 10**9} s ahead of the "
            f"collector's clock): a bad timestamp or clock offset"
        )
    duration_ns = firing.end_ns - firing.start_ns
    if not 0 <= duration_ns <= MAX_DURATION_NS:
        return f"its event lasts {duration_ns / 1e9:.1f} s (0 to {MAX_DURATION_NS // 10**9} s allowed)"
    return None
