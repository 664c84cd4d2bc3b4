"""The optional C accelerator, ``_speedups`` (from ``speedups/``): the recording hot path and the encoder's inner loop.

``speedups`` is the module, or None when it was not built or the environment asks for pure Python
(``ringtrace.wire.optional_c``). Either way ringtrace behaves the same: the pure-Python code in ``recorder.py`` and
``encoder.py`` defines the behaviour, and the C code is held to it by tests.
"""

from __future__ import annotations

from ringtrace.wire.optional_c import load_optional

__all__ = ["speedups"]

speedups = load_optional("ringtrace.client._speedups")
