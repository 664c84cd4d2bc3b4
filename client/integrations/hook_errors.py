"""What an integration's hook does when it fails inside: counts the failure, says it once, and lets the program go on.

A hook runs inside the program (a log call, an uncaught exception, a garbage collection): whatever goes wrong in
ringtrace's part of it is caught, counted here per integration, and logged once on the ``ringtrace.client`` logger;
the program's own part of the hook then runs as it would without ringtrace.
"""

from __future__ import annotations

import logging
import os
import threading

__all__ = ["count_failure", "hook_failures"]

_log = logging.getLogger("ringtrace.client")
_lock = threading.Lock()
#: Integration name -> failures inside its hooks so far.
_counts: dict[str, int] = {}


def count_failure(integration: str, exc: BaseException) -> None:
    """Count a failure inside a hook of ``integration``; the first one is logged. Never raises."""
    try:
        with _lock:
            count = _counts[integration] = _counts.get(integration, 0) + 1
        if count == 1:
            _log.warning("ringtrace: the %s integration failed inside a hook (said once): %r", integration, exc)
    except Exception:  # logging itself failed: nothing more to do that would not risk the program
        pass


def hook_failures() -> dict[str, int]:
    """Integration name -> failures inside its hooks so far."""
    with _lock:
        return dict(_counts)


def _fresh_lock() -> None:
    """In a forked child: a lock another thread of the parent held at the fork would never be released."""
    global _lock
    _lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_fresh_lock)
