"""What the engine and the HTTP API need of saved incidents: ``IncidentFiles`` (a directory) or, with ``--jetstream``,
``IncidentObjects`` (JetStream's object store, shared by the fleet's collectors). Its methods block: callers on the
event loop run them on worker threads (``new_id`` only is called on the loop: it does no IO)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any, Protocol

__all__ = ["IncidentStore"]


class IncidentStore(Protocol):
    """Saved incidents, as ``incident_files.IncidentFiles`` documents each method."""

    #: Where they are kept, as the log and ``/stats`` say it.
    where: str
    max_count: int
    max_bytes: int
    #: Incidents removed by the retention since start.
    removed: int

    def new_id(self, rule: str, time_ns: int) -> str: ...

    def begin(self, record: dict[str, Any]) -> None: ...

    def save(self, record: dict[str, Any], chunks: Iterable[bytes]) -> dict[str, Any]: ...

    def fail(self, record: dict[str, Any], reason: str) -> dict[str, Any]: ...

    def amend(self, incident_id: str, fields: dict[str, Any]) -> dict[str, Any] | None: ...

    def pending(self) -> list[dict[str, Any]]: ...

    def records(self, *, pending: bool = False) -> list[dict[str, Any]]: ...

    def record(self, incident_id: str, *, pending: bool = False) -> dict[str, Any] | None: ...

    def snapshot_path(self, incident_id: str) -> Path | None: ...

    def delete(self, incident_id: str) -> bool: ...
