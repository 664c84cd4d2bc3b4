"""The frames that open a connection: the client's HELLO and the collector's WELCOME, which agree on a version and
the limits (``PROTOCOL.md``, "Version negotiation")."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from ringtrace.wire.errors import MalformedFrame
from ringtrace.wire.frame_fields import MAX_FIELD_INT, MAX_PID, MAX_U32, body_field, pack_body, unpack_map
from ringtrace.wire.frame_types import (
    DEFAULT_MAX_STACK_FRAMES,
    DEFAULT_MAX_STACKS,
    MIN_MAX_FRAME_BYTES,
    PROTOCOL_VERSIONS,
    FrameType,
)

__all__ = ["Hello", "Welcome"]


@dataclass(frozen=True, slots=True)
class Hello:
    """The client's first frame: who the process is, one reading of both its clocks, the versions it speaks."""

    TYPE: ClassVar = FrameType.HELLO
    pid: int
    host: str
    process_name: str
    #: Random per process incarnation (new after fork): tells a reconnect from a new process with a reused pid.
    instance_id: str
    #: Identifies the host's monotonic clock domain (Linux boot id); empty when unknown.
    boot_id: str
    monotonic_ns: int
    wall_ns: int
    client_version: str
    protocol_min: int = PROTOCOL_VERSIONS[0]
    protocol_max: int = PROTOCOL_VERSIONS[1]
    #: The collector's shared secret, for a collector that requires one (empty: none, and the field is not sent).
    #: Only a live connection carries it: never a file, nor what the collector stores.
    token: str = field(default="", repr=False)
    #: A recorded stream sent again (``ringtrace replay``): its clock pairing is as it was recorded, so the collector
    #: does not check it against its own clock (it still moves only this process's events).
    recorded: bool = False
    #: The client says GOODBYE whenever it closes on purpose: only then is an end without one a crash (a peer that
    #: never says it, as an older client or a hand-made one, is never taken for crashed).
    says_goodbye: bool = False

    def encode_body(self) -> bytes:
        body = {
            "pid": self.pid,
            "host": self.host,
            "process_name": self.process_name,
            "instance_id": self.instance_id,
            "boot_id": self.boot_id,
            "monotonic_ns": self.monotonic_ns,
            "wall_ns": self.wall_ns,
            "client_version": self.client_version,
            "protocol_min": self.protocol_min,
            "protocol_max": self.protocol_max,
        }
        if self.token:
            body["token"] = self.token
        if self.recorded:
            body["recorded"] = True
        if self.says_goodbye:
            body["says_goodbye"] = True
        return pack_body(body)

    @classmethod
    def decode_body(cls, body: bytes) -> Hello:
        data = unpack_map("HELLO", body)
        hello = cls(
            pid=body_field(data, "HELLO", "pid", int, MAX_PID),
            host=body_field(data, "HELLO", "host", str),
            process_name=body_field(data, "HELLO", "process_name", str),
            instance_id=body_field(data, "HELLO", "instance_id", str),
            boot_id=body_field(data, "HELLO", "boot_id", str),
            monotonic_ns=body_field(data, "HELLO", "monotonic_ns", int),
            wall_ns=body_field(data, "HELLO", "wall_ns", int),
            client_version=body_field(data, "HELLO", "client_version", str),
            protocol_min=body_field(data, "HELLO", "protocol_min", int, 0xFFFF),
            protocol_max=body_field(data, "HELLO", "protocol_max", int, 0xFFFF),
            token=body_field(data, "HELLO", "token", str) if "token" in data else "",
            recorded=body_field(data, "HELLO", "recorded", bool) if "recorded" in data else False,
            says_goodbye=body_field(data, "HELLO", "says_goodbye", bool) if "says_goodbye" in data else False,
        )
        if hello.protocol_min > hello.protocol_max:
            raise MalformedFrame(
                f"HELLO frame: protocol_min {hello.protocol_min} is above protocol_max {hello.protocol_max}"
            )
        return hello


@dataclass(frozen=True, slots=True)
class Welcome:
    """The collector's answer to HELLO: the version chosen and the limits the client must respect."""

    TYPE: ClassVar = FrameType.WELCOME
    protocol_version: int
    max_frame_bytes: int
    max_strings: int
    max_tracks: int
    max_kinds: int
    collector_version: str
    #: UTF-8 bytes of all strings one connection may declare (absent from older collectors: no limit).
    max_string_bytes: int = MAX_FIELD_INT
    #: UTF-8 bytes of the texts of all kinds one connection may declare (``KindSpec.text_bytes``; absent: no limit).
    max_schema_bytes: int = MAX_FIELD_INT
    #: The collector takes STRINGS frames that start the table again (``Strings.reset``; absent: false).
    string_resets: bool = False
    #: Stack nodes and code locations one connection's STACKS frames may declare (absent: the defaults).
    max_stacks: int = DEFAULT_MAX_STACKS
    max_stack_frames: int = DEFAULT_MAX_STACK_FRAMES

    def encode_body(self) -> bytes:
        return pack_body(
            {
                "protocol_version": self.protocol_version,
                "max_frame_bytes": self.max_frame_bytes,
                "max_strings": self.max_strings,
                "max_tracks": self.max_tracks,
                "max_kinds": self.max_kinds,
                "collector_version": self.collector_version,
                "max_string_bytes": self.max_string_bytes,
                "max_schema_bytes": self.max_schema_bytes,
                "string_resets": self.string_resets,
                "max_stacks": self.max_stacks,
                "max_stack_frames": self.max_stack_frames,
            }
        )

    @classmethod
    def decode_body(cls, body: bytes) -> Welcome:
        data = unpack_map("WELCOME", body)
        welcome = cls(
            protocol_version=body_field(data, "WELCOME", "protocol_version", int, 0xFFFF),
            max_frame_bytes=body_field(data, "WELCOME", "max_frame_bytes", int, MAX_U32),
            max_strings=body_field(data, "WELCOME", "max_strings", int, MAX_U32),
            max_tracks=body_field(data, "WELCOME", "max_tracks", int, MAX_U32),
            max_kinds=body_field(data, "WELCOME", "max_kinds", int, MAX_U32),
            collector_version=body_field(data, "WELCOME", "collector_version", str),
            max_string_bytes=(
                body_field(data, "WELCOME", "max_string_bytes", int) if "max_string_bytes" in data else MAX_FIELD_INT
            ),
            max_schema_bytes=(
                body_field(data, "WELCOME", "max_schema_bytes", int) if "max_schema_bytes" in data else MAX_FIELD_INT
            ),
            string_resets=body_field(data, "WELCOME", "string_resets", bool) if "string_resets" in data else False,
            max_stacks=(
                body_field(data, "WELCOME", "max_stacks", int, MAX_U32) if "max_stacks" in data else DEFAULT_MAX_STACKS
            ),
            max_stack_frames=(
                body_field(data, "WELCOME", "max_stack_frames", int, MAX_U32)
                if "max_stack_frames" in data
                else DEFAULT_MAX_STACK_FRAMES
            ),
        )
        if welcome.max_frame_bytes < MIN_MAX_FRAME_BYTES:
            raise MalformedFrame(
                f"WELCOME frame: field 'max_frame_bytes' must be >= {MIN_MAX_FRAME_BYTES}, "
                f"got {welcome.max_frame_bytes}"
            )
        for name in ("max_strings", "max_tracks", "max_kinds"):
            if getattr(welcome, name) < 2:
                raise MalformedFrame(f"WELCOME frame: field {name!r} must be >= 2, got {getattr(welcome, name)}")
        return welcome
