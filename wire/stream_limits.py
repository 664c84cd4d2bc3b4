"""What one stream may declare (``Limits``, which a collector states in WELCOME), the version both peers speak, and
the limits on texts that hold whatever the limits are set to."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from ringtrace.wire.arg_values import MAX_STRING_CHARS
from ringtrace.wire.errors import LimitExceeded, MalformedFrame, UnsupportedVersion
from ringtrace.wire.frame_types import (
    DEFAULT_MAX_FRAME_BYTES,
    DEFAULT_MAX_STACK_FRAMES,
    DEFAULT_MAX_STACKS,
    PROTOCOL_VERSIONS,
)
from ringtrace.wire.handshake_frames import Hello
from ringtrace.wire.stack_frames import Stacks
from ringtrace.wire.table_frames import KindSpec

__all__ = ["MAX_KIND_FIELDS", "Limits", "check_kind_texts", "check_stacks", "check_text", "negotiate"]

#: Typed fields one event kind may declare.
MAX_KIND_FIELDS: Final = 256
#: The highest line number a code location may give.
_MAX_LINE: Final = 2**32 - 1


@dataclass(frozen=True, slots=True)
class Limits:
    """What one stream may declare. A collector states its limits in WELCOME; a client keeps within them."""

    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    max_strings: int = 100_000
    max_tracks: int = 10_000
    max_kinds: int = 1_000
    #: UTF-8 bytes of all the strings one stream may declare (a collector sets it; files have no such limit).
    max_string_bytes: int = 2**63 - 1
    #: UTF-8 bytes of the texts of all the kinds one stream may declare (``KindSpec.text_bytes``).
    max_schema_bytes: int = 2**63 - 1
    #: Stack nodes and code locations its STACKS frames may declare (their texts count against
    #: ``max_string_bytes``, a budget of their own, as track names do).
    max_stacks: int = DEFAULT_MAX_STACKS
    max_stack_frames: int = DEFAULT_MAX_STACK_FRAMES


def negotiate(hello: Hello, supported: tuple[int, int] = PROTOCOL_VERSIONS) -> int:
    """The highest protocol version both sides speak.

    Raises:
        UnsupportedVersion: the ranges do not overlap (the message names both).
    """
    version = min(hello.protocol_max, supported[1])
    if version < max(hello.protocol_min, supported[0]):
        raise UnsupportedVersion(
            f"no common protocol version: the client speaks {hello.protocol_min}..{hello.protocol_max}, "
            f"this collector {supported[0]}..{supported[1]}"
        )
    return version


def check_text(what: str, text: str) -> None:
    """Raises LimitExceeded for a ``text`` (``what`` names it) past ``MAX_STRING_CHARS``."""
    if len(text) > MAX_STRING_CHARS:
        raise LimitExceeded(f"{what} length", "max_string_chars", MAX_STRING_CHARS, len(text))


def check_kind_texts(spec: KindSpec) -> None:
    """Raises LimitExceeded for a text of ``spec`` past the limits (they depend on nothing else)."""
    check_text("SCHEMA frame: kind name", spec.name)
    check_text("SCHEMA frame: kind text", spec.text)
    check_text("SCHEMA frame: kind priority", spec.priority)
    if len(spec.fields) > MAX_KIND_FIELDS:
        raise LimitExceeded("SCHEMA frame: fields of a kind", "max_kind_fields", MAX_KIND_FIELDS, len(spec.fields))
    for field_name, type_code in spec.fields:
        check_text("SCHEMA frame: field name", field_name)
        check_text("SCHEMA frame: type code", type_code)


def check_stacks(frame: Stacks, frames_declared: int, stacks_declared: int, text_bytes: int, limits: Limits) -> int:
    """The UTF-8 bytes of the texts ``frame`` adds to a stack table that holds ``frames_declared`` code locations,
    ``stacks_declared`` nodes and ``text_bytes`` bytes of texts (after its reset, if it resets it): it continues the
    table (no gap, no repeat), parents come before their children, every code location is declared, within
    ``max_stacks``, ``max_stack_frames``, ``MAX_STRING_CHARS`` a text and ``max_string_bytes`` in all.

    Raises:
        MalformedFrame, LimitExceeded: the rule broken, naming the field.
    """
    if frame.first_frame != frames_declared:
        raise MalformedFrame(
            f"STACKS frame: field 'first_frame' is {frame.first_frame}, but {frames_declared} code locations are "
            "declared (the table grows without gaps or repeats)"
        )
    if frame.first_stack != stacks_declared:
        raise MalformedFrame(
            f"STACKS frame: field 'first_stack' is {frame.first_stack}, but {stacks_declared} stacks are declared "
            "(the table grows without gaps or repeats)"
        )
    frame_count = frames_declared + len(frame.frames)
    if frame_count > limits.max_stack_frames:
        raise LimitExceeded("STACKS frame: code location count", "max_stack_frames", limits.max_stack_frames,
                            frame_count)  # fmt: skip
    stack_count = stacks_declared + len(frame.stacks)
    if stack_count > limits.max_stacks:
        raise LimitExceeded("STACKS frame: stack count", "max_stacks", limits.max_stacks, stack_count)
    added = 0
    for function, file, line in frame.frames:
        longest = max(len(function), len(file))
        if longest > MAX_STRING_CHARS:
            raise LimitExceeded("STACKS frame: field 'frames' text length", "max_string_chars", MAX_STRING_CHARS,
                                longest)  # fmt: skip
        if not 0 <= line <= _MAX_LINE:
            raise MalformedFrame(f"STACKS frame: field 'frames' has line {line} (must be in 0..{_MAX_LINE})")
        added += len(function.encode("utf-8", "surrogatepass")) + len(file.encode("utf-8", "surrogatepass"))
    for stack_id, (parent, leaf) in enumerate(frame.stacks, frame.first_stack):
        if parent is not None and parent >= stack_id:
            raise MalformedFrame(
                f"STACKS frame: field 'stacks' gives stack {stack_id} the parent {parent}, not declared before it"
            )
        if leaf >= frame_count:
            raise MalformedFrame(
                f"STACKS frame: field 'stacks' gives stack {stack_id} the code location {leaf}, never declared"
            )
    if text_bytes + added > limits.max_string_bytes:
        raise LimitExceeded("STACKS frame: bytes of all code locations' texts", "max_string_bytes",
                            limits.max_string_bytes, text_bytes + added)  # fmt: skip
    return added
