"""The NATS side of ``--jetstream``: connecting to the cluster (credentials, token, TLS) and making the stream say
what the options say (``max_bytes``, discard, ``max_age``, replicas, storage), and the collectors' heartbeat stream
(``heartbeats.py``) the same replicas and storage."""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from ringtrace.collector.jetstream.heartbeats import HEARTBEAT_MAX_AGE_S, heartbeat_stream
from ringtrace.collector.jetstream.publisher import DUPLICATE_WINDOW_S
from ringtrace.collector.jetstream.subjects import stream_subjects
from ringtrace.wire.errors import ConfigError

__all__ = ["ClusterOptions", "StreamOptions", "connect", "ensure_heartbeat_stream", "ensure_stream"]

log = logging.getLogger("ringtrace.collector.jetstream")

#: How long start waits for the cluster's JetStream to answer (a cluster just started elects its leaders first).
READY_TIMEOUT_S: Final = 30.0
#: How long start tries the servers before it gives up (nats-py set to reconnect for ever would try the first
#: connection for ever too, and the collector would hang, silent, at start).
CONNECT_TIMEOUT_S: Final = 10.0
#: How long one attempt at a server may take (its TCP connect, then its INFO and CONNECT).
_ATTEMPT_TIMEOUT_S: Final = 2
#: The heartbeat stream's max_bytes: the newest heartbeat of each collector (each one message, at most max_payload).
HEARTBEAT_STREAM_BYTES: Final = 64 * 1024 * 1024
#: NATS's error codes for replicas the servers cannot hold: a server that is not clustered; too few servers (no
#: suitable peers for placement; insufficient resources, which a cluster electing its leaders says too).
_REPLICAS_NOT_CLUSTERED: Final = 10074
_NO_PEERS: Final = 10005
_INSUFFICIENT_RESOURCES: Final = 10023


@dataclass(frozen=True)
class ClusterOptions:
    servers: tuple[str, ...]
    creds: str | None = None
    token: str | None = None
    tls_ca: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None


@dataclass(frozen=True)
class StreamOptions:
    name: str
    max_bytes: int
    #: "ring": discard old; "discard": discard new.
    policy: str
    replicas: int
    storage: str
    max_age_s: float | None


class _GaveUp(Exception):
    """Raised by the error callback once start gave up connecting: none of the errors nats-py's connect loop catches
    to try again (``OSError``, ``nats.errors.Error``, ``TimeoutError``), it ends that loop."""


#: Connections that came too late, being closed (held until they are).
_late_closes: set[asyncio.Future[Any]] = set()


def _close_if_connected(connecting: asyncio.Future[Any]) -> None:
    if not connecting.cancelled() and connecting.exception() is None:
        closing = asyncio.ensure_future(connecting.result().close())
        _late_closes.add(closing)
        closing.add_done_callback(_late_closes.discard)


def _tls(options: ClusterOptions) -> ssl.SSLContext | None:
    if options.tls_ca is None and options.tls_cert is None:
        return None
    try:
        context = ssl.create_default_context(cafile=options.tls_ca)
        if options.tls_cert is not None:
            context.load_cert_chain(options.tls_cert, options.tls_key)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"--jetstream TLS: cannot load the certificates: {exc}") from None
    return context


async def connect(options: ClusterOptions, name: str, closing: Callable[[], bool]) -> Any:
    """A connection to the cluster that reconnects for ever (to any server it learns of); ``closing``: whether the
    collector is closing it (nothing to warn of then).

    Raises:
        ConfigError: nats-py is not installed; no server could be reached; the credentials are refused.
    """
    try:
        import nats
    except ImportError:
        raise ConfigError(
            "--jetstream needs nats-py, the jetstream extra: pip install '.[collector,jetstream]' in a ringtrace "
            "checkout"
        ) from None
    servers = list(options.servers)

    async def disconnected() -> None:
        if not closing():
            log.warning("disconnected from the NATS cluster; reconnecting")

    async def reconnected() -> None:
        url = connecting.result().connected_url
        log.info("reconnected to the NATS cluster at %s", url.netloc if url else "?")

    last_error: list[Exception] = []
    giving_up = False

    async def error(exc: Exception) -> None:
        last_error[:] = [exc]
        log.debug("NATS: %s: %s", type(exc).__name__, exc)
        if giving_up:  # (nats-py calls this after each failed attempt of its connect loop: it ends the loop)
            raise _GaveUp

    extra: dict[str, Any] = {}
    if options.creds is not None:
        if not os.access(options.creds, os.R_OK):
            raise ConfigError(f"--jetstream-creds: cannot read {options.creds!r}")
        extra["user_credentials"] = options.creds
    if options.token is not None:
        extra["token"] = options.token
    tls = _tls(options)
    if tls is not None:
        extra["tls"] = tls
    connecting = asyncio.ensure_future(nats.connect(
        servers, name=name, allow_reconnect=True, max_reconnect_attempts=-1, reconnect_time_wait=0.25,
        connect_timeout=_ATTEMPT_TIMEOUT_S, ping_interval=5, max_outstanding_pings=2, disconnected_cb=disconnected,
        reconnected_cb=reconnected, error_cb=error, **extra,
    ))  # fmt: skip
    # Not asyncio.wait_for, which waits for the connect it cancels to end: on 3.11 a cancellation that meets a
    # refused attempt is lost in nats-py's own wait_for (it returns the attempt's error, which nats-py's loop takes
    # for one more failed attempt), and the loop went on for ever, the collector hung at start. Cancelled here, the
    # connect ends at once or at its next failed attempt (``error``): waited for that long at most.
    try:
        await asyncio.wait({connecting}, timeout=CONNECT_TIMEOUT_S)
    finally:
        if not connecting.done():
            giving_up = True
            connecting.cancel()
            await asyncio.wait({connecting}, timeout=_ATTEMPT_TIMEOUT_S + 1)
            if not connecting.done():  # (ends at its next attempt's failure; closed should that attempt connect)
                connecting.add_done_callback(_close_if_connected)
    if connecting.done() and not connecting.cancelled() and connecting.exception() is None:
        return connecting.result()
    failure = None if not connecting.done() or connecting.cancelled() else connecting.exception()
    if failure is None or isinstance(failure, _GaveUp):
        why = f"{type(last_error[0]).__name__}: {last_error[0]}" if last_error else "no answer"
        raise ConfigError(
            f"--jetstream: cannot connect to {', '.join(servers)} (tried for {CONNECT_TIMEOUT_S:g} s; last: {why})"
        )
    raise ConfigError(f"--jetstream: cannot connect to {', '.join(servers)}: {type(failure).__name__}: {failure}")


def _stream_config(options: StreamOptions) -> Any:
    from nats.js.api import DiscardPolicy, StorageType, StreamConfig

    return StreamConfig(
        name=options.name,
        subjects=[stream_subjects(options.name)],
        max_bytes=options.max_bytes,
        discard=DiscardPolicy.OLD if options.policy == "ring" else DiscardPolicy.NEW,
        max_age=options.max_age_s or 0,
        storage=StorageType.FILE if options.storage == "file" else StorageType.MEMORY,
        num_replicas=options.replicas,
        # (the servers refuse a duplicate window longer than the messages may live)
        duplicate_window=min(DUPLICATE_WINDOW_S, options.max_age_s or DUPLICATE_WINDOW_S),
    )


async def ensure_stream(js: Any, options: StreamOptions) -> None:
    """Create the stream, or update it to ``options``; waits up to READY_TIMEOUT_S for JetStream to answer.

    Raises:
        ConfigError: the cluster refuses the stream (too few servers for the replicas, storage changed, ...).
    """
    await _ensure(js, _stream_config(options), f"--jetstream-stream {options.name}")


async def ensure_heartbeat_stream(js: Any, options: StreamOptions) -> None:
    """Create the stream of the collectors' heartbeats (``heartbeats.py``) beside the stream ``options`` says, with
    its replicas and storage (servers may hold no memory streams at all: NATS's Helm chart leaves that off), or
    update it; as ``ensure_stream``."""
    from nats.js.api import DiscardPolicy, StorageType, StreamConfig

    name = heartbeat_stream(options.name)
    config = StreamConfig(
        name=name, subjects=[f"{name}.*"], max_msgs_per_subject=1, max_bytes=HEARTBEAT_STREAM_BYTES,
        discard=DiscardPolicy.OLD, max_age=HEARTBEAT_MAX_AGE_S, duplicate_window=HEARTBEAT_MAX_AGE_S,
        storage=StorageType.FILE if options.storage == "file" else StorageType.MEMORY, num_replicas=options.replicas,
    )  # fmt: skip
    await _ensure(js, config, f"the collectors' heartbeat stream {name}")


async def _ensure(js: Any, config: Any, what: str) -> None:
    """Create the stream ``config`` says, or update it to that; ``what``: its name in an error."""
    from nats.js.errors import APIError, BadRequestError, ServiceUnavailableError

    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        try:
            try:
                await js.add_stream(config)
            except BadRequestError as exc:
                if exc.err_code != 10058:  # (the name is in use, with other settings)
                    raise
                await _warn_of_changes(js, config)
                await js.update_stream(config)
            return
        except (ServiceUnavailableError, TimeoutError) as exc:
            last: BaseException = exc
        except APIError as exc:
            if not _may_pass(exc):
                raise ConfigError(_refusal(what, exc, config)) from None
            last = exc
        except Exception as exc:  # no responders while the cluster elects its meta leader
            last = exc
        if time.monotonic() > deadline:
            if isinstance(last, APIError) and last.err_code is not None:
                raise ConfigError(f"{_refusal(what, last, config)}, still after {READY_TIMEOUT_S:.0f}s") from None
            raise ConfigError(
                f"--jetstream: JetStream did not answer within {READY_TIMEOUT_S:.0f}s: {last}"
                f"{_replicas_hint(last, config)}"
            ) from None
        await asyncio.sleep(0.25)


def _may_pass(exc: Any) -> bool:
    """Whether the servers' refusal ``exc`` may pass as the cluster forms or heals: JetStream not ready yet, too few
    servers while electing, or a peer that is offline now (a server still starting, or restarting)."""
    if exc.err_code in (10008, _INSUFFICIENT_RESOURCES):
        return True
    return exc.err_code == _NO_PEERS and "offline" in str(exc.description)


def _refusal(what: str, exc: Any, config: Any) -> str:
    return f"{what}: the cluster refuses it: {exc.description}{_replicas_hint(exc, config)}"


def _replicas_hint(exc: BaseException, config: Any) -> str:
    """What to do when the servers refuse the replicas, or the bytes, asked for (NATS's own message does not name the
    option)."""
    code = getattr(exc, "err_code", None)
    replicas = config.num_replicas or 1
    if "insufficient storage" in str(getattr(exc, "description", "")):  # (not too few servers: too little room)
        return (f" (its max_bytes, {config.max_bytes:,} bytes, is more than the servers have room for beside their "
                f"other streams: give a smaller --capacity, or the servers more JetStream storage)")  # fmt: skip
    if code == _REPLICAS_NOT_CLUSTERED:
        return f" (--jetstream-replicas is {replicas}: give --jetstream-replicas 1 for a server that is not clustered)"
    if code in (_NO_PEERS, _INSUFFICIENT_RESOURCES) and replicas > 1:
        return (f" (--jetstream-replicas {replicas} needs {replicas} servers with JetStream in the cluster: give "
                f"fewer, down to --jetstream-replicas 1, or run more servers)")  # fmt: skip
    return ""


def _setting(value: object, unit: str = "") -> str:
    if value is None or value == 0:
        return "none"
    name = getattr(value, "value", value)  # (an enum: its NATS name)
    return f"{name:g}{unit}" if isinstance(name, float) else f"{name}{unit}"


def _setting_changes(old: Any, new: Any) -> list[str]:
    """What a stream's configuration ``new`` changes in ``old``, as ``"replicas 3 -> 1"`` and the like."""
    changes = []
    for field, name, unit in (
        ("num_replicas", "replicas", ""), ("max_bytes", "max_bytes", ""), ("discard", "discard", ""),
        ("max_age", "max_age", " s"), ("storage", "storage", ""),
    ):  # fmt: skip
        before, after = getattr(old, field, None), getattr(new, field, None)
        if _setting(before, unit) != _setting(after, unit):
            changes.append(f"{name} {_setting(before, unit)} -> {_setting(after, unit)}")
    return changes


async def _warn_of_changes(js: Any, config: Any) -> None:
    """Say what this collector's options change in a stream other collectors may share (they set it as their own
    options said: the last one started wins, for all of them)."""
    try:
        info = await js.stream_info(config.name)
    except Exception as exc:  # (the update goes ahead; it says what it cannot tell)
        log.warning("JetStream stream '%s' exists with other settings; cannot read them: %s", config.name, exc)
        return
    changes = _setting_changes(info.config, config)
    if changes:
        log.warning(
            "JetStream stream '%s' existed with other settings, now this collector's: %s (every collector sharing it "
            "should be given the same options)", config.name, ", ".join(changes),
        )  # fmt: skip
