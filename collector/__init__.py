"""ringtrace collector: an asyncio daemon that keeps client streams in a bounded store and serves snapshots.

Needs the ``collector`` extra: ``pip install 'ringtrace[collector]'``.
"""

from __future__ import annotations

try:
    import aiohttp  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on how ringtrace was installed
    raise ImportError("ringtrace.collector needs aiohttp: pip install 'ringtrace[collector]'") from exc

from ringtrace.collector.service.app import Collector
from ringtrace.collector.service.config import CollectorConfig
from ringtrace.collector.store.ring import Store

__all__ = ["Collector", "CollectorConfig", "Store"]
