"""ringtrace collector: an asyncio daemon that keeps client streams in a bounded store and serves snapshots.

Needs the ``collector`` extra: ``pip install 'ringtrace[collector]'``. The service is ``service.app.Collector``,
configured by ``service.config.CollectorConfig``; this package face imports nothing, so that a store, read or export
module loads no more than it needs.
"""
