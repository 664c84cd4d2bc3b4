"""The NATS side of ``--jetstream``: connecting to the cluster (credentials, token, TLS) and making the stream say
what the options say (``max_bytes``, discard, ``max_age``, replicas, storage)."""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from ringtrace.client.wire.errors import ConfigError
from ringtrace.collector.jetstream.publisher import DUPLICATE_WINDOW_S
from ringtrace.collector.jetstream.subjects import stream_subjects

__all__ = ["ClusterOptions", "StreamOptions", "connect", "ensure_stream"]

log = logging.getLogger("ringtrace.collector.jetstream")

#: How long start waits for the cluster's JetStream to answer (a cluster just started elects its leaders first).
READY_TIMEOUT_S: Final = 30.0
#: How long start tries to reach a server (nats-py, told to reconnect for ever, would try its first connection for
#: ever too: the collector would never start nor stop).
CONNECT_TIMEOUT_S: Final = 10.0


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
        raise ConfigError("--jetstream needs nats-py: pip install 'ringtrace[jetstream]'") from None
    servers = list(options.servers)

    async def disconnected() -> None:
        if not closing():
            log.warning("disconnected from the NATS cluster; reconnecting")

    async def reconnected() -> None:
        log.info("reconnected to the NATS cluster at %s", client.connected_url.netloc if client.connected_url else "?")

    async def error(exc: Exception) -> None:
        log.debug("NATS: %s: %s", type(exc).__name__, exc)

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
    try:
        client = await asyncio.wait_for(
            nats.connect(
                servers, name=name, allow_reconnect=True, max_reconnect_attempts=-1, reconnect_time_wait=0.25,
                connect_timeout=2, ping_interval=5, max_outstanding_pings=2, disconnected_cb=disconnected,
                reconnected_cb=reconnected, error_cb=error, **extra,
            ),
            CONNECT_TIMEOUT_S,
        )  # fmt: skip
    except TimeoutError:
        raise ConfigError(
            f"--jetstream: cannot connect to {', '.join(servers)} within {CONNECT_TIMEOUT_S:.0f}s"
        ) from None
    except Exception as exc:
        raise ConfigError(f"--jetstream: cannot connect to {', '.join(servers)}: {type(exc).__name__}: {exc}") from None
    return client


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
    from nats.js.errors import APIError, BadRequestError, ServiceUnavailableError

    config = _stream_config(options)
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        try:
            try:
                await js.add_stream(config)
            except BadRequestError as exc:
                if exc.err_code != 10058:  # (the name is in use, with other settings)
                    raise
                await js.update_stream(config)
            return
        except (ServiceUnavailableError, TimeoutError) as exc:
            last: BaseException = exc
        except APIError as exc:
            if exc.err_code not in (10008, 10023):  # (JetStream not ready; insufficient resources while electing)
                raise ConfigError(
                    f"--jetstream-stream {options.name}: the cluster refuses it: {exc.description}"
                ) from None
            last = exc
        except Exception as exc:  # no responders while the cluster elects its meta leader
            last = exc
        if time.monotonic() > deadline:
            raise ConfigError(f"--jetstream: JetStream did not answer within {READY_TIMEOUT_S:.0f}s: {last}") from None
        await asyncio.sleep(0.25)
