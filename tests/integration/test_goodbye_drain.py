"""A connection the collector said GOODBYE to is drained for up to GOODBYE_DRAIN_S with its side shut (write_eof):
meanwhile nothing may write to it, or a snapshot's FLUSH (and the collector's stop) fails."""

from __future__ import annotations

import socket
import time

import pytest
from collector_process import CollectorProcess
from ringtrace.wire.frames import Hello, Strings, encode, preamble

pytestmark = pytest.mark.integration


def test_a_snapshot_and_the_stop_while_a_refused_connection_drains_do_not_fail() -> None:
    collector = CollectorProcess("--capacity", "3MB", "--max-string-bytes", "8MiB")
    sock = None
    try:
        host, port = collector.tcp_address.rsplit(":", 1)
        sock = socket.create_connection((host, int(port)))
        hello = Hello(pid=4242, host="h", process_name="refused", instance_id="i" * 32, boot_id="", monotonic_ns=1,
                      wall_ns=time.time_ns(), client_version="x", protocol_min=2, protocol_max=2)  # fmt: skip
        sock.sendall(preamble() + encode(hello))
        try:  # tables past the capacity; the peer keeps its socket open (it has not read the GOODBYE yet)
            for first in range(0, 40_000, 500):
                sock.sendall(encode(Strings(first, tuple("x" * 150 + str(i) for i in range(first, first + 500)))))
        except OSError:
            pass
        collector.wait_for_log(lambda line: "closing connection from" in line)
        status, body = collector.get("/snapshot?format=chrome&flush_timeout_s=0.5")
        assert status == 200, body[:300]
    finally:
        collector.stop()
        if sock is not None:
            sock.close()
    assert not any("Traceback" in line for line in collector.lines), "\n".join(collector.lines[-30:])
