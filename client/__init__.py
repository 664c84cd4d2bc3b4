"""ringtrace client: record spans, instants, typed events, messages, markers, source activity and counters in any
Python process, and stream them to a collector.

    import ringtrace.client

    tl = ringtrace.client.connect("127.0.0.1:7700", process_name="worker")
    with tl.scope("load", path="a.csv"):
        ...
    tl.instant("cache-miss", key="a")

Only msgpack is needed. Recording never raises into or blocks the program; events that cannot be delivered are
dropped and counted, and the counts reach the collector. Events go from timelines to listeners: ``connect`` attaches
a collector ``Streamer`` to the process-wide timeline; ``FileListener`` and ``MemoryListener`` are the others.
"""

from __future__ import annotations

from ringtrace.client.connecting import connect, default_timeline, timeline
from ringtrace.client.delivery.listeners import (
    FileListener,
    MemoryListener,
    ObjectListener,
    SerializedListener,
    TraceFile,
    read_trace_file,
    read_trace_streams,
)
from ringtrace.client.delivery.streaming.streamer import Streamer
from ringtrace.client.functions import FunctionTracing, trace_functions
from ringtrace.client.options import StreamerOptions
from ringtrace.client.recording.events import (
    Event,
    InvalidField,
    binary,
    boolean,
    f32,
    f64,
    i8,
    i16,
    i32,
    i64,
    ptr,
    string,
    u8,
    u16,
    u32,
    u64,
)
from ringtrace.client.recording.messages import Message
from ringtrace.client.recording.sources import Source
from ringtrace.client.recording.timelines import Listener, MarkerScope, Scope, Timeline
from ringtrace.client.recording.trace_context import TraceScope, current_span, extract, inject
from ringtrace.client.recording.traced import traced
from ringtrace.client.recording.traceparent import SpanContext
from ringtrace.wire.errors import (
    BadPreamble,
    ConfigError,
    FrameTooLarge,
    LimitExceeded,
    MalformedFrame,
    ProtocolError,
    RingtraceError,
    TornStream,
    UnexpectedFrame,
    UnsupportedVersion,
)
from ringtrace.wire.message_format import PRIORITIES
from ringtrace.wire.model import DecodedEvent, TrackInfo
from ringtrace.wire.stream_limits import Limits
from ringtrace.wire.version import __version__

__all__ = [
    "PRIORITIES",
    "BadPreamble",
    "ConfigError",
    "DecodedEvent",
    "Event",
    "FileListener",
    "FrameTooLarge",
    "FunctionTracing",
    "InvalidField",
    "LimitExceeded",
    "Limits",
    "Listener",
    "MalformedFrame",
    "MarkerScope",
    "MemoryListener",
    "Message",
    "ObjectListener",
    "ProtocolError",
    "RingtraceError",
    "Scope",
    "SerializedListener",
    "Source",
    "SpanContext",
    "Streamer",
    "StreamerOptions",
    "Timeline",
    "TornStream",
    "TraceFile",
    "TraceScope",
    "TrackInfo",
    "UnexpectedFrame",
    "UnsupportedVersion",
    "__version__",
    "binary",
    "boolean",
    "connect",
    "current_span",
    "default_timeline",
    "extract",
    "f32",
    "f64",
    "i8",
    "i16",
    "i32",
    "i64",
    "inject",
    "ptr",
    "read_trace_file",
    "read_trace_streams",
    "string",
    "timeline",
    "trace_functions",
    "traced",
    "u8",
    "u16",
    "u32",
    "u64",
]
