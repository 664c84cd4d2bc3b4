"""Waiting for what another thread, task or process brings about: the one way the tests poll.

A wait has an explicit, generous deadline (the suite runs on busy machines: a deadline is how long to wait before
calling it a failure, never how long something should take) and says, when it runs out, what it waited for and the
last value it saw.
"""

from __future__ import annotations

import asyncio
import inspect
import sys
import threading
import time
import traceback
from collections.abc import Awaitable, Callable
from typing import TypeVar

__all__ = ["NotWithin", "ringtrace_threads", "wait_for", "wait_for_async"]

T = TypeVar("T")


class NotWithin(AssertionError):
    """What was awaited did not come about within its deadline."""


def _not_within(what: str, timeout_s: float, last: object, explain: Callable[[], str] | None = None) -> NotWithin:
    said = f"not within {timeout_s} s: {what}; last seen: {last!r}"
    return NotWithin(said if explain is None else f"{said}\n{explain()}")


def wait_for(
    poll: Callable[[], T],
    *,
    timeout_s: float,
    what: str,
    until: Callable[[T], object] = bool,
    ignoring: tuple[type[BaseException], ...] = (),
    interval_s: float = 0.05,
    explain: Callable[[], str] | None = None,
) -> T:
    """Call ``poll`` until ``until`` accepts what it returns (by default: until it returns something true), and return
    that. Raises ``NotWithin`` after ``timeout_s``, naming ``what`` and the last value seen, and adding what
    ``explain`` says then (where the thread that should have acted was, say). ``ignoring``: exceptions ``poll`` may
    raise meanwhile (a server not listening yet), taken as "not yet"."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            value = poll()
        except ignoring as exc:
            last: object = exc
        else:
            if until(value):
                return value
            last = value
        if time.monotonic() > deadline:
            raise _not_within(what, timeout_s, last, explain)
        time.sleep(interval_s)


async def wait_for_async(
    poll: Callable[[], T | Awaitable[T]],
    *,
    timeout_s: float,
    what: str,
    until: Callable[[T], object] = bool,
    interval_s: float = 0.01,
) -> T:
    """``wait_for`` inside an event loop: ``poll`` (a function, or a coroutine function) runs on the loop, which runs
    other tasks between calls."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        value = poll()
        last: T = await value if inspect.isawaitable(value) else value  # type: ignore[assignment]
        if until(last):
            return last
        if loop.time() > deadline:
            raise _not_within(what, timeout_s, last)
        await asyncio.sleep(interval_s)


def ringtrace_threads() -> str:
    """Where each of ringtrace's threads of this process is (their stacks): what a wait for one of them to act (the
    flusher's sweep) ``explain``s when it runs out."""
    frames = sys._current_frames()
    said = []
    for thread in threading.enumerate():
        frame = frames.get(thread.ident or -1)
        if thread.name.startswith("ringtrace-") and frame is not None:
            said.append(f"{thread.name}:\n{''.join(traceback.format_stack(frame))}")
    return "\n".join(said) or "no ringtrace thread runs"
