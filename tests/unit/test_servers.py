"""Servers: the ingest and HTTP servers bind port 0 and say where, serve, and close in the order a stop needs."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from aiohttp import web
from ringtrace.collector.http.guard import HttpGuard
from ringtrace.collector.service.config import CollectorConfig
from ringtrace.collector.service.servers import Servers, host_port


class Greeter(asyncio.BufferedProtocol):
    """A stand-in for an ingest connection: it says hello and hangs up."""

    def connection_made(self, transport: Any) -> None:
        transport.write(b"hello")
        transport.close()

    def get_buffer(self, sizehint: int) -> bytearray:
        return bytearray(max(sizehint, 1))

    def buffer_updated(self, nbytes: int) -> None:
        pass


async def ok(request: web.Request) -> web.Response:
    return web.Response(text="ok")


def test_both_servers_bind_port_0_serve_and_then_refuse_once_closed(caplog: Any) -> None:
    async def scenario() -> tuple[bytes, bytes]:
        servers = Servers(CollectorConfig(tcp_port=0, http_port=0))
        await servers.open_ingest(Greeter, timeout_s=5.0)
        app = web.Application()
        app.router.add_get("/", ok)
        await servers.open_http(app, HttpGuard(timeout_s=30.0, max_connections=4))
        assert servers.tcp_address is not None and servers.http_address is not None
        reader, writer = await asyncio.open_connection(*servers.tcp_address)
        greeting = await reader.read()
        writer.close()
        reader, writer = await asyncio.open_connection(*servers.http_address)
        writer.write(b"GET / HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n")
        answer = await reader.read()
        writer.close()
        assert servers.stop_ingest()
        await servers.ingest_closed()
        await servers.close_http()
        for address in (servers.tcp_address, servers.http_address):
            with pytest.raises(OSError):
                await asyncio.open_connection(*address)
        return greeting, answer

    with caplog.at_level(logging.INFO, logger="ringtrace.collector"):
        greeting, answer = asyncio.run(scenario())
    assert greeting == b"hello"
    assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"ok")
    assert "ingest listening on tcp://127.0.0.1:" in caplog.text
    assert "http listening on http://127.0.0.1:" in caplog.text


def test_servers_never_opened_have_nothing_to_close() -> None:
    servers = Servers(CollectorConfig())
    assert servers.stop_ingest() is False
    asyncio.run(servers.ingest_closed())
    asyncio.run(servers.close_http())
    assert (servers.tcp_address, servers.http_address) == (None, None)


def test_an_ipv6_host_is_written_in_brackets_as_clients_take_it() -> None:
    assert host_port(("::1", 9000)) == "[::1]:9000"
    assert host_port(("127.0.0.1", 9000)) == "127.0.0.1:9000"


def test_listening_beyond_loopback_with_no_token_is_warned_of(caplog: Any) -> None:
    servers = Servers(CollectorConfig(tcp_host="0.0.0.0", insecure_open=True))
    with caplog.at_level(logging.INFO, logger="ringtrace.collector"):
        servers.log_exposure(token_required=False)
    assert "with no token (--insecure-open)" in caplog.text
