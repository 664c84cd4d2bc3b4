"""Greenlets under function tracing: each greenlet's open calls kept apart, so that its calls nest as made.

Greenlets (greenlet, and gevent and eventlet on it) share their thread, each with a Python stack of its own that a
switch suspends whole. To the one stack of open calls a tracer keeps per thread, the calls of two greenlets would
interleave, and the end of one greenlet's call would close the other's. So, once the program has imported greenlet
(never imported here: a finder first on ``sys.meta_path`` waits for it, as ``asyncio_watch.py`` does for asyncio),
``greenlet.settrace`` tells each switch and throw on that thread (a greenlet trace function is its thread's), and the
tracer puts the open calls of the greenlet switched to in place of those of the greenlet left (``switch_calls``),
kept here until it is switched to again, by the greenlet, held weakly. The tracer notes that the records from then on
are the greenlet's, as it notes an asyncio task's step: the drain puts each greenlet's calls on a lane of its thread
(``Tracks.call_tracks``), the main greenlet's on the thread's own track, so that a suspended greenlet's open calls
never overlap another's on one track. At stop, the calls still open in suspended greenlets end, as the threads' do.

A trace function set before is chained (called after, as it was). What fails here is logged, never raised into the
program (but a signal handler's exception, the program's own).
"""

from __future__ import annotations

import functools
import logging
import sys
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from ringtrace.client.functions.callback_errors import failed
from ringtrace.client.recording.import_watch import spec_with_loader

if TYPE_CHECKING:
    from importlib.machinery import ModuleSpec
    from types import ModuleType

__all__ = ["GreenletSwitches"]

log = logging.getLogger("ringtrace.client")

#: The package watched for: its ``settrace`` is there once it has run.
GREENLET: Final = "greenlet"


class GreenletSwitches:
    """Follows the greenlet switches of the thread that imported greenlet (or that starts, if imported before) for
    ``tracer`` (the C ``Tracer`` or ``PythonTracer``: their ``switch_calls`` and ``close_calls``), from ``start()``
    to ``stop()``."""

    def __init__(self, tracer: Any) -> None:
        self._tracer = tracer
        #: Each greenlet switched away from, by its id: [a weak reference to it, its open calls while it is suspended
        #: (None: it runs), what its records are noted as (``_lane``; None: the main greenlet's)].
        self._saved: dict[int, list[Any]] = {}
        self._previous: Any = None
        self._module: ModuleType | None = None
        self._on = False

    def start(self) -> None:
        self._on = True
        module = sys.modules.get(GREENLET)
        if _loaded(module):
            self._install(module)  # type: ignore[arg-type]
        elif not any(isinstance(finder, _GreenletWatch) for finder in sys.meta_path):
            sys.meta_path.insert(0, _GreenletWatch(self))

    def stop(self) -> None:
        """Follow switches no more; the calls still open in suspended greenlets end now."""
        self._on = False
        sys.meta_path[:] = [f for f in sys.meta_path if not (isinstance(f, _GreenletWatch) and f.switches is self)]
        module, self._module = self._module, None
        if module is not None:
            try:
                if module.gettrace() == self._on_switch:  # (on this thread; another's stays, and only chains)
                    module.settrace(self._previous)
            except Exception:
                log.warning("ringtrace: could not take back greenlet's trace function", exc_info=True)
        saved, self._saved = self._saved, {}
        for ref, calls, lane in saved.values():
            if calls is not None and ref() is not None:
                self._tracer.close_calls(calls, lane)

    def _install(self, module: ModuleType) -> None:
        """Greenlet has run (on this thread): follow its switches here."""
        if not self._on or self._module is not None:
            return
        try:
            self._previous = module.settrace(self._on_switch)
            self._module = module
        except Exception:  # (never into the program's import)
            log.warning("ringtrace: could not follow greenlet switches", exc_info=True)

    def _on_switch(self, event: str, args: Any) -> None:
        """greenlet's trace function: ``(origin, target)`` of a ``switch`` or ``throw`` (one Python call a switch:
        what it does is inlined here)."""
        if self._on and (event == "switch" or event == "throw"):
            try:
                origin, target = args
                saved = self._saved
                entry = saved.get(id(target))
                if entry is not None and entry[0]() is target:
                    calls, lane = entry[1], entry[2]
                    entry[1] = None
                else:
                    calls, lane = None, None if target.parent is None else _lane(target)
                left = self._tracer.switch_calls(calls, lane)
                if left is not None:
                    key = id(origin)
                    if origin.dead:
                        saved.pop(key, None)
                    else:
                        entry = saved.get(key)
                        if entry is None or entry[0]() is not origin:
                            ref = weakref.ref(origin, functools.partial(self._forget, key))
                            entry = saved[key] = [ref, None, None if origin.parent is None else _lane(origin)]
                        entry[1] = left
            except Exception as exc:
                failed(exc, f"a greenlet {event}")
        previous = self._previous
        if previous is not None:
            previous(event, args)

    def _forget(self, key: int, ref: weakref.ref[Any]) -> None:
        """A greenlet switched away from is gone (killed first if it was suspended: its calls ended then)."""
        entry = self._saved.get(key)
        if entry is not None and entry[0] is ref:
            del self._saved[key]


def _lane(greenlet: Any) -> weakref.ref[Any]:
    """What the tracer notes for the records of ``greenlet``: a weak reference to it, hashed while it lives (its hash
    is then kept: the drain groups records by it, and places them by it, when the greenlet may be gone). Notes must
    not keep a greenlet alive: one never resumed is killed as the program lets go of it (GreenletExit thrown in), and
    a greenlet held here would be killed later, elsewhere, or never. (One without a callback is the same object for
    as long as one is alive: the notes of a greenlet's records share it.)"""
    ref = weakref.ref(greenlet)
    hash(ref)
    return ref


def _loaded(module: ModuleType | None) -> bool:
    """Whether ``module`` has run to its end (a module being imported is in ``sys.modules`` already)."""
    return module is not None and not getattr(getattr(module, "__spec__", None), "_initializing", False)


class _GreenletWatch:
    """First on ``sys.meta_path`` until greenlet is imported: finds it with the finders after it, and wraps its loader
    to follow switches once it has run; every other import it lets by with one comparison."""

    def __init__(self, switches: GreenletSwitches) -> None:
        self.switches = switches

    def _ran(self, module: ModuleType) -> None:
        """greenlet has run: follow its switches (on the importing thread)."""
        sys.meta_path[:] = [finder for finder in sys.meta_path if finder is not self]
        self.switches._install(module)

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname != GREENLET:
            return None
        return spec_with_loader(self, fullname, path, target, self._ran)
