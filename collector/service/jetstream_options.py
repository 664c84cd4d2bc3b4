"""The rows of the option table that set up the JetStream tier (``--jetstream`` and the flags that go with it), and
the checks of their values."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from ringtrace.collector.service.option_row import Option
from ringtrace.wire.errors import ConfigError
from ringtrace.wire.parsing import parse_size, read_token_file

__all__ = ["JETSTREAM_OPTIONS", "check_stream_name", "parse_nats_urls"]


def parse_nats_urls(text: str) -> tuple[str, ...]:
    """``"nats://h1:4222,nats://h2:4222"`` (``nats://`` or ``tls://``; a bare ``HOST:PORT`` is ``nats://``)."""
    urls = []
    for part in text.split(","):
        url = part.strip()
        if not url:
            continue
        if "://" not in url:
            url = "nats://" + url
        scheme = url.split("://", 1)[0]
        if scheme not in ("nats", "tls"):
            raise ConfigError(f"--jetstream: {url!r} is not a nats:// or tls:// URL")
        urls.append(url)
    if not urls:
        raise ConfigError(f"--jetstream: {text!r} names no server (give nats://HOST:PORT[,nats://HOST:PORT...])")
    return tuple(urls)


def check_stream_name(name: str, what: str) -> None:
    """A JetStream stream name that is also a subject token (the stream's subjects begin with it)."""
    if not name or any(not (c.isascii() and (c.isalnum() or c in "_-")) for c in name):
        raise ConfigError(
            f"--jetstream-stream: {name!r} must be letters, digits, '_' and '-' (a stream name and subject token)"
        )


def _jetstream_token(token_file: str | None, environ: Mapping[str, str]) -> str | None:
    """The NATS token in ``--jetstream-token-file``."""
    return read_token_file(token_file, "--jetstream-token-file") if token_file is not None else None


# In the order of --help, within the table (``option_table.OPTIONS``).
JETSTREAM_OPTIONS: Final[tuple[Option, ...]] = (
    Option(
        "jetstream",
        "store in a NATS JetStream stream on the cluster at these comma-separated URLs (nats://h1:4222,...) instead "
        "of memory or --data-dir: every collector on the stream serves every process's events; --capacity is the "
        "stream's max_bytes, --policy its discard (ring: old, discard: new)",
        None,
        flag="--jetstream",
        parse=parse_nats_urls,
        metavar="URLS",
        none_means="off",
    ),
    Option(
        "jetstream_stream",
        "with --jetstream, the stream's name (created if missing, updated to these settings if not); its subjects "
        "are NAME.HOST.PID.INSTANCE",
        "ringtrace",
        flag="--jetstream-stream",
        metavar="NAME",
        check=check_stream_name,
    ),
    Option(
        "jetstream_replicas",
        "with --jetstream, the copies of each message the cluster keeps (a FLUSH is acknowledged once they are)",
        3,
        flag="--jetstream-replicas",
        parse=int,
        metavar="N",
        range=(1, 5),
    ),
    Option(
        "jetstream_storage",
        "with --jetstream, where the servers keep the stream",
        "file",
        flag="--jetstream-storage",
        parse=str.lower,
        choices=("file", "memory"),
    ),
    Option(
        "jetstream_buffer_bytes",
        "with --jetstream, memory for segments the stream has not acknowledged yet; when it is full (the cluster "
        "cannot be reached), new events are refused and counted discarded",
        64 * 1024 * 1024,
        flag="--jetstream-buffer",
        parse=parse_size,
        metavar="SIZE",
        range=(1024 * 1024, 2**40),
        unit="bytes",
    ),
    Option(
        "jetstream_creds",
        "with --jetstream, a NATS credentials file (user JWT and NKey seed)",
        None,
        flag="--jetstream-creds",
        metavar="FILE",
    ),
    Option(
        "jetstream_token",
        "with --jetstream, the NATS token in FILE (one trailing newline ignored)",
        None,
        flag="--jetstream-token-file",
        metavar="FILE",
        secret=True,
        load=_jetstream_token,
    ),
    Option(
        "jetstream_tls_ca",
        "with --jetstream, speak TLS to the servers, trusting the CA certificates (PEM) in FILE",
        None,
        flag="--jetstream-tls-ca",
        metavar="FILE",
    ),
    Option(
        "jetstream_tls_cert",
        "with --jetstream, the client certificate chain (PEM) to show the servers (with --jetstream-tls-key)",
        None,
        flag="--jetstream-tls-cert",
        metavar="FILE",
    ),
    Option(
        "jetstream_tls_key",
        "the private key of --jetstream-tls-cert (PEM)",
        None,
        flag="--jetstream-tls-key",
        metavar="FILE",
    ),
)
