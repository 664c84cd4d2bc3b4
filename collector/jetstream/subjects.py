"""The subjects of a ringtrace stream: ``STREAM.<host>.<pid>.<instance>``, one per process, so that selecting
processes by host or pid is a subject filter.

A subject token may not be empty nor hold ``.``, ``*``, ``>`` or white space; a host name has dots. Each token keeps
letters, digits, ``_`` and ``-`` and writes every other byte of its UTF-8 as ``~XX`` (hex; ``~`` itself too), so
distinct hosts stay distinct tokens; an empty one is ``~``. A token that would be longer than MAX_TOKEN_BYTES is
``~~`` and a digest of the text instead (``~~`` is no escape: ``~`` itself is ``~7E``): a subject must fit in the
servers' control line (4096 bytes by default), which closes the connection of a client publishing on a longer one, and
a host name or instance id may be 256 characters of four bytes each.
"""

from __future__ import annotations

import hashlib
from typing import Final

__all__ = [
    "MAX_TOKEN_BYTES",
    "process_of_subject",
    "process_subject",
    "stream_subjects",
    "subject_filter",
    "subject_text",
    "subject_token",
]

_PLAIN: Final = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
#: The longest token written out (two of them, the stream's name and a pid stay far within a control line).
MAX_TOKEN_BYTES: Final = 256
#: The start of a token that is a digest of its text (too long to be written out).
_DIGEST: Final = "~~"


def subject_token(text: str) -> str:
    """``text`` as one subject token (see the module docstring)."""
    if not text:
        return "~"
    token = "".join(chr(byte) if byte in _PLAIN else f"~{byte:02X}" for byte in text.encode())
    if len(token) > MAX_TOKEN_BYTES:
        return _DIGEST + hashlib.sha256(text.encode()).hexdigest()
    return token


def subject_text(token: str) -> str:
    """What ``subject_token`` made ``token`` of (a digest, for a text too long: the token itself)."""
    if token == "~":
        return ""
    if token.startswith(_DIGEST):
        return token
    out = bytearray()
    position = 0
    while position < len(token):
        if token[position] == "~":
            out.append(int(token[position + 1 : position + 3], 16))
            position += 3
        else:
            out += token[position].encode()
            position += 1
    return out.decode(errors="replace")


def process_of_subject(subject: str) -> tuple[str, int, str] | None:
    """(host, pid, instance) of a process's subject; None for one that is not such."""
    parts = subject.split(".")
    if len(parts) != 4 or not parts[2].isdigit():
        return None
    try:
        return subject_text(parts[1]), int(parts[2]), subject_text(parts[3])
    except ValueError:
        return None


def process_subject(stream: str, host: str, pid: int, instance_id: str) -> str:
    """The subject a process's segments are published on."""
    return f"{stream}.{subject_token(host)}.{pid}.{subject_token(instance_id)}"


def stream_subjects(stream: str) -> str:
    """What the stream takes: every process's subject."""
    return f"{stream}.>"


def subject_filter(stream: str, host: str | None = None, pid: int | None = None) -> str:
    """The subjects of the processes on ``host`` (any, if None) with ``pid`` (any, if None)."""
    return f"{stream}.{'*' if host is None else subject_token(host)}.{'*' if pid is None else pid}.*"
