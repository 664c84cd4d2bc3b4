"""A pprof profile (``profile.proto``, gzip-compressed or not) read back with a schema-free protobuf reader: its
samples with their stacks resolved (outermost first, as the other exports list them), their values and labels."""

from __future__ import annotations

import gzip
from dataclasses import dataclass
from typing import Any

__all__ = ["PprofProfile", "PprofSample", "fields"]


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, at


def fields(data: bytes) -> list[tuple[int, int | bytes]]:
    """A message's fields in order: (number, varint value or length-delimited bytes)."""
    out: list[tuple[int, int | bytes]] = []
    at = 0
    while at < len(data):
        key, at = _varint(data, at)
        number, wire_type = key >> 3, key & 7
        if wire_type == 0:
            value, at = _varint(data, at)
            out.append((number, value))
        elif wire_type == 2:
            size, at = _varint(data, at)
            out.append((number, data[at : at + size]))
            at += size
        else:
            raise AssertionError(f"wire type {wire_type}")
    return out


def _ints(value: int | bytes) -> list[int]:
    """A repeated integer field's values: packed (bytes) or one."""
    if isinstance(value, int):
        return [value]
    out, at = [], 0
    while at < len(value):
        number, at = _varint(value, at)
        out.append(number)
    return out


def _one(message: bytes) -> dict[int, Any]:
    return dict(fields(message))


@dataclass(frozen=True)
class PprofSample:
    #: Outermost first: (function, file, line).
    stack: tuple[tuple[str, str, int], ...]
    values: tuple[int, ...]
    labels: dict[str, str | int]


class PprofProfile:
    def __init__(self, data: bytes) -> None:
        if data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
        top = fields(data)
        self.strings = [bytes(v).decode() for n, v in top if n == 6 and isinstance(v, bytes)]
        assert self.strings and self.strings[0] == "", "string 0 is the empty string"
        text = self.strings.__getitem__
        functions = {}
        for n, v in top:
            if n == 5 and isinstance(v, bytes):
                f = _one(v)
                functions[f[1]] = (text(f.get(2, 0)), text(f.get(4, 0)))
        locations = {}
        for n, v in top:
            if n == 4 and isinstance(v, bytes):
                location = fields(v)
                (line,) = [_one(bytes(lv)) for ln, lv in location if ln == 4 and isinstance(lv, bytes)]
                function, file = functions[line[1]]
                locations[dict(location)[1]] = (function, file, line.get(2, 0))
        self.sample_types = [
            (text(t.get(1, 0)), text(t.get(2, 0))) for t in (_one(v) for n, v in top if n == 1 and isinstance(v, bytes))
        ]
        self.samples: list[PprofSample] = []
        for n, v in top:
            if n != 2 or not isinstance(v, bytes):
                continue
            ids, values, labels = [], [], {}
            for sn, sv in fields(v):
                if sn == 1:
                    ids += _ints(sv)
                elif sn == 2:
                    values += _ints(sv)
                elif sn == 3 and isinstance(sv, bytes):
                    label = _one(sv)
                    labels[text(label[1])] = text(label[2]) if label.get(2) else label.get(3, 0)
            stack = tuple(locations[i] for i in reversed(ids))
            self.samples.append(PprofSample(stack, tuple(values), labels))
        top_ints = {n: v for n, v in top if isinstance(v, int)}
        self.time_nanos = top_ints.get(9, 0)
        self.duration_nanos = top_ints.get(10, 0)
