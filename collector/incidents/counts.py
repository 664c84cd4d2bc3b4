"""What the incidents did since start, per rule: what ``/metrics`` and ``/stats`` show (the engine counts, the HTTP
API reads)."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["IncidentCounts"]


@dataclass(slots=True)
class IncidentCounts:
    """Incidents since start, each count by rule name."""

    #: Rules that fired and were within their limit (each became an incident).
    fired: dict[str, int] = field(default_factory=dict)
    #: Incidents written whole.
    saved: dict[str, int] = field(default_factory=dict)
    #: Firings beyond a rule's ``max_per_minute`` (no incident).
    suppressed: dict[str, int] = field(default_factory=dict)
    #: Incidents that could not be written (their record says why).
    failed: dict[str, int] = field(default_factory=dict)
    #: Saved incidents removed by the retention (``--incidents-max-count``, ``--incidents-max-bytes``): what
    #: ``IncidentFiles.removed`` says when the counts are read (the engine need not count it).
    removed: int = 0

    def add(self, counts: dict[str, int], rule: str, n: int = 1) -> None:
        """Count ``n`` more of ``rule`` in ``counts`` (one of the fields above)."""
        counts[rule] = counts.get(rule, 0) + n

    def add_all(self, counts: dict[str, int], more: dict[str, int]) -> None:
        """Count ``more`` (per rule) in ``counts``."""
        for rule, n in more.items():
            self.add(counts, rule, n)
