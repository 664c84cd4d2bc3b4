"""Where the service keeps saved incidents (``--incidents-dir``; else ``DATA_DIR/incidents``, or a directory in the
system's temporary directory in memory mode) and their retention, as ``IncidentFiles``."""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path

from ringtrace.collector.incidents.incident_files import IncidentFiles, owned_by_me
from ringtrace.collector.service.config import CollectorConfig
from ringtrace.wire.errors import ConfigError

__all__ = ["incident_files", "incidents_directory", "log_incidents"]

log = logging.getLogger("ringtrace.collector")


def incidents_directory(config: CollectorConfig) -> Path:
    """``--incidents-dir`` if given; else ``incidents`` in the data dir; else one of its own in the temporary
    directory, named for the HTTP port (or, for a port picked at start, this process)."""
    if config.incidents_dir is not None:
        return Path(config.incidents_dir)
    if config.data_dir is not None:
        return Path(config.data_dir) / "incidents"
    return Path(tempfile.gettempdir()) / f"ringtrace-incidents-{config.http_port or os.getpid()}"


def incident_files(config: CollectorConfig) -> IncidentFiles:
    """The incidents' directory (made if missing) and their retention.

    Raises:
        ConfigError: the directory cannot be made.
    """
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


def log_incidents(files: IncidentFiles) -> None:
    """One line at start: where incidents are kept, how many, and how many are there already."""
    log.info(
        "incidents: kept in %s (at most %d, %d bytes); %d there now",
        files.directory,
        files.max_count,
        files.max_bytes,
        len(files.records()),
    )
