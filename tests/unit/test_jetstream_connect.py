"""Start's connect to the NATS cluster gives up at its deadline even when nats-py's connect loop loses the
cancellation: on 3.11 its own ``asyncio.wait_for`` returns a refused attempt's error in place of a cancellation that
meets it, which the loop (reconnecting for ever) takes for one more failed attempt, and goes on."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytest.importorskip("nats")

import nats
from ringtrace.collector.jetstream import cluster
from ringtrace.collector.jetstream.cluster import ClusterOptions, connect
from ringtrace.wire.errors import ConfigError

SERVERS = ("nats://127.0.0.1:1", "nats://127.0.0.1:2")
#: The most attempts the stand-in makes (a bound: one that never ended would hang the test's loop at its close).
MOST_ATTEMPTS = 300


class CancellationLosingConnect:
    """``nats.connect`` as its loop runs against servers that refuse, every cancellation lost in an attempt."""

    def __init__(self) -> None:
        self.cancellations = 0
        self.attempts_after_cancellation = 0

    async def __call__(self, servers: list[str], *, error_cb: Any, **options: Any) -> Any:
        for _ in range(MOST_ATTEMPTS):
            try:
                await asyncio.sleep(0.01)  # (an attempt, refused)
            except asyncio.CancelledError:
                self.cancellations += 1  # lost: taken for the attempt's failure
            if self.cancellations:
                self.attempts_after_cancellation += 1
            await error_cb(ConnectionRefusedError(111, "Connection refused"))
        raise asyncio.CancelledError


def test_a_connect_whose_cancellation_nats_loses_still_ends_at_the_deadline_naming_the_servers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stand_in = CancellationLosingConnect()
    monkeypatch.setattr(nats, "connect", stand_in)
    monkeypatch.setattr(cluster, "CONNECT_TIMEOUT_S", 0.2)
    with pytest.raises(ConfigError) as raised:
        asyncio.run(connect(ClusterOptions(SERVERS), "test", lambda: False))
    said = str(raised.value)
    assert all(server in said for server in SERVERS) and "ConnectionRefusedError" in said, said
    assert stand_in.cancellations == 1
    assert stand_in.attempts_after_cancellation == 1  # its next failed attempt ended it
