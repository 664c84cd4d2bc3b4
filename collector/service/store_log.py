"""What the log says at start of how the store is set up, and of what its capacity holds."""

from __future__ import annotations

import logging
from typing import Final

from ringtrace.collector.service.config import CollectorConfig
from ringtrace.collector.store.ring import Store, table_charge_bound
from ringtrace.wire.stream_limits import Limits

__all__ = ["capacity_holds", "log_store"]

log = logging.getLogger("ringtrace.collector")

#: What one event takes in a segment, about (measured: a span with three args 36 bytes, a span or an instant without
#: args 13), to say what a capacity holds in events.
_STORED_EVENT_BYTES: Final = 32


def log_store(config: CollectorConfig, store: Store, limits: Limits, where: str, option: str) -> None:
    """One line saying how the store is set up (``where`` its segments are kept), and a warning for each setting that
    does not do what it seems to; then what its capacity (the ``option`` that sets it) holds."""
    log.info(
        "store: capacity %d bytes (%d per process), policy %s, %s; segments up to %d bytes; max frame %d bytes",
        store.capacity_bytes,
        store.process_capacity_bytes,
        store.policy,
        where,
        store.segment_bytes,
        limits.max_frame_bytes,
    )
    if config.data_dir is None and config.fsync != "never":
        log.warning("--fsync %s does nothing without --data-dir: everything stays in memory", config.fsync)
    log.info("%s", capacity_holds(store.capacity_bytes, table_charge_bound(limits), option))


def capacity_holds(capacity_bytes: int, most_table_bytes: int, option: str = "--capacity") -> str:
    """What the store's ``option`` (``--capacity``; ``--jetstream-buffer``) holds, in events and in processes' tables
    (each connection's count against it, up to ``most_table_bytes`` at the table limits, all together up to half of
    it: ``Budget.table_room``), and what to do if that is too little: one line, for the log at start. A process whose
    tables do not fit is refused, and both sides say so then (``ingest/connection.py``)."""
    at_limits = capacity_bytes // 2 // most_table_bytes
    such = f"room for {at_limits:,} such" if at_limits else "a process whose tables do not fit is refused, and says so"
    events = _rounded(capacity_bytes // _STORED_EVENT_BYTES)
    return (
        f"{option.removeprefix('--')} {_mib(capacity_bytes)} holds about {events:,} events "
        f"(~{_STORED_EVENT_BYTES} bytes each) less each connected process's string and track tables (a few KiB for "
        f"most, up to {_mib(most_table_bytes)} at the table limits; all together at most half of it: "
        f"{such}); for more, raise {option}"
    )


def _rounded(count: int) -> int:
    """``count`` to two significant digits: an estimate says no more."""
    digits = max(len(str(count)) - 2, 0)
    return round(count, -digits)


def _mib(nbytes: int) -> str:
    return f"{nbytes / 2**20:,.1f} MiB"
