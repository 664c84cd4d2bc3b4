"""A ``sys.monitoring`` tool id (Python 3.12 and later) for the pure-Python function tracer: ``take_tool`` takes a free
one of ``TOOL_IDS`` with the tracer's callbacks and turns their events on; ``free_tool`` turns them off and frees it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, Final

__all__ = ["TOOL_IDS", "TOOL_NAME", "free_tool", "take_tool"]

#: sys.monitoring tool ids tried, in order: never 0, 1 or 2 (the debugger's, coverage's and the profiler's).
TOOL_IDS: Final = (4, 3)
TOOL_NAME: Final = "ringtrace"

_monitoring: Any = getattr(sys, "monitoring", None)


def take_tool(callbacks: dict[int, Callable[..., Any]]) -> int:
    """Take a free tool id of ``TOOL_IDS`` for ``callbacks`` (event: callback), their events on; returns it.

    Raises:
        RuntimeError: none is free.
    """
    monitoring = _monitoring
    for tool in TOOL_IDS:
        if monitoring.get_tool(tool) is None:
            monitoring.use_tool_id(tool, TOOL_NAME)
            break
    else:
        taken = ", ".join(f"{tool}: {monitoring.get_tool(tool)!r}" for tool in TOOL_IDS)
        raise RuntimeError(f"function tracing needs a free sys.monitoring tool id of {TOOL_IDS}; taken ({taken})")
    for event, callback in callbacks.items():
        monitoring.register_callback(tool, event, callback)
    # Locations another tracer of this tool id turned off (DISABLE) are on again: this one's decide may differ.
    monitoring.restart_events()
    mask = 0
    for event in callbacks:
        mask |= event
    monitoring.set_events(tool, mask)
    return tool


def free_tool(tool: int) -> None:
    """Turn every event of ``tool`` off, its callbacks unregistered, and free it."""
    monitoring = _monitoring
    monitoring.set_events(tool, 0)
    for event in (1 << bit for bit in range(monitoring.events.C_RAISE.bit_length())):
        monitoring.register_callback(tool, event, None)
    monitoring.free_tool_id(tool)
