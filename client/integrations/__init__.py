"""Library integrations: what ``ringtrace run`` and ``RINGTRACE_AUTO=1`` record with no change to the program's code.

``registry.py`` lists them and applies each once the program imports its library.
"""

from __future__ import annotations

from ringtrace.client.integrations.registry import INTEGRATIONS, Integration, applied, apply, failed

__all__ = ["INTEGRATIONS", "Integration", "applied", "apply", "failed"]
