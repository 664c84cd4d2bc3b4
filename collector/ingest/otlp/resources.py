"""What every OTLP signal shares: a resource is a process, and a request's data becomes records per lane of it.

A resource's process is named after its ``service.name`` (with ``host.name``, ``process.pid``); the same resource
sent again is the same process (the same service, host, pid and ``service.instance.id``, or a digest of its
attributes). A resource of an OS process a ringtrace client also records (the same ``host.name`` and ``process.pid``)
shows as that process, each one's tracks beside the other's (``store/processes.py``). Its timestamps are
wall-clock ns, so its stream pairs its clock with the wall clock one to one (HELLO ``recorded``: as sent, not checked
against the collector's clock).
"""

from __future__ import annotations

import functools
import hashlib
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from ringtrace.collector.ingest.otlp.trace_lanes import TraceLane, TraceSpan
from ringtrace.collector.store.processes import OTLP_CLIENT_PREFIX
from ringtrace.wire.arg_values import MAX_STRING_CHARS, display_text
from ringtrace.wire.handshake_frames import Hello
from ringtrace.wire.version import __version__

__all__ = [
    "MAX_SPAN_EVENTS",
    "MAX_TIME_NS",
    "Lane",
    "LogRecordValues",
    "ProcessEvents",
    "attributes_of",
    "late_time",
    "process_of",
    "text_of",
    "thread_of",
]

#: The latest OTLP time taken (2262-04-11T23:47:16Z): OTLP's times are uint64 ns, but what the store's reads and
#: exports show as wall-clock ns ends at 2^63 - 1 (``frame_walk.MAX_WALL_NS``: a frame with a later time is
#: undecodable, with every event in it, the valid ones sent beside it too): an item with a later time is refused.
MAX_TIME_NS: Final = 2**63 - 1

#: Events, and links, of a span kept at most (``--otlp-max-span-events``); those past it are dropped and counted (in the
#: process's ``rejected_events``, and said in ``partial_success``), the span stored. OpenTelemetry's SDKs keep 128 of
#: each by default; without a bound, a span of 8 MiB of events would be read into millions of objects.
MAX_SPAN_EVENTS: Final = 1000

#: Nesting of array and map attribute values kept (deeper ones become their text).
_MAX_VALUE_DEPTH: Final = 8

#: Where a record goes in its process: a thread (its id and name), a track of its own name (``logs``, ``metrics``),
#: or a lane of a trace (``trace_lanes.py``).
Lane = tuple[int, str] | str | TraceLane
#: A log record as a message: its lane, category (scope), priority, time, and values (``logs.py``).
LogRecordValues = tuple[Lane, str, str, int, tuple[Any, ...]]


@dataclass
class ProcessEvents:
    """One resource's data of a request: records per lane (``kind, label, start_ns, end_ns, args`` flat), spans to
    place on the lanes of their traces, log messages, how many items (spans, log records, data points) it came with,
    and those refused."""

    key: str
    hello: Hello
    records: dict[Lane, list[Any]] = field(default_factory=dict)
    trace_spans: list[TraceSpan] = field(default_factory=list)
    messages: list[LogRecordValues] = field(default_factory=list)
    items: int = 0
    rejected: int = 0
    #: Events and links of its spans past ``MAX_SPAN_EVENTS`` (or ``--otlp-max-span-events``), not kept: counted in
    #: its ``rejected_events``, its spans stored.
    dropped: int = 0
    #: Why the first refused item was (for ``partial_success``).
    why: str = ""

    def add(self, lane: Lane, *record: Any) -> None:
        self.records.setdefault(lane, []).extend(record)

    def reject(self, why: str) -> None:
        self.rejected += 1
        self.why = self.why or why


def late_time(what: str, **times: int) -> str | None:
    """Why ``what`` is refused if one of its ``times`` (by field name) is past ``MAX_TIME_NS``, else None."""
    for name, ns in times.items():
        if ns > MAX_TIME_NS:
            return f"{what}: {name} {ns} is past {MAX_TIME_NS} ns (2262-04-11T23:47:16Z, the latest time stored)"
    return None


def process_of(resource: Resource, processes: dict[str, ProcessEvents]) -> ProcessEvents:
    """The ``ProcessEvents`` of ``resource`` among ``processes`` (made and added if new)."""
    attributes = attributes_of(resource.attributes)
    name = text_of(attributes.get("service.name", "unknown_service"))
    host = text_of(attributes.get("host.name", ""))
    pid = attributes.get("process.pid", 0)
    pid = pid if type(pid) is int and 0 <= pid < 2**32 else 0
    instance = attributes.get("service.instance.id")
    if not isinstance(instance, str) or not instance:  # the same resource is the same process
        described = repr(sorted((key, repr(value)) for key, value in attributes.items())).encode()
        instance = hashlib.blake2b(described, digest_size=16).hexdigest()
    key = f"{name}\0{host}\0{pid}\0{instance}"
    process = processes.get(key)
    if process is None:
        sdk = " ".join(text_of(attributes.get(k, "")) for k in ("telemetry.sdk.language", "telemetry.sdk.version"))
        now = time.time_ns()
        hello = Hello(
            pid=pid,
            host=host,
            process_name=name,
            # What the collector knows the process by, with its host: the whole key, as one SDK process gives each
            # of its resources (services) the same service.instance.id, which alone would make them one process.
            instance_id=hashlib.blake2b(key.encode(errors="replace"), digest_size=16).hexdigest(),
            boot_id="",  # a clock domain of its own: wall-clock ns
            monotonic_ns=now,
            wall_ns=now,
            client_version=text_of(f"{OTLP_CLIENT_PREFIX}{sdk.strip()} (ringtrace {__version__})"),
            recorded=True,
        )
        process = processes[key] = ProcessEvents(key, hello)
    return process


def attributes_of(attributes: Iterable[KeyValue]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in attributes:  # (the common values inline: this runs for every span, log record and data point)
        value = kv.value
        which = value.WhichOneof("value")
        if which == "string_value":
            out[kv.key] = value.string_value
        elif which == "int_value":
            out[kv.key] = value.int_value
        else:
            out[kv.key] = _value(value)
    return out


@functools.lru_cache(maxsize=4096)
def _thread(thread_id: int, name: object) -> tuple[int, str]:
    return thread_id, text_of(f"thread {thread_id}" if name is None else name)


def thread_of(attributes: dict[str, Any]) -> tuple[int, str] | None:
    """The thread ``attributes`` name (``thread.id``, ``thread.name``, as OpenTelemetry's conventions call them)."""
    thread_id = attributes.get("thread.id")
    if type(thread_id) is not int or not 0 <= thread_id < 2**63:
        return None
    name = attributes.get("thread.name")
    return _thread(thread_id, name if type(name) is str else None if name is None else repr(name))


def text_of(value: object) -> str:
    """A HELLO or track text: printable, within the wire format's length."""
    return display_text(str(value))[:MAX_STRING_CHARS]


def _value(value: AnyValue, depth: int = 0) -> Any:
    """An attribute's value as a plain Python value."""
    which = value.WhichOneof("value")
    if which is None:
        return None
    if which in ("array_value", "kvlist_value") and depth == _MAX_VALUE_DEPTH:  # deeper: its text, in short
        return text_of(repr(_value(value, depth + 1)))  # (protobuf's parser bounds nesting at 100)
    if which == "array_value":
        return [_value(item, depth + 1) for item in value.array_value.values]
    if which == "kvlist_value":
        return {kv.key: _value(kv.value, depth + 1) for kv in value.kvlist_value.values}
    return getattr(value, which)


def value_of(value: AnyValue) -> Any:
    """A log body's value as a plain Python value."""
    return _value(value)
