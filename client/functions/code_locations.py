"""Which code a function tracer records, and at which index of the locations list its records give
(``PythonTracer``'s): ``decide`` asked when a code object is first met, and one index per location.

No lock is taken: this runs inside the tracer's callbacks, on every thread, and a callback must never wait for another
thread. What runs inside one (``decide``, and what the interpreter runs meanwhile: a garbage collection's callbacks,
finalisers) may wait for a lock a thread of the program holds; were that thread, meeting code of its own for the first
time, to wait for this one, neither would go on. Each step on the shared tables is one operation on a dict or a list,
which the interpreter lock makes atomic; two threads first meeting one code object at the same moment may each ask
``decide``, as with the C twin, and the index stored first is the one used.
"""

from __future__ import annotations

import logging
import types
import weakref
from collections.abc import Callable
from typing import Final

from ringtrace.client.functions.callback_errors import raised_by_a_signal_handler
from ringtrace.wire.stack_frames import CodeLocation

__all__ = ["CO_COROUTINE", "CodeLocations", "c_function_name", "is_c_function"]

#: ``inspect.CO_COROUTINE`` (not imported: inspect is slow to load): the code of an ``async def``.
CO_COROUTINE: Final = 0x80

log = logging.getLogger("ringtrace.client")

#: The callables traced as C functions: built-in functions and methods (bound or not), as the profile function tells.
C_TYPES = (types.BuiltinFunctionType, types.MethodDescriptorType)


def is_c_function(callable_: object) -> bool:
    """Whether a call of ``callable_`` is traced as a C function (with ``builtins``)."""
    return isinstance(callable_, C_TYPES)


def c_function_name(callable_: object) -> str:
    """A C function's name: ``module.qualname`` when its module is not ``builtins``, else its qualified name
    (``len``, ``list.append``, ``time.sleep``)."""
    qualname = getattr(callable_, "__qualname__", None) or getattr(callable_, "__name__", None) or repr(callable_)
    module = getattr(callable_, "__module__", None)
    if isinstance(module, str) and module and module != "builtins":
        return f"{module}.{qualname}"
    return str(qualname)


class CodeLocations:
    """``decide``'s answer and the location index of each code object met, and of each C function's name.

    Args:
        decide: ``decide(code, module)`` -> whether that code's calls are recorded (one that raises: False).
        locations: the process-wide list the records index; appended to once per location: code objects made anew
            with the same name, file and line (``exec`` of the same source, a class made in a loop) share one, so the
            list grows with the program's code, not with how often it is compiled. Those already there are reused.
    """

    def __init__(self, decide: Callable[[types.CodeType, str], bool], locations: list[CodeLocation]) -> None:
        self._decide = decide
        self.locations = locations
        #: id(code) -> (a weak reference that drops the entry with the code, its location index or -1: not recorded).
        self.codes: dict[int, tuple[weakref.ref[types.CodeType], int]] = {}
        #: The same for coroutine code recorded, kept out of ``codes``: a tracer's lookup there misses for it, so that
        #: only a coroutine's call takes the path that notes its asyncio task (``python_tracer.py``), for no cost to
        #: any other call.
        self.coroutines: dict[int, tuple[weakref.ref[types.CodeType], int]] = {}
        self._indexes: dict[CodeLocation, int] = {}
        for index, location in enumerate(locations):
            self._indexes.setdefault(location, index)

    def index_of(self, code: types.CodeType, frame: types.FrameType | None) -> int:
        """The location index of ``code`` (-1: not recorded), asking ``decide`` the first time it is met."""
        entry = self.codes.get(id(code)) or self.coroutines.get(id(code))
        if entry is not None:
            return entry[1]
        module = ""
        if frame is not None and frame.f_code is code:
            name = frame.f_globals.get("__name__")
            module = name if isinstance(name, str) else ""
        try:
            recorded = bool(self._decide(code, module))
        except Exception as exc:
            if raised_by_a_signal_handler(exc):
                raise  # (a signal handler's; decide is asked again next time)
            log.exception("ringtrace: the function filter failed for %s; its calls are not recorded", code.co_name)
            recorded = False
        index = -1
        if recorded:
            qualname = getattr(code, "co_qualname", code.co_name)
            index = self.location_index((qualname, code.co_filename, code.co_firstlineno))
        key = id(code)
        codes = self.coroutines if index >= 0 and code.co_flags & CO_COROUTINE else self.codes
        codes[key] = (weakref.ref(code, lambda _, key=key: codes.pop(key, None)), index)  # type: ignore[misc]
        return index

    def c_index_of(self, callable_: object) -> int:
        return self.location_index((c_function_name(callable_), "", 0))

    def location_index(self, location: CodeLocation) -> int:
        """The index of ``location`` in ``locations``, appended the first time. Two threads appending the same location
        at the same moment both use the index stored first (the other entry, equal, stays unused)."""
        index = self._indexes.get(location)
        if index is None:
            locations = self.locations
            appended_from = len(locations)
            locations.append(location)
            index = self._indexes.setdefault(location, locations.index(location, appended_from))
        return index
