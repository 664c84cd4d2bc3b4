"""Whether the JetStream stream takes events now (``/readyz``), and what a failed publish to it means, in one line
for ``/stats`` (``failing``), ``/readyz`` and the log.

The stream takes events while a NATS server is connected and publishes go through: this collector's segments, and
its heartbeat, published every second whether or not a client sends (so an idle collector knows too).

nats-py's errors say what the client or the server saw (``nats: timeout``, ``409 duplicate message id is in
process``), not what it means for the stream. The one most seen while a stream's replicas lose their quorum is the
409: the first attempt of a message timed out while its leader waited for a quorum that never came, and the retry,
with the same message id (``publisher.py``), finds that attempt still "in process". Read without importing nats-py
(by the attributes and names of its errors), as the publisher's refusals are.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Readiness", "publish_failure"]

#: nats-py's errors of a connection that is down or going down: the client is reconnecting.
_DISCONNECTED = frozenset(
    {"ConnectionClosedError", "ConnectionReconnectingError", "ConnectionDrainingError", "StaleConnectionError",
     "UnexpectedEOF", "OutboundBufferLimitError", "ConnectionRefusedError", "ConnectionResetError"}
)  # fmt: skip


def publish_failure(exc: BaseException, timeout_s: float) -> str:
    """What ``exc``, raised by a publish to a stream that waited ``timeout_s`` for its answer, means: a sentence,
    then what nats-py said, in parentheses."""
    name = type(exc).__name__
    said = f"{name}: {exc}"
    description = str(getattr(exc, "description", None) or "")
    code = getattr(exc, "code", None)
    if "duplicate message id is in process" in description.lower():
        return (
            "the stream has not stored an earlier attempt of this message yet: too few of its replicas answer to make "
            f"a quorum (or a leader is being elected), so it stores nothing ({code} {description})"
        )
    if name in ("NoStreamResponseError", "NoRespondersError", "ServiceUnavailableError") or code == 503:
        why = "JetStream is not running on the server, or the stream has no leader"
        return f"no server answers for the stream: {why} ({said})"
    if isinstance(exc, TimeoutError):
        return (
            f"no answer from the stream within {timeout_s:g} s: too few of its replicas answer to make a quorum or "
            f"elect a leader, or the servers are overloaded ({said})"
        )
    if name in _DISCONNECTED:
        return f"not connected to any NATS server: reconnecting ({said})"
    if code is not None:
        return f"the stream answered {code}: {description or 'no description'} ({said})"
    return said


class Readiness:
    """Whether stream ``stream_name`` takes events now; its heartbeat tells ``heartbeat_failed`` how each beat went."""

    def __init__(self, stream_name: str) -> None:
        self.stream_name = stream_name
        #: Why the last heartbeat could not be published ("": it was).
        self.heartbeat_failing = ""

    def heartbeat_failed(self, why: str) -> None:
        self.heartbeat_failing = why

    def not_ready(self, client: Any, publishing: str) -> str | None:
        """Why the stream cannot take events now, given the NATS ``client`` and why publishes of segments fail
        (``publishing``; "": they do not); None: it takes them."""
        if client is None or not client.is_connected:
            return "not connected to any NATS server of --jetstream: reconnecting"
        if publishing:
            return f"JetStream stream {self.stream_name!r} cannot take events: {publishing}"
        if self.heartbeat_failing:
            return f"this collector's heartbeat cannot be published to JetStream: {self.heartbeat_failing}"
        return None
