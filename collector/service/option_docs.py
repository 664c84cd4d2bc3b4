"""The docs' flag table, made from the option table (``flags_markdown``: one line a flag, as ``--help``), and the block
of a docs page that holds it (between ``FLAGS_START`` and ``FLAGS_END``), which a test holds to the table."""

from __future__ import annotations

from typing import Final

from ringtrace.collector.service.option_environment import NOT_SET_VALUES, SET_VALUES
from ringtrace.collector.service.option_flags import FLAGGED
from ringtrace.collector.service.option_row import Option
from ringtrace.wire.doc_blocks import marked_block, with_marked_block

__all__ = ["FLAGS_END", "FLAGS_START", "flags_block", "flags_markdown", "with_flags_markdown"]

#: The markers of the flag table in the docs (``with_flags_markdown`` writes between them).
FLAGS_START: Final = "<!-- flags:start -->"
FLAGS_END: Final = "<!-- flags:end -->"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _flag_cell(option: Option) -> str:
    if option.switch:
        return f"`{option.flag}`"
    if option.choices is not None:
        return f"`{option.flag} {{{','.join(option.choices)}}}`"
    return f"`{option.flag} {option.metavar or 'VALUE'}`"


def _environment_cell(option: Option) -> str:
    cell = f"`{option.environment}`"
    if option.switch:
        cell += f" ({'; '.join(', '.join(f'`{v}`' for v in values if v) for values in (SET_VALUES, NOT_SET_VALUES))})"
    return f"{cell} {option.environment_note}".rstrip()


def _default_cell(option: Option) -> str:
    if option.switch:
        return "off"
    return option.shown_default or "none"


def flags_markdown() -> str:
    """The docs' flag table (Markdown, ``Flag | Environment | Default | Meaning``), one line a flag, as ``--help``."""
    lines = ["| Flag | Environment | Default | Meaning |", "|---|---|---|---|"]
    for option in FLAGGED:
        cells = (_flag_cell(option), _environment_cell(option), _default_cell(option), option.help)
        lines.append("| " + " | ".join(_cell(cell) for cell in cells) + " |")
    return "\n".join(lines) + "\n"


def flags_block(text: str) -> str | None:
    """What ``text`` holds between ``FLAGS_START`` and ``FLAGS_END`` (None: no such block), without the blank lines
    around it."""
    return marked_block(text, FLAGS_START, FLAGS_END)


def with_flags_markdown(text: str) -> str:
    """``text`` (a docs page) with ``flags_markdown()`` between its markers.

    Raises:
        ValueError: ``text`` has no ``FLAGS_START`` ... ``FLAGS_END`` block.
    """
    return with_marked_block(text, FLAGS_START, FLAGS_END, flags_markdown())
