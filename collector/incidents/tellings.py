"""The webhooks told of saved incidents: the URL each incident's record names (its rule's ``url`` when it fired, so
that one settled after a restart is told too), each told by a task of its own (its retries hold no capture slot),
cancelled when the collector stops (a webhook still retrying is told no more: its record says saved)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ringtrace.collector.incidents.incident_store import IncidentStore
    from ringtrace.collector.incidents.webhook import WebhookOutcome  # (aiohttp: loaded with the first webhook)

__all__ = ["Tellings"]


class Tellings:
    """The webhooks being told, through ``notify`` (None: none is told); outcomes written into ``files``' records."""

    def __init__(
        self, files: IncidentStore, notify: Callable[[str, dict[str, Any]], Awaitable[WebhookOutcome]] | None
    ) -> None:
        self._files, self._notify = files, notify
        self._tasks: set[asyncio.Task[None]] = set()

    def tell(self, written: dict[str, Any]) -> None:
        """Tell the webhook the saved incident's record ``written`` names, if any."""
        webhook = written.get("webhook")
        url = webhook.get("url") if isinstance(webhook, dict) else None
        if not isinstance(url, str) or not url or self._notify is None:
            return
        from ringtrace.collector.incidents.webhook import tell  # (aiohttp: loaded with the first webhook)

        task = asyncio.create_task(tell(self._files, self._notify, url, written), name="webhook")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def cancel(self) -> set[asyncio.Task[None]]:
        """Cancel those still being told; returns them, to be waited for."""
        tasks = set(self._tasks)
        for task in tasks:
            task.cancel()
        return tasks
