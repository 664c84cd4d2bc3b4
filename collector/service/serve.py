"""``ringtrace-collector`` / ``python -m ringtrace.collector``: parse flags, then serve until SIGINT or SIGTERM (SIGHUP
reads the incident rules of ``--rules`` again).

The flags, their variables and the configuration they make come from the option table (``option_table.py``). Every flag
may also come from the environment: ``--max-frame-size`` from ``RINGTRACE_MAX_FRAME_SIZE``, and so on (``ENVIRONMENT``;
``--insecure-open`` from ``RINGTRACE_INSECURE_OPEN=1``). A flag given on the command line wins over its variable; a
bad value is refused naming the variable. The token may also be given itself, in ``RINGTRACE_TOKEN`` (a token file
wins).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import signal
import sys
from collections.abc import Sequence

try:  # the service's first third-party import: without the extra, say which install brings it
    import aiohttp  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on how ringtrace was installed
    raise ImportError("ringtrace.collector needs aiohttp: pip install 'ringtrace[collector]'") from exc

from ringtrace.collector.service.app import Collector
from ringtrace.collector.service.config import CollectorConfig, config_from_args
from ringtrace.collector.service.option_environment import ENVIRONMENT, environment_args
from ringtrace.collector.service.option_flags import add_arguments
from ringtrace.collector.service.option_table import parse_listen_address
from ringtrace.collector.short_usage import ShortUsageParser
from ringtrace.wire.errors import ConfigError
from ringtrace.wire.parsing import parse_size
from ringtrace.wire.version import __version__

__all__ = ["ENVIRONMENT", "config_from_args", "main", "parse_listen_address", "parse_size"]

log = logging.getLogger("ringtrace.collector")
#: The collector's GIL switch interval (``main``).
GIL_SWITCH_INTERVAL_S = 0.0005


def _set_by(message: str, from_environment: list[str]) -> str:
    """`` (set by RINGTRACE_...)`` when the flag a refusal names came from its variable."""
    for flag in from_environment:  # flags and their values; a switch (--insecure-open) has none
        if flag in ENVIRONMENT and (f"({flag})" in message or f"{flag}:" in message or message.startswith(f"{flag} ")):
            return f" (set by {ENVIRONMENT[flag]})"
    return ""


def build_parser(
    prog: str = "ringtrace-collector", parser_class: type[argparse.ArgumentParser] = ShortUsageParser
) -> argparse.ArgumentParser:
    parser = parser_class(
        prog=prog,
        allow_abbrev=False,  # (a flag's start would be taken for it: "--token X" for --token-file X)
        description="Collect ringtrace events over TCP, keep the recent past in memory, serve snapshots over HTTP.",
        epilog="Every flag may also be set in the environment: --max-frame-size as RINGTRACE_MAX_FRAME_SIZE, and so "
        "on (RINGTRACE_ and the flag's name in capitals, - as _). A flag on the command line wins.",
    )
    add_arguments(parser)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    return parser


async def _serve(config: CollectorConfig) -> None:
    collector = Collector(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):  # before start(): its log lines tell supervisors we are up
        loop.add_signal_handler(sig, stop.set)
    reloads: set[asyncio.Task[None]] = set()  # (a task not referenced may be collected before it ends)

    def reload_rules() -> None:
        task = loop.create_task(collector.incidents.engine.reload(), name="incident rules reload")
        reloads.add(task)
        task.add_done_callback(reloads.discard)

    loop.add_signal_handler(signal.SIGHUP, reload_rules)  # the incident rules read again (``--rules``)
    await collector.start()
    # Everything made so far (modules, classes, the server) lives as long as the collector: out of the cyclic GC's
    # sight, a full collection takes well under a millisecond instead of ~15, and it holds the GIL, and so the event
    # loop, for as long.
    gc.freeze()
    await stop.wait()
    log.info("shutting down")
    await collector.stop()


def _runner() -> asyncio.Runner:
    try:
        import uvloop
    except ImportError:
        log.info("event loop: asyncio (install uvloop for a faster one)")
        return asyncio.Runner()
    log.info("event loop: uvloop")
    return asyncio.Runner(loop_factory=uvloop.new_event_loop)


def main(argv: Sequence[str] | None = None, prog: str = "ringtrace-collector") -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    from_environment = environment_args(os.environ, argv, prog)
    args = build_parser(prog).parse_args([*from_environment, *argv])
    logging.basicConfig(
        level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    # A thread that wants the GIL waits this long before the holder is asked to let go (5 ms by default): the event
    # loop takes it back once per loop turn, and a snapshot written in Python (Perfetto's format, a pop) would hold
    # up each turn by as much.
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    try:
        config = config_from_args(args, os.environ)
        with _runner() as runner:
            runner.run(_serve(config))
    except ConfigError as exc:
        log.error("%s%s", exc, _set_by(str(exc), from_environment))
        return 2
    except OSError as exc:
        log.error("cannot start: %s%s", exc, _set_by(str(exc), from_environment))
        return 1
    return 0
