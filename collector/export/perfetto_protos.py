"""Perfetto's protos as the Perfetto export writes them: the keys and values of the fields it uses, and a packet of the
trace's own sequence (``trace_packet``)."""

from __future__ import annotations

from typing import Final

from ringtrace.collector.export import protobuf as pb

__all__ = [
    "ANNOTATION_NAME",
    "ANNOTATION_NAME_IID",
    "ARRAY_VALUES",
    "ATTRIBUTE",
    "ATTRIBUTE_KEY",
    "ATTRIBUTE_STRING_VALUE",
    "BOOL_VALUE",
    "BUILTIN_CLOCK_BOOTTIME",
    "BUILTIN_CLOCK_REALTIME",
    "CATEGORIES",
    "CATEGORY_IIDS",
    "CLOCKS",
    "CLOCK_ID",
    "CLOCK_SNAPSHOT",
    "CLOCK_TIMESTAMP",
    "COUNTER",
    "COUNTER_VALUE",
    "DEBUG_ANNOTATIONS",
    "DEBUG_ANNOTATION_NAMES",
    "DICT_ENTRIES",
    "DOUBLE_COUNTER_VALUE",
    "DOUBLE_VALUE",
    "EVENT_CATEGORIES",
    "EVENT_NAMES",
    "FLOW_IDS",
    "INT64",
    "INTERNED_DATA",
    "INT_VALUE",
    "LEGACY_JSON_VALUE",
    "LONG_VALUE",
    "NAME",
    "NAME_IID",
    "ON_TRACE_SEQUENCE",
    "PACKET",
    "PARENT_UUID",
    "PID",
    "PRIMARY_TRACE_CLOCK",
    "PROCESS",
    "PROCESS_LABELS",
    "PROCESS_NAME",
    "PROCESS_ORDERING",
    "PROCESS_ORDERING_EXPLICIT",
    "SEQUENCE_FLAGS",
    "SEQ_INCREMENTAL_STATE_CLEARED",
    "SEQ_NEEDS_INCREMENTAL_STATE",
    "SIBLING_MERGE_BEHAVIOR",
    "SIBLING_MERGE_BEHAVIOR_NONE",
    "SIBLING_ORDER_RANK",
    "STRING_VALUE",
    "TERMINATING_FLOW_IDS",
    "THREAD",
    "THREAD_NAME",
    "THREAD_ORDERING",
    "THREAD_ORDERING_EXPLICIT",
    "TID",
    "TIMESTAMP",
    "TRACE_ATTRIBUTES",
    "TRACE_SEQUENCE",
    "TRACK_DESCRIPTOR",
    "TRACK_EVENT",
    "TRACK_NAME",
    "TRACK_UUID",
    "TRUSTED_PACKET_SEQUENCE_ID",
    "TYPE_COUNTER",
    "TYPE_INSTANT",
    "TYPE_SLICE_BEGIN",
    "TYPE_SLICE_END",
    "UINT64",
    "UINT_VALUE",
    "UUID",
    "trace_packet",
]

# Field numbers and values, from Perfetto's protos/perfetto/trace/: trace.proto, trace_packet.proto,
# track_event/{track_event,track_descriptor,process_descriptor,thread_descriptor,counter_descriptor,
# debug_annotation}.proto, interned_data/interned_data.proto, clock_snapshot.proto, common/trace_attributes.proto.
PACKET: Final = pb.key(1, pb.LEN)  # Trace.packet
# TracePacket
TIMESTAMP: Final = pb.key(8, pb.VARINT)
TRUSTED_PACKET_SEQUENCE_ID: Final = 10
TRACK_EVENT: Final = pb.key(11, pb.LEN)
INTERNED_DATA: Final = 12
SEQUENCE_FLAGS: Final = 13
SEQ_INCREMENTAL_STATE_CLEARED: Final = 1
SEQ_NEEDS_INCREMENTAL_STATE: Final = 2
CLOCK_SNAPSHOT: Final = 6
TRACK_DESCRIPTOR: Final = 60
TRACE_ATTRIBUTES: Final = 126
# TrackEvent
CATEGORY_IIDS: Final = 3
CATEGORIES: Final = 22
DEBUG_ANNOTATIONS: Final = pb.key(4, pb.LEN)
TYPE_SLICE_BEGIN: Final = pb.uint(9, 1)
TYPE_SLICE_END: Final = pb.uint(9, 2)
TYPE_INSTANT: Final = pb.uint(9, 3)
TYPE_COUNTER: Final = pb.uint(9, 4)
NAME_IID: Final = 10
NAME: Final = 23
TRACK_UUID: Final = pb.key(11, pb.VARINT)
COUNTER_VALUE: Final = pb.key(30, pb.VARINT)
FLOW_IDS: Final = pb.key(47, pb.I64)
TERMINATING_FLOW_IDS: Final = pb.key(48, pb.I64)
DOUBLE_COUNTER_VALUE: Final = pb.key(44, pb.I64)
# InternedData: its entries (EventCategory, EventName, DebugAnnotationName) are each {iid = 1, name = 2}.
EVENT_CATEGORIES: Final = 1
EVENT_NAMES: Final = 2
DEBUG_ANNOTATION_NAMES: Final = 3
# DebugAnnotation
ANNOTATION_NAME_IID: Final = 1
ANNOTATION_NAME: Final = 10
BOOL_VALUE: Final = pb.key(2, pb.VARINT)
UINT_VALUE: Final = pb.key(3, pb.VARINT)
INT_VALUE: Final = pb.key(4, pb.VARINT)
DOUBLE_VALUE: Final = pb.key(5, pb.I64)
STRING_VALUE: Final = 6
LEGACY_JSON_VALUE: Final = 9
DICT_ENTRIES: Final = pb.key(11, pb.LEN)
ARRAY_VALUES: Final = pb.key(12, pb.LEN)
# TrackDescriptor
UUID: Final = 1
TRACK_NAME: Final = 2
PROCESS: Final = 3
THREAD: Final = 4
PARENT_UUID: Final = 5
COUNTER: Final = 8
SIBLING_ORDER_RANK: Final = 12
SIBLING_MERGE_BEHAVIOR: Final = 15
SIBLING_MERGE_BEHAVIOR_NONE: Final = 2
PROCESS_ORDERING: Final = 19
PROCESS_ORDERING_EXPLICIT: Final = 1
THREAD_ORDERING: Final = 20
THREAD_ORDERING_EXPLICIT: Final = 1
# ProcessDescriptor, ThreadDescriptor
PID: Final = 1
PROCESS_NAME: Final = 6
PROCESS_LABELS: Final = 8
TID: Final = 2
THREAD_NAME: Final = 5
# ClockSnapshot
CLOCKS: Final = 1
PRIMARY_TRACE_CLOCK: Final = 2
CLOCK_ID: Final = 1
CLOCK_TIMESTAMP: Final = 2
BUILTIN_CLOCK_REALTIME: Final = 1
BUILTIN_CLOCK_BOOTTIME: Final = 6
# TraceAttributes
ATTRIBUTE: Final = 1
ATTRIBUTE_KEY: Final = 1
LONG_VALUE: Final = 2
ATTRIBUTE_STRING_VALUE: Final = 3

#: The sequence of descriptors and the trace's own packets; segments' events go on the sequences after it.
TRACE_SEQUENCE: Final = 1
ON_TRACE_SEQUENCE: Final = pb.uint(TRUSTED_PACKET_SEQUENCE_ID, TRACE_SEQUENCE)
#: The values an int64 field holds, and a uint64 one.
INT64: Final = range(-(2**63), 2**63)
UINT64: Final = range(2**64)


def trace_packet(fields: bytes) -> bytes:
    """A packet of the trace's own sequence (no incremental state), as an entry of ``Trace``."""
    packet = fields + ON_TRACE_SEQUENCE
    return PACKET + pb.varint(len(packet)) + packet
