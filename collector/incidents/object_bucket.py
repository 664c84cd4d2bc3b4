"""The uses of an incidents' bucket (``incident_objects.py``), one coroutine each, run on the event loop: an
incident's object put with its record in a header, dropped, read; the bucket's objects listed; a record read back
from an object's header."""

from __future__ import annotations

import json
import logging
from typing import Any, Final

__all__ = [
    "PENDING",
    "RECORD_HEADER",
    "amend",
    "contents",
    "delete",
    "finish",
    "info_of",
    "infos",
    "put",
    "record_of",
    "why",
]

log = logging.getLogger("ringtrace.collector.incidents")

#: The header of an incident's object that holds its record (JSON).
RECORD_HEADER: Final = "Ringtrace-Record"
#: The name of an incident's object while its window is being collected.
PENDING: Final = ".pending"


async def put(store: Any, name: str, data: bytes, record: dict[str, Any]) -> None:
    from nats.js.api import ObjectMeta

    # (a header's values are a list, as NATS's other clients read them)
    headers = {RECORD_HEADER: [json.dumps(record, separators=(",", ":"))]}
    await store.put(name, data, meta=ObjectMeta(name=name, headers=headers))


async def finish(store: Any, incident_id: str, data: bytes, record: dict[str, Any]) -> None:
    """The finished incident put whole, then its pending object dropped."""
    await put(store, incident_id, data, record)
    await delete(store, incident_id + PENDING)


async def amend(store: Any, incident_id: str, fields: dict[str, Any]) -> dict[str, Any] | None:
    """The record of ``incident_id`` rewritten with ``fields`` in its object's header (its snapshot stays as it is);
    None if there is none."""
    from nats.js.api import ObjectMeta

    found = await info_of(store, incident_id)
    record = record_of(found, incident_id) if found is not None else None
    if record is None:
        return None
    amended = {**record, **fields}
    headers = {RECORD_HEADER: [json.dumps(amended, separators=(",", ":"))]}
    await store.update_meta(incident_id, ObjectMeta(name=incident_id, description=found.description, headers=headers))
    return amended


async def delete(store: Any, name: str) -> bool:
    from nats.js.errors import NotFoundError

    try:
        await store.delete(name)
    except NotFoundError:
        return False
    return True


async def info_of(store: Any, name: str) -> Any:
    from nats.js.errors import NotFoundError

    try:
        return await store.get_info(name)
    except NotFoundError:
        return None


async def contents(store: Any, name: str) -> bytes | None:
    from nats.js.errors import NotFoundError

    try:
        result = await store.get(name)
    except NotFoundError:
        return None
    return bytes(result.data)


async def infos(store: Any) -> list[Any]:
    from nats.js.errors import NotFoundError

    try:
        infos = await store.list(ignore_deletes=True)
    except NotFoundError:  # (an empty bucket)
        return []
    return [info for info in infos if not info.deleted and isinstance(info.name, str)]


def record_of(info: Any, incident_id: str) -> dict[str, Any] | None:
    """The record in an object's header; None (logged) if it has none that is one of ``incident_id``."""
    value = (info.headers or {}).get(RECORD_HEADER)
    text = value[0] if isinstance(value, list) and value else value
    try:
        record = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        record = None
    if not isinstance(record, dict) or record.get("id") != incident_id:
        log.debug("incident object %r skipped: no record of %r in its %s header", info.name, incident_id, RECORD_HEADER)
        return None
    return record


def why(exc: BaseException) -> str:
    text = str(exc) or getattr(exc, "description", "") or ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
