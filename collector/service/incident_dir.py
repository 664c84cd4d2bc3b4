"""Where the service keeps saved incidents (``--incidents-dir``; else ``DATA_DIR/incidents``, or a directory in the
system's temporary directory in memory mode) and their retention, as ``IncidentFiles``; with ``--jetstream``, in
JetStream's object store, which every collector on the stream shares (``IncidentObjects``)."""

from __future__ import annotations

import asyncio
import logging
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ringtrace.collector.incidents.incident_files import IncidentFiles, owned_by_me
from ringtrace.collector.incidents.incident_objects import IncidentObjects, bucket_name
from ringtrace.collector.incidents.incident_store import IncidentStore
from ringtrace.collector.service.config import CollectorConfig
from ringtrace.wire.errors import ConfigError

__all__ = ["close_incidents", "incident_files", "incidents_directory", "open_incidents"]

log = logging.getLogger("ringtrace.collector")


def incidents_directory(config: CollectorConfig) -> Path:
    """``--incidents-dir`` if given; else ``incidents`` in the data dir; else one of its own in the temporary
    directory, named for the HTTP port (or, for a port picked at start, this process)."""
    if config.incidents_dir is not None:
        return Path(config.incidents_dir)
    if config.data_dir is not None:
        return Path(config.data_dir) / "incidents"
    return Path(tempfile.gettempdir()) / f"ringtrace-incidents-{config.http_port or os.getpid()}"


def incident_files(config: CollectorConfig, jetstream: Callable[[], Any] | None = None) -> IncidentStore:
    """The incidents' store and their retention: with ``--jetstream``, the stream's bucket (``jetstream``: the
    tier's JetStream context, once connected); else the directory (made if missing).

    Raises:
        ConfigError: the directory cannot be made.
    """
    if config.jetstream and jetstream is not None:
        if config.incidents_dir is not None:
            log.warning("--incidents-dir %s is not used with --jetstream: incidents are kept in the fleet's bucket",
                        config.incidents_dir)  # fmt: skip
        return IncidentObjects(
            bucket_name(config.jetstream_stream),
            jetstream,
            replicas=config.jetstream_replicas,
            storage=config.jetstream_storage,
            max_count=config.incidents_max_count,
            max_bytes=config.incidents_max_bytes,
        )
    directory = incidents_directory(config)
    chosen = config.incidents_dir is not None or config.data_dir is not None  # (a default one: made when needed)
    if not chosen:  # (in the shared temporary directory: anyone could have made it first)
        try:
            owned_by_me(directory)
        except PermissionError as exc:
            raise ConfigError(f"{exc}: give --incidents-dir") from None
    try:
        return IncidentFiles(directory, config.incidents_max_count, config.incidents_max_bytes, make_now=chosen)
    except OSError as exc:
        raise ConfigError(
            f"--incidents-dir: cannot make {directory}: {exc.strerror or exc} (give a writable directory)"
        ) from None


async def open_incidents(files: IncidentStore) -> None:
    """Make the bucket (with ``--jetstream``; once the tier is connected), then say in one line where incidents are
    kept, how many, and how many are there already."""
    if isinstance(files, IncidentObjects):
        await files.open()
    try:
        there = f"{len(await asyncio.to_thread(files.records))} there now"
    except OSError as exc:  # (the bucket does not answer yet: each incident tries it again)
        there = f"cannot be listed now: {exc}"
    log.info("incidents: kept in %s (at most %d, %d bytes); %s", files.where, files.max_count, files.max_bytes, there)


def close_incidents(files: IncidentStore) -> None:
    """Let go of what the store holds locally (the bucket's cache of fetched snapshots)."""
    if isinstance(files, IncidentObjects):
        files.close()
