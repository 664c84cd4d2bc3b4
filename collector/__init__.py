"""ringtrace collector: an asyncio daemon that keeps client streams in a bounded store and serves snapshots.

Needs the ``collector`` extra: ``pip install 'ringtrace[collector]'``.
"""

from __future__ import annotations

try:
    import aiohttp  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on how ringtrace was installed
    raise ImportError("ringtrace.collector needs aiohttp: pip install 'ringtrace[collector]'") from exc

from .app import Collector
from .config import CollectorConfig
from .store import Store

__all__ = ["Collector", "CollectorConfig", "Store"]
