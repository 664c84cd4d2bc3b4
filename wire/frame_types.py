"""The constants of the ringtrace wire format: versions, the framing, frame-size limits, frame types and the
reasons both peers know.

``PROTOCOL.md`` beside this file describes the format; ``frames.py`` and the modules it names implement the frames.
"""

from __future__ import annotations

import struct
from enum import IntEnum
from typing import Final, Literal

__all__ = [
    "AUTHENTICATION_FAILED",
    "CHECKSUM_TYPE",
    "DEFAULT_MAX_FRAME_BYTES",
    "DEFAULT_MAX_STACKS",
    "DEFAULT_MAX_STACK_FRAMES",
    "EVENTS_HEADER",
    "EVENT_COLUMNS",
    "FRAME_HEADER",
    "IGNORABLE",
    "MAGIC",
    "MAX_MAX_FRAME_BYTES",
    "MIN_MAX_FRAME_BYTES",
    "PREAMBLE",
    "PROTOCOL_VERSION",
    "PROTOCOL_VERSIONS",
    "STREAM_FORMAT",
    "TABLES_PAST_CAPACITY",
    "FrameType",
    "Peer",
]

#: The protocol versions this code speaks (HELLO and WELCOME negotiate one of them).
PROTOCOL_VERSIONS: Final = (2, 2)
PROTOCOL_VERSION: Final = PROTOCOL_VERSIONS[1]
#: The framing described by the preamble: length-prefixed frames with a one-byte type.
STREAM_FORMAT: Final = 2
MAGIC: Final = b"RTRC"
PREAMBLE: Final = struct.Struct("<4sHH")
FRAME_HEADER: Final = struct.Struct("<IB")
#: header_size, flags, track, count, first_ts, last_ts.
EVENTS_HEADER: Final = struct.Struct("<HHIIQQ")
DEFAULT_MAX_FRAME_BYTES: Final = 1 << 20
#: No peer may set max_frame_bytes lower: every control frame (a STRINGS run, say) fits well within it.
MIN_MAX_FRAME_BYTES: Final = 32 * 1024
#: No peer may raise it above this: a frame header can then never begin with the magic, so that streams may follow
#: one another in a file (``concatenated``).
MAX_MAX_FRAME_BYTES: Final = 1 << 30
#: Stack nodes and code locations (STACKS) one stream may declare when WELCOME does not say (a file, an older
#: collector).
DEFAULT_MAX_STACKS: Final = 100_000
DEFAULT_MAX_STACK_FRAMES: Final = 100_000
#: Column order of an EVENTS payload in version 2.
EVENT_COLUMNS: Final = ("kind", "name", "ts", "dur", "args")
#: Frame-type bit: a reader that does not know the type skips the frame instead of failing.
IGNORABLE: Final = 0x80
#: CHECKSUM, a frame type of files only (the collector's segments): a live peer may not send it.
CHECKSUM_TYPE: Final = 0xFF
#: The whole reason of the GOODBYE a collector sends a client whose HELLO lacks its token or has another one: no
#: more, so that a peer learns nothing from it.
AUTHENTICATION_FAILED: Final = "authentication failed"
#: How the reason of the GOODBYE ends that a collector sends a client whose tables (strings, tracks, schema) do not
#: fit its ``--capacity``: a client takes it as a refusal that retrying soon will not mend.
TABLES_PAST_CAPACITY: Final = "the collector's --capacity is too small for these tables"

Peer = Literal["client", "collector"]


class FrameType(IntEnum):
    HELLO = 1
    WELCOME = 2
    SCHEMA = 3
    STRINGS = 4
    TRACK = 5
    EVENTS = 6
    STATS = 7
    FLUSH = 8
    FLUSH_ACK = 9
    GOODBYE = IGNORABLE | 1
    SET_PRIORITY = IGNORABLE | 2
    REFUSED = IGNORABLE | 3
    STACKS = IGNORABLE | 4
