"""A rule's webhook: its URL told of each incident (the record as a JSON POST), retried with backoff, each attempt
bounded by a timeout. It never raises: what happened is said in a line, and returned for the record's ``webhook``."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final, NamedTuple

import aiohttp
import orjson

if TYPE_CHECKING:
    from ringtrace.collector.incidents.incident_store import IncidentStore

__all__ = ["DELIVERED", "WebhookOutcome", "notify", "tell"]

log = logging.getLogger("ringtrace.collector.incidents")

#: What ``notify`` says of a POST its URL took (a 2xx answer).
DELIVERED: Final = "delivered"
#: Statuses worth another attempt: the server may be over the trouble soon.
_RETRIED: Final = frozenset({408, 425, 429, 500, 502, 503, 504})


class WebhookOutcome(NamedTuple):
    """What became of a webhook's POST: ``DELIVERED`` or ``failed: ...``, after how many attempts."""

    status: str
    attempts: int

    @property
    def delivered(self) -> bool:
        return self.status == DELIVERED


async def notify(
    session: aiohttp.ClientSession,
    url: str,
    record: dict[str, Any],
    *,
    timeout_s: float = 5.0,
    attempts: int = 3,
    backoff_s: float = 0.5,
) -> WebhookOutcome:
    """POST ``record`` as JSON to ``url``, up to ``attempts`` times while it fails (no answer within ``timeout_s``,
    no connection, a 5xx, 408 or 429), waiting ``backoff_s``, then twice as long, and so on between attempts.

    Returns:
        ``"delivered"``, or ``"failed: ..."`` naming the last status or error and the attempts made; and how many
        attempts were made.
    """
    body = orjson.dumps(record)
    headers = {"Content-Type": "application/json"}
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    outcome = "failed: no attempt made"
    made = 0
    for attempt in range(max(attempts, 1)):
        if attempt:
            await asyncio.sleep(backoff_s * 2 ** (attempt - 1))
        made += 1
        try:
            async with session.post(url, data=body, headers=headers, timeout=timeout) as response:
                await response.read()
                if 200 <= response.status < 300:
                    return WebhookOutcome(DELIVERED, made)
                outcome = f"HTTP {response.status} {response.reason or ''}".rstrip()
                if response.status not in _RETRIED:
                    break
        except TimeoutError:
            outcome = f"no answer within {timeout_s:g}s"
        except aiohttp.InvalidURL:
            outcome = "not a URL it can POST to"
            break
        except (aiohttp.ClientError, OSError, ValueError) as exc:
            outcome = f"{type(exc).__name__}: {exc}"
        except Exception as exc:  # a webhook never breaks the collector
            log.exception("webhook %s: unexpected error", url)
            outcome = f"{type(exc).__name__}: {exc}"
            break
    said = f"failed: {outcome} ({made} attempt{'s' if made != 1 else ''})"  # (logged by the caller, once)
    return WebhookOutcome(said, made)


async def tell(
    files: IncidentStore,
    notify: Callable[[str, dict[str, Any]], Awaitable[WebhookOutcome]],
    url: str,
    written: dict[str, Any],
) -> None:
    """Tell ``url`` of the saved incident ``written``; its outcome is logged and written into the record."""
    outcome = await notify(url, written)
    log.log(logging.INFO if outcome.delivered else logging.WARNING,
            "incident %s: webhook %s: %s", written["id"], url, outcome.status)  # fmt: skip
    told = {"webhook": {"url": url, "status": outcome.status, "attempts": outcome.attempts}}
    try:
        await asyncio.to_thread(files.amend, written["id"], told)
    except OSError as exc:  # (the incident stays saved: only what its webhook answered is not in its record)
        log.warning("incident %s: its webhook's outcome not written into its record: %s", written["id"], exc)
