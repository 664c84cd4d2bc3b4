"""The optional C recorder, ``_speedups`` (built from ``speedups/``): the recording hot path.

``speedups`` is the module, or None when it was not built or the environment asks for pure Python
(``ringtrace.wire.optional_c``); it is not used without the wire package's C packer either, whose Keywords type it
takes at import (the encoder's inner loop: ``ringtrace.wire.event_packing``). Either way ringtrace behaves the same:
the pure-Python code in ``recorder.py`` defines the behaviour, and the C code is held to it by tests.
"""

from __future__ import annotations

from ringtrace.wire.optional_c import load_optional

__all__ = ["speedups"]

speedups = load_optional("ringtrace.client._speedups")
