"""Messages as both sides see them: the nine priorities, and a message event rendered as a reader shows it.

Recording messages (``Timeline.message``) is the client's; ``render`` is what every reader (the session decoder, the
collector's snapshots, file readers) shows of one.
"""

from __future__ import annotations

import re
from typing import Any, Final

from ringtrace.wire.table_frames import KindSpec

__all__ = ["MAX_MESSAGE_VALUES", "PLACEHOLDER", "PRIORITIES", "placeholder_names", "priority_level", "render"]

PRIORITIES: Final = ("fatal", "error", "warning", "info", "debug", "trace", "trace+", "trace++", "trace+++")
#: Values one message takes (Snabb's v3 entries hold six).
MAX_MESSAGE_VALUES: Final = 6
#: A ``$name`` in a message's text, shown ``name(value)``, or a ``${name}``, shown as the value alone: one of its
#: values (group 1 the name of a ``${name}``, group 2 that of a ``$name``).
PLACEHOLDER: Final = re.compile(r"\$(?:\{(\w+)\}|(\w+))")


def placeholder_names(text: str) -> tuple[str, ...]:
    """The names of the values ``text`` shows, each once, in order (``$name`` and ``${name}`` alike)."""
    return tuple(dict.fromkeys(plain or named for plain, named in PLACEHOLDER.findall(text)))


def priority_level(priority: str) -> int:
    """The rank of ``priority`` (0 for ``fatal``).

    Raises:
        ValueError: not one of ``PRIORITIES``; the message lists them.
    """
    try:
        return PRIORITIES.index(priority)
    except ValueError:
        raise ValueError(f"priority must be one of {', '.join(PRIORITIES)}; got {priority!r:.80}") from None


def render(kind: KindSpec, values: list[Any]) -> tuple[str, dict[str, Any]]:
    """A message event as a reader shows it: its text with each ``$name`` as ``name(value)`` and each ``${name}`` as
    the value alone, and its values by name (values past the placeholders are ``value5``, ``value6``, ...). A
    placeholder that is none of the kind's fields stays as written (a kind defined before ``${name}`` was one has
    no field for it)."""
    names = [name for name, _ in kind.fields]
    names += [f"value{i + 1}" for i in range(len(names), len(values))]
    args = dict(zip(names, values, strict=False))

    def placeholder(match: re.Match[str]) -> str:
        plain, name = match[1], match[2]
        if plain is not None:
            return f"{args[plain]}" if plain in args else match[0]
        return f"{name}({args[name]})" if name in args else match[0]

    return PLACEHOLDER.sub(placeholder, kind.text), args
