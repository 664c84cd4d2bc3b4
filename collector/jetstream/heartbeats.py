"""Which processes are connected to the collectors of a stream, and at what rate: each collector's heartbeat.

The stream says what each process sent, not whether it is still connected, nor where. So each collector publishes,
every HEARTBEAT_INTERVAL_S, a small JSON record of its own (``Heartbeat``): its connections, and per process connected
to it (by the process's subject, ``subjects.py``) its connections and receive rate, on ``<STREAM>_collectors.<id>``,
the subject of a stream of its own (``heartbeat_stream``; the stream's replicas and storage) that keeps the newest
record of each collector for HEARTBEAT_MAX_AGE_S at most. A fleet's ``/sources`` reads them all (``Liveness``): a
process is connected if a live collector's record says so, its rate the sum of theirs. A collector that stops removes
its record; one that is killed is forgotten HEARTBEAT_MAX_AGE_S after its last.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
from collections.abc import Awaitable, Callable, Collection, Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from ringtrace.collector.jetstream.fleet import StoredMessage
from ringtrace.collector.jetstream.stream_readiness import publish_failure

__all__ = [
    "HEARTBEAT_INTERVAL_S",
    "HEARTBEAT_MAX_AGE_S",
    "Heartbeat",
    "Liveness",
    "ProcessLiveness",
    "beat_every",
    "heartbeat_stream",
]

log = logging.getLogger("ringtrace.collector.jetstream")

#: How often a collector publishes its heartbeat: what a fleet's ``/sources`` shows is at most this old.
HEARTBEAT_INTERVAL_S: Final = 1.0
#: How long the stream keeps a collector's newest heartbeat: one killed looks alive this long at most. Several
#: intervals, so that a heartbeat held up (a leader being elected, a loaded machine) shows no live process gone.
HEARTBEAT_MAX_AGE_S: Final = 10.0
#: How long one heartbeat waits for the stream's answer.
PUBLISH_TIMEOUT_S: Final = 2.0


def heartbeat_stream(stream: str) -> str:
    """The name of the stream of ``stream``'s collectors' heartbeats (and the first token of its subjects)."""
    return f"{stream}_collectors"


@dataclass(frozen=True, slots=True)
class ProcessLiveness:
    """A process as the heartbeats tell it: its connections, and its receive rate (events/s, bytes/s) if known."""

    connections: int = 0
    rate: tuple[float, float] | None = None


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """One collector's record: its connections, and per subject of a process connected to it, what it knows of it."""

    collector: str
    connections: int
    processes: dict[str, ProcessLiveness] = field(default_factory=dict)

    def encode(self, max_bytes: int) -> tuple[bytes, int]:
        """The heartbeat as JSON of at most ``max_bytes`` (a message's max payload), and how many of its processes
        did not fit (left out: they look gone to the other collectors)."""
        head = json.dumps({"collector": self.collector, "connections": self.connections}, separators=(",", ":"))
        entries: list[str] = []
        size = len(head) + len(',"processes":{}')
        for subject, process in self.processes.items():
            rate = process.rate if process.rate is not None else (None, None)
            entry = json.dumps({subject: [process.connections, *rate]}, separators=(",", ":"))[1:-1]
            size += len(entry.encode()) + 1
            if size > max_bytes:
                break
            entries.append(entry)
        text = f'{head[:-1]},"processes":{{{",".join(entries)}}}}}'
        return text.encode(), len(self.processes) - len(entries)

    @classmethod
    def read(cls, data: bytes) -> Heartbeat | None:
        """The heartbeat ``data`` holds; None for anything else (anyone may publish on the subjects)."""
        try:
            document = json.loads(data)
            collector, connections = document["collector"], _count(document["connections"])
            processes = {
                subject: ProcessLiveness(_count(n), None if events is None else (_rate(events), _rate(nbytes)))
                for subject, (n, events, nbytes) in document["processes"].items()
                if isinstance(subject, str)
            }
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError):  # (JSON nested past the stack)
            return None
        return cls(str(collector), connections, processes)


def _count(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 2**63:
        raise ValueError(value)
    return value


def _rate(value: Any) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or value < 0:
        raise ValueError(value)
    return float(value)


@dataclass(frozen=True, slots=True)
class Liveness:
    """The live collectors' heartbeats, merged."""

    heartbeats: tuple[Heartbeat, ...] = ()

    @classmethod
    def read(cls, messages: Iterable[StoredMessage]) -> Liveness:
        """The heartbeats among ``messages`` (the newest of each collector: its subject keeps one)."""
        found = (Heartbeat.read(message.data) for message in messages if message.data)
        return cls(tuple(heartbeat for heartbeat in found if heartbeat is not None))

    @property
    def collectors(self) -> int:
        return len(self.heartbeats)

    @property
    def connections(self) -> int:
        """Every live collector's client connections."""
        return sum(heartbeat.connections for heartbeat in self.heartbeats)

    def of(self, subjects: Collection[str]) -> ProcessLiveness:
        """The process whose subjects are ``subjects``, over every live collector: its connections and its rate,
        summed (None if no collector it is connected to knows its rate yet)."""
        connections, rate = 0, None
        for heartbeat in self.heartbeats:
            for subject in subjects:
                known = heartbeat.processes.get(subject)
                if known is None:
                    continue
                connections += known.connections
                if known.rate is not None:
                    rate = known.rate if rate is None else (rate[0] + known.rate[0], rate[1] + known.rate[1])
        return ProcessLiveness(connections, rate)


async def beat_every(publish: Callable[[], Awaitable[object]], failing: Callable[[str], object]) -> None:
    """Call ``publish`` (a coroutine function: one heartbeat) every HEARTBEAT_INTERVAL_S; a failure is logged once,
    and so is the next success (the other collectors show this one's processes gone meanwhile). Each beat tells
    ``failing`` why it failed, or "" once one goes through: the stream's readiness while no client sends."""
    failed = False
    while True:
        try:
            await asyncio.wait_for(publish(), PUBLISH_TIMEOUT_S)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if not failed:
                log.warning("cannot publish this collector's heartbeat (the other collectors show its processes "
                            "gone until one goes through): %s: %s", type(exc).__name__, exc)  # fmt: skip
            failed = True
            failing(publish_failure(exc, PUBLISH_TIMEOUT_S))
        else:
            if failed:
                log.info("this collector's heartbeat is published again")
            failed = False
            failing("")
        await asyncio.sleep(HEARTBEAT_INTERVAL_S)
