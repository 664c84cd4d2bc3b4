"""STACKS, the frame that declares a stream's call stacks (``PROTOCOL.md``, "STACKS"): the code locations (frames)
and the stack nodes that ``sample`` events name by id. Ignorable: a reader that predates it skips it, and shows a
sample's stack id as it is."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Final

from ringtrace.wire.errors import MalformedFrame
from ringtrace.wire.frame_fields import MAX_U32, body_field, pack_body, unpack_map
from ringtrace.wire.frame_types import FrameType

__all__ = ["CodeLocation", "StackNode", "Stacks"]

#: One frame of a stack: function, file, line.
CodeLocation = tuple[str, str, int]
#: One stack node: its parent stack id (None: a root), and the id of its own (innermost) code location.
StackNode = tuple[int | None, int]

_NAME: Final = "STACKS"


@dataclass(frozen=True, slots=True)
class Stacks:
    """A run of the stream's stack table: code locations numbered from ``first_frame``, stack nodes from
    ``first_stack``. A stack id names the path from a root node to that node; ``reset`` starts both tables again."""

    TYPE: ClassVar = FrameType.STACKS
    first_frame: int
    frames: tuple[CodeLocation, ...]
    first_stack: int
    stacks: tuple[StackNode, ...]
    reset: bool = False

    def encode_body(self) -> bytes:
        body: dict[str, Any] = {
            "first_frame": self.first_frame,
            "frames": [list(frame) for frame in self.frames],
            "first_stack": self.first_stack,
            "stacks": [list(node) for node in self.stacks],
        }
        if self.reset:
            body["reset"] = True
        return pack_body(body)

    @classmethod
    def decode_body(cls, body: bytes) -> Stacks:
        data = unpack_map(_NAME, body)
        first_frame = body_field(data, _NAME, "first_frame", int, MAX_U32)
        first_stack = body_field(data, _NAME, "first_stack", int, MAX_U32)
        reset = body_field(data, _NAME, "reset", bool) if "reset" in data else False
        if reset and (first_frame or first_stack):
            raise MalformedFrame(
                f"STACKS frame: fields 'first_frame' and 'first_stack' must be 0 in a frame that resets the table, "
                f"got {first_frame} and {first_stack}"
            )
        frames = tuple(_location(item) for item in body_field(data, _NAME, "frames", list))
        stacks = tuple(_node(item) for item in body_field(data, _NAME, "stacks", list))
        return cls(first_frame, frames, first_stack, stacks, reset)


def _location(item: object) -> CodeLocation:
    if not (
        isinstance(item, list)
        and len(item) == 3
        and isinstance(item[0], str)
        and isinstance(item[1], str)
        and type(item[2]) is int
    ):
        raise MalformedFrame(f"STACKS frame: field 'frames' must hold [function, file, line], got {item!r:.80}")
    return (item[0], item[1], item[2])


def _node(item: object) -> StackNode:
    if not (
        isinstance(item, list)
        and len(item) == 2
        and (item[0] is None or (type(item[0]) is int and item[0] >= 0))
        and type(item[1]) is int
        and item[1] >= 0
    ):
        raise MalformedFrame(f"STACKS frame: field 'stacks' must hold [parent stack or nil, frame], got {item!r:.80}")
    return (item[0], item[1])
