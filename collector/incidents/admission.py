"""Which firings may become incidents: not one whose event claims to be far in the future, or to last absurdly long
(its capture would wait, or pin, for as long, holding a capture slot from every other rule: ``refused``); nor one past
the bound on captures under way (``busy``), checked before its rule's ``max_per_minute`` so that a busy firing takes
no slot of the minute. Each one turned away is counted suppressed, and said why (a rule's limit aside: it is the
rule's own). A capture's wait is bounded by its rule's ``after`` in any case (``AFTER_SLACK_S``)."""

from __future__ import annotations

import logging
import time
from typing import Final

from ringtrace.collector.incidents.counts import IncidentCounts
from ringtrace.collector.incidents.firing import Firing
from ringtrace.collector.incidents.rate_limit import RateLimit
from ringtrace.collector.incidents.rules import Rule

__all__ = ["AFTER_SLACK_S", "MAX_AHEAD_NS", "MAX_DURATION_NS", "Admission", "refusal", "refusal_of"]

log = logging.getLogger("ringtrace.collector")

#: How far past the collector's clock a firing's event may start (clocks of a fleet differ, a little).
MAX_AHEAD_NS: Final = 60 * 10**9
#: How long a firing's event may last: longer is a bad timestamp, not a request.
MAX_DURATION_NS: Final = 24 * 3600 * 10**9
#: Beside ``after``, how long a capture waits at most from its firing (monotonic) for its window to end.
AFTER_SLACK_S: Final = 1.0


def refusal(firing: Firing, now_ns: int) -> str | None:
    """Why ``firing`` cannot become an incident at ``now_ns`` (wall-clock), or None if it may."""
    return refusal_of(firing.start_ns, firing.end_ns, now_ns)


def refusal_of(start_ns: int, end_ns: int, now_ns: int) -> str | None:
    """``refusal`` of a firing whose event starts and ends then."""
    ahead_ns = max(start_ns, end_ns) - now_ns
    if ahead_ns > MAX_AHEAD_NS:
        return (
            f"its event is {ahead_ns / 1e9:.1f} s in the future (at most {MAX_AHEAD_NS // 10**9} s ahead of the "
            f"collector's clock): a bad timestamp or clock offset"
        )
    duration_ns = end_ns - start_ns
    if not 0 <= duration_ns <= MAX_DURATION_NS:
        return f"its event lasts {duration_ns / 1e9:.1f} s (0 to {MAX_DURATION_NS // 10**9} s allowed)"
    return None


class Admission:
    """The engine's gate: whether a firing may begin an incident now, each one turned away counted in ``counts``.

    Args:
        counts: where suppressed firings are counted (per rule).
        max_captures: captures under way at once, at most.
    """

    def __init__(self, counts: IncidentCounts, max_captures: int) -> None:
        self.counts, self.max_captures = counts, max_captures
        self.limit = RateLimit()
        #: Firings suppressed because ``max_captures`` were under way (also in ``counts.suppressed``).
        self.busy = 0
        #: Firings refused for their event's times (``refusal``; also in ``counts.suppressed``).
        self.refused = 0

    def admit(self, firing: Firing, rule: Rule, under_way: int) -> bool:
        """Whether ``firing`` of ``rule`` may begin an incident while ``under_way`` captures are (it takes a slot
        of its rule's minute if so)."""
        counts = self.counts
        why = refusal(firing, time.time_ns())
        if why is not None:
            counts.add(counts.suppressed, rule.name)
            self.refused += 1
            log.warning("incidents: rule %r refused a firing: %s", rule.name, why)
            return False
        if under_way >= self.max_captures:
            counts.add(counts.suppressed, rule.name)
            self.busy += 1
            log.warning("incidents: rule %r suppressed (busy: %d captures under way)", rule.name, self.max_captures)
            return False
        if not self.limit.take(rule.name, rule.max_per_minute, time.monotonic_ns()):
            counts.add(counts.suppressed, rule.name)
            return False
        return True
