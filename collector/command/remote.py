"""Reaching a collector's HTTP API from a ``ringtrace`` subcommand: its address, its token, TLS, and errors said as
one line with a hint of what to do."""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any, Final

from ringtrace.collector.command.failure import CommandError
from ringtrace.wire.errors import ConfigError
from ringtrace.wire.parsing import environment_token, read_token_file

__all__ = [
    "CHUNK",
    "Access",
    "access_token",
    "add_access",
    "endpoint_url",
    "fetch",
    "snapshot_url",
    "stored_events",
    "tls_context",
]


_HTTP_TIMEOUT_S: Final = 120.0


_ENDPOINTS: Final = ("/snapshot", "/stream", "/sources")


CHUNK: Final = 1 << 16


_CACERT_VARIABLE: Final = "RINGTRACE_CACERT"


_TOKEN_HINT: Final = "give it the collector's token: --token-file FILE, or RINGTRACE_TOKEN"


_CACERT_HINT: Final = "for a collector with a private CA or a self-signed certificate: --cacert FILE"


def add_access(parser: argparse.ArgumentParser, ingest: bool = False) -> None:
    group = parser.add_argument_group("a collector with a token or TLS")
    group.add_argument(
        "--token-file",
        metavar="FILE",
        help="the collector's token, in FILE (default: the file RINGTRACE_TOKEN_FILE names, or RINGTRACE_TOKEN)",
    )
    if ingest:
        group.add_argument("--tls", action="store_true", help="connect with TLS (--cacert implies it)")
    group.add_argument(
        "--cacert",
        metavar="FILE",
        help="trust the collector's certificate if the CA in FILE (PEM) signed it, as for a self-signed one "
        "(default: RINGTRACE_CACERT, else the system's CAs)",
    )


def access_token(args: argparse.Namespace) -> str | None:
    """The token the flags or the environment give, if any."""
    try:
        return read_token_file(args.token_file) if args.token_file is not None else environment_token()
    except ConfigError as exc:
        raise CommandError(str(exc), 2) from None


def tls_context(args: argparse.Namespace) -> ssl.SSLContext | None:
    """A client TLS context trusting ``--cacert`` (or ``RINGTRACE_CACERT``); None: the system's CAs, if need be."""
    cacert = args.cacert if args.cacert is not None else os.environ.get(_CACERT_VARIABLE) or None
    if cacert is None:
        return None
    try:
        return ssl.create_default_context(cafile=cacert)
    except (OSError, ssl.SSLError) as exc:
        raise CommandError(f"--cacert: cannot load the CA certificates in {cacert}: {exc.strerror or exc}", 2) from None


class Access:
    """How to reach a collector's HTTP API: its token, and the TLS context for an https:// URL."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.token = access_token(args)
        self.context = tls_context(args)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A collector never redirects: a redirect is answered as an error, so that the token goes nowhere else."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def stored_events(url: str, access: Access) -> int | None:
    """How many events the collector at ``url`` holds in all (None if it does not say)."""
    try:
        with fetch(endpoint_url(url, "/stats", []), access) as response:
            return int(json.loads(response.read())["stored_events"])
    except (CommandError, ValueError, KeyError, TypeError):
        return None


def snapshot_url(base: str, params: list[tuple[str, str]]) -> str:
    return endpoint_url(base, "/snapshot", params)


def endpoint_url(base: str, endpoint: str, params: list[tuple[str, str]]) -> str:
    """``endpoint`` of the collector at ``base`` (an HTTP address, perhaps with a path before it), with ``params``."""
    wrong = f"URL must be a collector's HTTP address such as http://127.0.0.1:7701, got {base!r}"
    try:
        parts = urllib.parse.urlsplit(base)
        parts.port  # noqa: B018 (a port that is no number, or past 65535, raises)
    except ValueError as exc:  # an IPv6 address with no closing ], a port that is no number
        raise CommandError(f"{wrong} ({exc})", 2) from None
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise CommandError(wrong, 2)
    if parts.username is not None or parts.password is not None:  # (said without them: one may be a password)
        shown = urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
        raise CommandError(
            f"URL must not hold a user or password (in {shown!r}): a collector takes a token, give it with "
            "--token-file FILE (or RINGTRACE_TOKEN_FILE, RINGTRACE_TOKEN)",
            2,
        )
    path = parts.path.rstrip("/")
    for known in _ENDPOINTS:  # the address of another endpoint of the same collector will do
        path = path.removesuffix(known)
    path += endpoint
    query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True) + params  # the URL's own go first
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, urllib.parse.urlencode(query), ""))


#: What OpenSSL says of a peer that answers TLS in plain text (3.2 and newer say the second).
_NOT_TLS: Final = ("WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE")


@contextlib.contextmanager
def fetch(url: str, access: Access, method: str = "GET") -> Iterator[Any]:
    request = urllib.request.Request(url, method=method)
    if access.token is not None:
        request.add_header("Authorization", f"Bearer {access.token}")
    opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=access.context), _NoRedirect)
    try:
        response = opener.open(request, timeout=_HTTP_TIMEOUT_S)
    except urllib.error.HTTPError as exc:
        with exc:
            detail = _error_text(exc.read(2000).decode("utf-8", "replace").strip())
        hint = f" ({_TOKEN_HINT})" if exc.code == 401 and access.token is None else ""
        raise CommandError(f"the collector answered {exc.code}: {detail}{hint}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        hint = ""
        if isinstance(reason, ssl.SSLCertVerificationError):
            hint = f" ({_CACERT_HINT})"
        elif isinstance(reason, ssl.SSLError) and reason.reason in _NOT_TLS:  # no TLS at the other end
            hint = " (the collector speaks plain HTTP there: use an http:// URL, or give it --tls-cert and --tls-key)"
        elif isinstance(reason, http.client.RemoteDisconnected) and url.startswith("http://"):  # a TLS listener
            hint = (
                " (is that the collector's ingest port, --tcp? the commands use its HTTP port, --http; or does it"
                " use TLS, --tls-cert? then use an https:// URL)"
            )
        raise CommandError(f"cannot reach {urllib.parse.urlsplit(url).netloc}: {reason}{hint}") from None
    with response:
        yield response


def _error_text(detail: str) -> str:
    """What an error answer says: its text, or the ``error`` of a JSON one (``{"error": "..."}``)."""
    if detail.startswith("{"):
        with contextlib.suppress(ValueError, AttributeError):
            said = json.loads(detail).get("error")
            if isinstance(said, str):
                return said
    return detail
