"""Which unit tests run again on the pure-Python path, ``RINGTRACE_PURE_PYTHON=1`` (``scripts/check``'s second run).

The code with a C twin (the accelerator's recorder and encoder, the C writers and scanner of the collector) runs its
pure-Python twin there, and so does what records or encodes through it: a unit test module that imports any of
``TWINNED`` is marked ``pure_python`` (``tests/unit/conftest.py``) and runs twice. Nothing else does: without a C twin
in the process, a second run would be the first one again. Integration tests run the real processes once; those
about the pure-Python path set ``RINGTRACE_PURE_PYTHON`` for their processes themselves. ``test_pure_python_run.py``
holds ``TWINNED`` to the modules that load a C twin.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

__all__ = ["TWINNED", "imported_modules", "imports_twinned"]

#: The modules that load a C twin (``load_optional``, the accelerator's ``speedups``), and those that record or encode
#: through them; ``ringtrace.client`` itself is there for the Timeline it exports.
TWINNED = frozenset(
    {
        "ringtrace.client",
        "ringtrace.client.accelerator",
        "ringtrace.client.functions.function_tracing",
        "ringtrace.client.integrations.aiohttp_server",
        "ringtrace.client.recording.drain",
        "ringtrace.wire.stream_encoder",
        "ringtrace.wire.event_packing",
        "ringtrace.wire.call_packing",
        "ringtrace.wire.record_packing",
        "ringtrace.wire.keyword_args",
        "ringtrace.collector.incidents.frame_match",
        "ringtrace.collector.incidents.rule_verdicts",
        "ringtrace.client.delivery.listeners",
        "ringtrace.client.delivery.owned_fds",
        "ringtrace.client.recording.messages",
        "ringtrace.client.recording.recorder",
        "ringtrace.client.recording.timeline_listeners",
        "ringtrace.client.recording.timelines",
        "ringtrace.client.recording.trace_context",
        "ringtrace.client.recording.traced",
        "ringtrace.client.recording.tracks",
        "ringtrace.client.sampling.thread_pass",
        "ringtrace.collector.export.chrome",
        "ringtrace.collector.export.chrome_frames",
        "ringtrace.collector.export.perfetto",
        "ringtrace.collector.export.perfetto_frames",
        "ringtrace.collector.export.table_columns",
        "ringtrace.collector.export.table_rows",
        "ringtrace.collector.ingest.scan",
        "ringtrace.collector.read.reach",
        "ringtrace.collector.ingest.otlp.fast_spans",
        "ringtrace.collector.ingest.otlp.trace_lanes",
    }
)


def imported_modules(tree: ast.Module) -> set[str]:
    """Every module an import in ``tree`` names (anywhere in it, a function's imports too), and for ``from m import
    n`` also ``m.n`` (``n`` may be a module)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            names |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return names


@cache
def imports_twinned(path: Path) -> bool:
    """Whether the module at ``path`` imports any of ``TWINNED``."""
    return bool(imported_modules(ast.parse(path.read_text(encoding="utf-8"))) & TWINNED)
