"""``ringtrace-collector`` / ``python -m ringtrace.collector``: parse flags, then serve until SIGINT or SIGTERM.

Every flag may also come from the environment: ``--max-frame-size`` from ``RINGTRACE_MAX_FRAME_SIZE``, and so on
(``ENVIRONMENT``; ``--insecure-open`` from ``RINGTRACE_INSECURE_OPEN=1``). A flag given on the command line wins over
its variable; a bad value is refused naming the variable. The token may also be given itself, in ``RINGTRACE_TOKEN``
(a token file wins).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import signal
import sys
import typing
from collections.abc import Callable, Mapping, Sequence

from ringtrace.client.errors import ConfigError
from ringtrace.client.options import environment_token, parse_address, parse_size, read_token_file

from .app import Collector, CollectorConfig
from .segments import FSYNC_POLICIES

__all__ = ["ENVIRONMENT", "config_from_args", "main", "parse_listen_address", "parse_size"]

log = logging.getLogger("ringtrace.collector")
#: The collector's GIL switch interval (``main``).
GIL_SWITCH_INTERVAL_S = 0.0005


def parse_listen_address(text: str) -> tuple[str, int]:
    """``"HOST:PORT"`` to listen on; port 0 picks a free one."""
    address: tuple[str, int] = parse_address(text, listen=True)
    return address


def _arg(parse: Callable[[str], object]) -> Callable[[str], object]:
    def convert(text: str) -> object:
        try:
            return parse(text)
        except ConfigError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    convert.__name__ = parse.__name__
    return convert


#: Each flag's environment variable.
ENVIRONMENT = {
    flag: "RINGTRACE_" + flag[2:].upper().replace("-", "_")
    for flag in (
        "--tcp", "--http", "--capacity", "--process-capacity", "--policy", "--data-dir", "--fsync", "--forget-after",
        "--max-frame-size", "--max-connections", "--max-connections-per-address", "--idle-timeout",
        "--handshake-timeout", "--max-snapshots", "--http-timeout", "--max-http-connections", "--max-strings",
        "--max-string-bytes", "--max-schema-bytes", "--max-tracks", "--log-level", "--token-file", "--tls-cert",
        "--tls-key", "--insecure-open",
    )
}  # fmt: skip
#: Flags that take no value: their variable is 1, true or yes (set), or 0, false, no or empty (not set).
_SWITCHES = {"--insecure-open"}


class _EnvironmentError(Exception):
    pass


class _Checker(argparse.ArgumentParser):
    """The same flags, for one variable's value at a time: an error is raised, to be reported under its name."""

    def error(self, message: str) -> typing.NoReturn:
        raise _EnvironmentError(message.split(": ", 1)[-1])


def environment_args(
    environ: Mapping[str, str], argv: Sequence[str] = (), prog: str = "ringtrace-collector"
) -> list[str]:
    """The flags the environment sets and ``argv`` (the command line) does not, as command-line arguments. An empty
    variable is unset.

    Raises:
        SystemExit: a variable's value is refused (the message names the variable), as for a bad flag.
    """
    args: list[str] = []
    checker = build_parser(prog, _Checker)
    given = {arg.split("=", 1)[0] for arg in argv if arg.startswith("--")}
    for flag, name in ENVIRONMENT.items():
        value = environ.get(name)
        if not value or flag in given:
            continue
        if flag in _SWITCHES:
            if value.strip().lower() in ("1", "true", "yes"):
                args.append(flag)
            elif value.strip().lower() not in ("0", "false", "no", ""):
                build_parser(prog).error(f"environment variable {name}={value!r}: must be 1, true, yes, 0, false or no")
            continue
        try:
            checker.parse_args([flag, value])
        except _EnvironmentError as exc:
            build_parser(prog).error(f"environment variable {name}={value!r}: {exc}")
        args += [flag, value]
    return args


def _set_by(message: str, from_environment: list[str]) -> str:
    """`` (set by RINGTRACE_...)`` when the flag a refusal names came from its variable."""
    for flag in from_environment[::2]:
        if f"({flag})" in message or f"{flag}:" in message:
            return f" (set by {ENVIRONMENT[flag]})"
    return ""


def build_parser(
    prog: str = "ringtrace-collector", parser_class: type[argparse.ArgumentParser] = argparse.ArgumentParser
) -> argparse.ArgumentParser:
    defaults = CollectorConfig()
    parser = parser_class(
        prog=prog,
        description="Collect ringtrace events over TCP, keep the recent past in memory, serve snapshots over HTTP.",
        epilog="Every flag may also be set in the environment: --max-frame-size as RINGTRACE_MAX_FRAME_SIZE, and so "
        "on (RINGTRACE_ and the flag's name in capitals, - as _). A flag on the command line wins.",
    )
    parser.add_argument(
        "--tcp",
        type=_arg(parse_listen_address),
        default=(defaults.tcp_host, defaults.tcp_port),
        metavar="HOST:PORT",
        help=f"ingest listener (default {defaults.tcp_host}:{defaults.tcp_port})",
    )
    parser.add_argument(
        "--http",
        type=_arg(parse_listen_address),
        default=(defaults.http_host, defaults.http_port),
        metavar="HOST:PORT",
        help=f"HTTP listener (default {defaults.http_host}:{defaults.http_port})",
    )
    parser.add_argument(
        "--capacity",
        type=_arg(parse_size),
        default=defaults.capacity_bytes,
        metavar="SIZE",
        help="memory for stored events, e.g. 64MB, 1GiB, 1048576 (default 256MiB)",
    )
    parser.add_argument(
        "--process-capacity",
        type=_arg(parse_size),
        default=None,
        metavar="SIZE",
        help="most one process may hold, so that a noisy one overwrites its own past, not everyone's "
        "(default: the whole capacity)",
    )
    parser.add_argument(
        "--policy",
        choices=["ring", "discard"],
        default=defaults.policy,
        help="when full: ring overwrites the oldest, discard refuses the newest and keeps the beginning "
        "(default %(default)s)",
    )
    parser.add_argument(
        "--data-dir",
        metavar="DIR",
        default=None,
        help="keep segments as files in DIR (created if missing) and recover them on start; "
        "without it everything stays in memory",
    )
    parser.add_argument(
        "--fsync",
        choices=FSYNC_POLICIES,
        default=defaults.fsync,
        help="with --data-dir, what survives a power loss (a crash of the collector loses nothing acknowledged "
        "whatever it is): never leaves writing back to the OS, interval syncs every second in the background, flush "
        "syncs before acknowledging each client flush, always after every batch received; each that syncs makes "
        "ingest as slow as the disk (default %(default)s)",
    )
    parser.add_argument(
        "--forget-after",
        type=float,
        default=defaults.forget_after_s,
        metavar="SECONDS",
        help="forget a process this long after its last connection ended, once nothing of it is stored; its counts "
        "stay in the totals (default %(default)s)",
    )
    parser.add_argument(
        "--max-frame-size",
        type=_arg(parse_size),
        default=defaults.max_frame_bytes,
        metavar="SIZE",
        help="largest frame a client may send (default 1MiB)",
    )
    parser.add_argument("--max-connections", type=int, default=defaults.max_connections, help="default %(default)s")
    parser.add_argument(
        "--max-connections-per-address",
        type=int,
        default=None,
        metavar="N",
        help="connections one peer address may hold; loopback peers are not counted per address (default: half of "
        "--max-connections)",
    )
    parser.add_argument(
        "--max-snapshots",
        type=int,
        default=defaults.max_snapshots,
        metavar="N",
        help="snapshots served at once, each pinning what it reads; more get a 503 with Retry-After "
        "(default %(default)s)",
    )
    parser.add_argument(
        "--http-timeout",
        type=float,
        default=defaults.http_timeout_s,
        metavar="SECONDS",
        help="close an HTTP connection that has not begun a request (its headers complete) this long after it "
        "opened or after its previous request, or that takes nothing of a response (a snapshot, a live tail) for "
        "as long (default %(default)s)",
    )
    parser.add_argument(
        "--max-http-connections",
        type=int,
        default=defaults.max_http_connections,
        metavar="N",
        help="HTTP connections open at once; more are closed at once (default %(default)s)",
    )
    parser.add_argument(
        "--idle-timeout",
        type=float,
        default=defaults.idle_timeout_s,
        metavar="SECONDS",
        help="close a connection that sent nothing for this long after its HELLO; clients send a heartbeat every "
        "15 s (default %(default)s)",
    )
    parser.add_argument(
        "--handshake-timeout",
        type=float,
        default=defaults.handshake_timeout_s,
        metavar="SECONDS",
        help="close a connection that has not said HELLO this long after it opened; a TLS handshake must end "
        "within as long (default %(default)s)",
    )
    parser.add_argument(
        "--max-strings",
        type=int,
        default=defaults.max_strings,
        help="string table entries one connection may declare; clients adopt it (default %(default)s)",
    )
    parser.add_argument(
        "--max-string-bytes",
        type=_arg(parse_size),
        default=defaults.max_string_bytes,
        metavar="SIZE",
        help="UTF-8 bytes of all the labels one connection may declare; clients adopt it (default 2MiB)",
    )
    parser.add_argument(
        "--max-schema-bytes",
        type=_arg(parse_size),
        default=defaults.max_schema_bytes,
        metavar="SIZE",
        help="UTF-8 bytes of the texts of all the event kinds one connection may declare (names, fields); clients "
        "adopt it (default 256KiB)",
    )
    parser.add_argument(
        "--max-tracks",
        type=int,
        default=defaults.max_tracks,
        help="tracks (threads, task lanes) one connection may declare (default %(default)s)",
    )
    parser.add_argument(
        "--token-file",
        metavar="FILE",
        default=None,
        help="require the token in FILE (one trailing newline ignored) of every client (in HELLO) and HTTP request "
        "(Authorization: Bearer TOKEN); RINGTRACE_TOKEN may hold the token itself instead",
    )
    parser.add_argument(
        "--tls-cert", metavar="FILE", default=None, help="certificate chain (PEM): both listeners speak TLS 1.2+"
    )
    parser.add_argument("--tls-key", metavar="FILE", default=None, help="the private key of --tls-cert (PEM)")
    parser.add_argument(
        "--insecure-open",
        action="store_true",
        help="listen on an address other than loopback without a token (only where a firewall or a private network "
        "guards the ports)",
    )
    parser.add_argument(
        "--log-level",
        default="INFO",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="default %(default)s",
    )
    return parser


async def _serve(config: CollectorConfig) -> None:
    collector = Collector(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):  # before start(): its log lines tell supervisors we are up
        loop.add_signal_handler(sig, stop.set)
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


def config_from_args(args: argparse.Namespace, environ: Mapping[str, str]) -> CollectorConfig:
    """The configuration the parsed flags (and ``RINGTRACE_TOKEN``) say, checked; nothing is bound yet.

    Raises:
        ConfigError: a value is refused (a token file that cannot be read, a listener beyond loopback without a
            token, ...); the message says which and why.
    """
    token = read_token_file(args.token_file) if args.token_file is not None else environment_token(environ)
    return CollectorConfig(
        tcp_host=args.tcp[0],
        tcp_port=args.tcp[1],
        http_host=args.http[0],
        http_port=args.http[1],
        capacity_bytes=args.capacity,
        process_capacity_bytes=args.process_capacity,
        policy=args.policy,
        data_dir=args.data_dir,
        fsync=args.fsync,
        forget_after_s=args.forget_after,
        max_frame_bytes=args.max_frame_size,
        max_connections=args.max_connections,
        max_connections_per_address=args.max_connections_per_address,
        idle_timeout_s=args.idle_timeout,
        handshake_timeout_s=args.handshake_timeout,
        max_snapshots=args.max_snapshots,
        http_timeout_s=args.http_timeout,
        max_http_connections=args.max_http_connections,
        max_strings=args.max_strings,
        max_string_bytes=args.max_string_bytes,
        max_schema_bytes=args.max_schema_bytes,
        max_tracks=args.max_tracks,
        token=token,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        insecure_open=args.insecure_open,
    )


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
        log.error("cannot start: %s", exc)
        return 1
    return 0
