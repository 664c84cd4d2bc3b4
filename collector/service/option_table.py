"""Every setting of the collector, declared once: one row (``Option``, ``option_row.py``) per setting in ``OPTIONS``;
those of the JetStream tier are in ``jetstream_options.py``.

From the table come:

- ``CollectorConfig``'s defaults and the check of each value (``config.py``, through ``option_fields.py``:
  ``field_default``, ``check_setting``);
- the command line's flags (``option_flags.py``: ``add_arguments``) and the settings they make (``settings_from_args``);
- what the environment sets: each flag's variable is ``RINGTRACE_`` and the flag's name in capitals, ``-`` as ``_``
  (``option_environment.py``: ``ENVIRONMENT``, ``environment_args``);
- the flag table of the docs (``option_docs.py``: ``flags_markdown``), which a test holds to the docs.

A new setting is one row here and one typed field in ``CollectorConfig`` (the field takes its default from the row).
"""

from __future__ import annotations

import typing
from collections.abc import Mapping
from typing import Final

from ringtrace.collector.service.jetstream_options import JETSTREAM_OPTIONS
from ringtrace.collector.service.option_row import Option
from ringtrace.collector.store.ring import MIN_SEGMENT_BYTES, Policy
from ringtrace.collector.store.segment_buffers import FSYNC_POLICIES
from ringtrace.wire.frame_types import (
    DEFAULT_MAX_FRAME_BYTES,
    DEFAULT_MAX_STACK_FRAMES,
    DEFAULT_MAX_STACKS,
    MAX_MAX_FRAME_BYTES,
    MIN_MAX_FRAME_BYTES,
)
from ringtrace.wire.parsing import check_token, environment_token, parse_address, parse_size, read_token_file

__all__ = ["OPTIONS", "parse_listen_address"]

#: What the wire protocol's WELCOME carries a count in.
_U32: Final = 2**32 - 1


def parse_listen_address(text: str) -> tuple[str, int]:
    """``"HOST:PORT"`` to listen on; port 0 picks a free one."""
    address: tuple[str, int] = parse_address(text, listen=True)
    return address


def _trigger_specs(text: str) -> tuple[str, ...]:
    """``--trigger``: one-line rules separated by ``;`` (read by the rule file's reader)."""
    return tuple(spec.strip() for spec in text.split(";") if spec.strip())


def _token(token_file: str | None, environ: Mapping[str, str]) -> str | None:
    """The token in ``--token-file``, else in the environment (``RINGTRACE_TOKEN_FILE``, ``RINGTRACE_TOKEN``)."""
    return read_token_file(token_file) if token_file is not None else environment_token(environ)


# -- the table ---------------------------------------------------------------------------------------------------------
# In the order of --help. Texts say what a setting does, not how fast (benchmark figures belong to benchmarks/).

OPTIONS: Final[tuple[Option, ...]] = (
    Option(
        "tcp",
        "ingest listener",
        ("127.0.0.1", 7700),
        flag="--tcp",
        parse=parse_listen_address,
        metavar="HOST:PORT",
        fields=("tcp_host", "tcp_port"),
    ),
    Option(
        "http",
        "HTTP listener",
        ("127.0.0.1", 7701),
        flag="--http",
        parse=parse_listen_address,
        metavar="HOST:PORT",
        fields=("http_host", "http_port"),
    ),
    Option(
        "otlp_http",
        "OTLP/HTTP listener (/v1/traces, /v1/logs and /v1/metrics from OpenTelemetry SDKs and collectors; 4318 is "
        "the usual port), with the token and TLS of the others",
        None,
        flag="--otlp-http",
        parse=parse_listen_address,
        metavar="HOST:PORT",
        none_means="off",
    ),
    Option(
        "otlp_grpc",
        "OTLP/gRPC listener (TraceService, LogsService and MetricsService, what several SDKs and the OpenTelemetry "
        "Collector send by default; 4317 is the usual port; needs the grpc extra), with the token and TLS of the "
        "others",
        None,
        flag="--otlp-grpc",
        parse=parse_listen_address,
        metavar="HOST:PORT",
        none_means="off",
    ),
    Option(
        "otlp_max_body_bytes",
        "largest OTLP request body, compressed or inflated (a larger one gets a 413, or RESOURCE_EXHAUSTED over gRPC)",
        8 * 1024 * 1024,
        flag="--otlp-max-body",
        parse=parse_size,
        metavar="SIZE",
        range=(64 * 1024, 2**30),
        unit="bytes",
    ),
    Option(
        "otlp_max_connections",
        "OTLP/HTTP connections open at once, apart from the HTTP API's; more are answered 503 with Retry-After and "
        "closed at once",
        1024,
        flag="--otlp-max-connections",
        parse=int,
        metavar="N",
        range=(1, 2**20),
    ),
    Option(
        "otlp_max_processes",
        "OTLP resources (processes) with a stream open at once, apart from --max-connections; an idle one's stream is "
        "closed for a new one, and a request whose new resources do not fit gets a 503 with Retry-After",
        1024,
        flag="--otlp-max-processes",
        parse=int,
        metavar="N",
        range=(1, 2**20),
    ),
    Option(
        "otlp_max_span_events",
        "events, and links, of an OTLP span kept at most; those past it are dropped, counted in its process's "
        "rejected_events and said in partial_success (the span is stored)",
        1000,
        flag="--otlp-max-span-events",
        parse=int,
        metavar="N",
        range=(0, 2**20),
    ),
    Option(
        "capacity_bytes",
        "memory for stored events, e.g. 64MB, 1GiB, 1048576",
        256 * 1024 * 1024,
        flag="--capacity",
        parse=parse_size,
        metavar="SIZE",
        unit="bytes",
    ),
    Option(
        "process_capacity_bytes",
        "most one process may hold, so that a noisy one overwrites its own past, not everyone's",
        None,
        flag="--process-capacity",
        parse=parse_size,
        metavar="SIZE",
        none_means="the whole capacity",
        unit="bytes",
    ),
    Option(
        "policy",
        "when full: ring overwrites the oldest, discard refuses the newest and keeps the beginning",
        "ring",
        flag="--policy",
        parse=str.lower,  # RING as well as ring
        choices=typing.get_args(Policy),
    ),
    Option(
        "data_dir",
        "keep segments as files in DIR (created if missing) and recover them on start; without it everything stays "
        "in memory",
        None,
        flag="--data-dir",
        metavar="DIR",
    ),
    Option(
        "fsync",
        "with --data-dir, what survives a power loss (a crash of the collector loses nothing acknowledged whatever it "
        "is): never leaves writing back to the OS, interval syncs every second in the background, flush syncs before "
        "acknowledging each client flush, always after every batch received; each that syncs makes ingest as slow as "
        "the disk",
        "never",
        flag="--fsync",
        parse=str.lower,
        choices=FSYNC_POLICIES,
    ),
    Option(
        "max_age_s",
        "remove events this long after their segment was sealed (a segment is sealed at most a quarter of this after "
        "it opened), counted overwritten; with --jetstream, the stream's max_age",
        None,
        flag="--max-age",
        parse=float,
        metavar="SECONDS",
        range=(1.0, 1e10),
        none_means="no limit",
    ),
    Option(
        "incidents_dir",
        "keep saved incidents (a record and a snapshot file each) in DIR (created if missing), with --data-dir too "
        "(instead of DATA_DIR/incidents); not with --jetstream (the fleet's object store keeps them)",
        None,
        flag="--incidents-dir",
        metavar="DIR",
        none_means="DATA_DIR/incidents with --data-dir, else ringtrace-incidents-PORT in the system's temporary "
        "directory, said at start",
    ),
    Option(
        "incidents_max_count",
        "saved incidents kept; past it the oldest are removed (counted in /metrics)",
        100,
        flag="--incidents-max-count",
        parse=int,
        metavar="N",
        range=(1, 10**6),
    ),
    Option(
        "incidents_max_bytes",
        "bytes of saved incidents' snapshot files kept; past it the oldest are removed (the newest is kept even if "
        "larger alone)",
        2**30,
        flag="--incidents-max-bytes",
        parse=parse_size,
        metavar="SIZE",
        range=(1, 2**62),
        unit="bytes",
    ),
    *JETSTREAM_OPTIONS,
    Option(
        "segment_bytes",
        "the size a stream's segments grow to (larger ones only when a frame and its session frames need it)",
        None,
        range=(MIN_SEGMENT_BYTES, 2**40),
        none_means="an eighth of the capacity (or of the process capacity, if smaller), between 64 KiB and 4 MiB",
        unit="bytes",
    ),
    Option(
        "forget_after_s",
        "forget a process this long after its last connection ended, once nothing of it is stored; its counts stay "
        "in the totals",
        60.0,
        flag="--forget-after",
        parse=float,
        metavar="SECONDS",
        range=(0, 1e9),
    ),
    Option(
        "max_frame_bytes",
        "largest frame a client may send (at most 256KiB with --jetstream; clients adopt it)",
        DEFAULT_MAX_FRAME_BYTES,
        flag="--max-frame-size",
        parse=parse_size,
        metavar="SIZE",
        range=(MIN_MAX_FRAME_BYTES, MAX_MAX_FRAME_BYTES),
        unit="bytes",
    ),
    Option(
        "max_connections",
        "client connections open at once; more are refused with a GOODBYE that says why, and counted",
        1024,
        flag="--max-connections",
        parse=int,
        metavar="N",
        range=(1, 2**31),
    ),
    Option(
        "max_connections_per_address",
        "connections one peer address may hold; loopback peers are not counted per address",
        None,
        flag="--max-connections-per-address",
        parse=int,
        metavar="N",
        range=(1, 2**31),
        none_means="half of --max-connections",
    ),
    Option(
        "max_snapshots",
        "snapshots served at once, each pinning what it reads; more get a 503 with Retry-After",
        4,
        flag="--max-snapshots",
        parse=int,
        metavar="N",
        range=(1, 1024),
    ),
    Option(
        "http_timeout_s",
        "close an HTTP connection that has not begun a request (its headers complete) this long after it opened or "
        "after its previous request, or that takes nothing of a response (a snapshot, a live tail) for as long; end an "
        "OTLP request whose body sends nothing for as long, or whose gRPC message has not all come",
        15.0,
        flag="--http-timeout",
        parse=float,
        metavar="SECONDS",
        range=(0.1, 1e6),
    ),
    Option(
        "max_http_connections",
        "HTTP API connections open at once; more are answered 503 with Retry-After and closed at once",
        256,
        flag="--max-http-connections",
        parse=int,
        metavar="N",
        range=(1, 2**20),
    ),
    Option(
        "idle_timeout_s",
        "close a connection that sent nothing for this long after its HELLO; clients send a heartbeat every 15 s",
        60.0,
        flag="--idle-timeout",
        parse=float,
        metavar="SECONDS",
        range=(1.0, 1e6),
    ),
    Option(
        "handshake_timeout_s",
        "close a connection that has not said HELLO this long after it opened; a TLS handshake must end within as long",
        10.0,
        flag="--handshake-timeout",
        parse=float,
        metavar="SECONDS",
        range=(1e-3, 1e6),
    ),
    Option(
        "snapshot_flush_timeout_s",
        "how long GET /snapshot waits for connected clients to flush, unless the query says otherwise",
        1.0,
        range=(0, 1e6),
    ),
    Option(
        "max_strings",
        "string table entries one connection may declare; clients adopt it",
        100_000,
        flag="--max-strings",
        parse=int,
        metavar="N",
        range=(2, _U32),
    ),
    Option(
        "max_string_bytes",
        "UTF-8 bytes of all the labels one connection may declare; clients adopt it",
        2 * 1024 * 1024,
        flag="--max-string-bytes",
        parse=parse_size,
        metavar="SIZE",
        range=(1024, 2**62),
        unit="bytes",
    ),
    Option(
        "max_schema_bytes",
        "UTF-8 bytes of the texts of all the event kinds one connection may declare (names, fields); clients adopt it",
        256 * 1024,
        flag="--max-schema-bytes",
        parse=parse_size,
        metavar="SIZE",
        range=(1024, 2**62),
        unit="bytes",
    ),
    Option(
        "max_tracks",
        "tracks (threads, task lanes) one connection may declare",
        10_000,
        flag="--max-tracks",
        parse=int,
        metavar="N",
        range=(2, _U32),
    ),
    Option("max_kinds", "event kinds one connection may declare", 1_000, range=(2, _U32)),
    Option(
        "max_stacks",
        "sampled stack nodes (a stack's frames, shared with the stacks that begin the same way) one connection may "
        "declare; clients adopt it, and a sample whose stack does not fit is kept without it; 0: no stack",
        DEFAULT_MAX_STACKS,
        flag="--max-stacks",
        parse=int,
        metavar="N",
        range=(0, _U32),
    ),
    Option(
        "max_stack_frames",
        "code locations (function, file, line) of sampled stacks one connection may declare; clients adopt it, and "
        "a sample whose stack does not fit is kept without it; 0: no stack",
        DEFAULT_MAX_STACK_FRAMES,
        flag="--max-stack-frames",
        parse=int,
        metavar="N",
        range=(0, _U32),
    ),
    Option(
        "token",
        "require the token in FILE (one trailing newline ignored) of every client (in HELLO) and HTTP request "
        "(Authorization: Bearer TOKEN); RINGTRACE_TOKEN may hold the token itself instead",
        None,
        flag="--token-file",
        metavar="FILE",
        check=check_token,
        secret=True,
        load=_token,
        environment_note="(or the token itself in `RINGTRACE_TOKEN`)",
    ),
    Option(
        "tls_cert", "certificate chain (PEM): both listeners speak TLS 1.2+", None, flag="--tls-cert", metavar="FILE"
    ),
    Option("tls_key", "the private key of --tls-cert (PEM)", None, flag="--tls-key", metavar="FILE"),
    Option(
        "insecure_open",
        "listen on an address other than loopback without a token (only where a firewall or a private network "
        "guards the ports)",
        False,
        flag="--insecure-open",
        switch=True,
    ),
    Option(
        "rules",
        "incident rules: a TOML file of [[rule]] tables (docs/incidents.md), read at start (a file with an error "
        "refuses the start, naming its line) and again on SIGHUP (an error keeps the rules in force)",
        None,
        flag="--rules",
        metavar="FILE",
        none_means="no rule file",
    ),
    Option(
        "triggers",
        "incident rules in one line each, separated by ';': 'NAME: key=value, ...' with the keys of a [[rule]] "
        "table (e.g. 'slow checkout: span=checkout*, min_duration=200ms, scope=trace'), beside --rules",
        None,
        flag="--trigger",
        parse=_trigger_specs,
        metavar="SPECS",
        none_means="none",
    ),
    Option(
        "incident_capacity_bytes",
        "memory for incidents' windows beside --capacity: a segment the ring lets go of while an incident holds it "
        "is kept from this budget until the incident is written (what does not fit is counted in the incident)",
        None,
        flag="--incident-capacity",
        parse=parse_size,
        metavar="SIZE",
        none_means="a quarter of the capacity",
        unit="bytes",
    ),
    Option(
        "log_level",
        "the least severe messages logged",
        "INFO",
        flag="--log-level",
        parse=str.upper,  # debug as well as DEBUG
        choices=("DEBUG", "INFO", "WARNING", "ERROR"),
        fields=(),
    ),
)
