"""``@traced``: a span around every call of a function, a coroutine function, or a generator function.

    @ringtrace.client.recording.traced
    def load(path): ...                       # label: the function's qualified name

    @ringtrace.client.recording.traced("db query", timeline=mine)
    async def query(sql): ...

A span covers the whole call (with the C accelerator, a plain function's is recorded from C around it): for a
coroutine function, from the first ``await`` of the coroutine to its return; for
a generator, from the first ``next()`` to exhaustion or close, measured as one span (its time suspended included, as
Python's profilers show a generator frame). An exception ends the span and its type is recorded, as ``scope`` does.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import AsyncGenerator, Callable, Generator
from typing import Any, TypeVar, overload

from ringtrace.client.accelerator import speedups
from ringtrace.client.recording.timelines import DEFAULT_TIMELINE, Timeline

__all__ = ["traced"]

F = TypeVar("F", bound=Callable[..., Any])


@overload
def traced(function: F, /) -> F: ...


@overload
def traced(label: str | None = None, /, *, timeline: Timeline | None = None) -> Callable[[F], F]: ...


def traced(target: Any = None, /, *, timeline: Timeline | None = None) -> Any:
    """Record a span named ``label`` (default: the function's qualified name) around each call.

    Args:
        target: the function (``@traced``) or the label (``@traced("label")``).
        timeline: where to record; defaults to the process-wide timeline.
    """
    if callable(target):
        return _decorate(target, None, timeline)
    if target is not None and not isinstance(target, str):
        raise TypeError(f"traced() takes a function or a label (str), got {type(target).__name__}")
    return lambda function: _decorate(function, target, timeline)


def _decorate(function: Callable[..., Any], label: str | None, timeline: Timeline | None) -> Any:
    name = label if label is not None else getattr(function, "__qualname__", repr(function))

    def current() -> Timeline:
        return timeline if timeline is not None else DEFAULT_TIMELINE

    if inspect.isasyncgenfunction(function):

        @functools.wraps(function)
        async def async_generator(*args: Any, **kwargs: Any) -> AsyncGenerator[Any, Any]:
            with current().scope(name):
                async for item in function(*args, **kwargs):
                    yield item

        return async_generator

    if inspect.iscoroutinefunction(function):

        @functools.wraps(function)
        async def coroutine(*args: Any, **kwargs: Any) -> Any:
            with current().scope(name):
                return await function(*args, **kwargs)

        return coroutine

    if inspect.isgeneratorfunction(function):

        @functools.wraps(function)
        def generator(*args: Any, **kwargs: Any) -> Generator[Any, Any, Any]:
            with current().scope(name):
                return (yield from function(*args, **kwargs))

        return generator

    if speedups is not None:  # the same span, recorded from C around the call: no frame, no Scope, no with
        wrapper = speedups.Traced(function, name, current())
        return functools.update_wrapper(wrapper, function)

    @functools.wraps(function)
    def call(*args: Any, **kwargs: Any) -> Any:
        with current().scope(name):
            return function(*args, **kwargs)

    return call
