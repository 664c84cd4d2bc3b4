"""What the incident tests share: client processes driven line by line (``incident_peer.py``), and a collector's
incidents read back (its records over HTTP, an incident's events from its Chrome JSON)."""

from __future__ import annotations

import contextlib
import http.server
import json
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from collector_process import CollectorProcess
from waiting import wait_for

PEER = Path(__file__).with_name("incident_peer.py")


class Peer:
    """One ``incident_peer.py`` process connected to ``collector``."""

    def __init__(self, collector: CollectorProcess, name: str) -> None:
        self.name = name
        self.proc = subprocess.Popen(
            [sys.executable, str(PEER), collector.tcp_address, name],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        ready = self._line()
        assert ready.startswith("ready"), ready
        self.pid = int(ready.split()[1])

    def _line(self) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line, f"peer {self.name} ended (exit code {self.proc.poll()})"
        return line.strip()

    def send(self, command: str) -> str:
        """Run ``command`` in the peer; its answer (``ok ...``)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        if command == "crash":
            self.proc.wait(30)
            return ""
        return self._line()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.send("exit")
            self.proc.wait(30)
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()


def incidents(collector: CollectorProcess, query: str = "") -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = collector.json("/incidents" + query)["incidents"]
    return records


def wait_for_incidents(
    collector: CollectorProcess, count: int, *, status: str = "saved", timeout_s: float = 60.0
) -> list[dict[str, Any]]:
    """The first ``count`` incidents of ``status``, once there are as many (newest first)."""
    return wait_for(
        lambda: incidents(collector, f"?status={status}"),
        until=lambda records: len(records) >= count,
        timeout_s=timeout_s,
        what=f"{count} incidents {status}",
    )


def incident_events(collector: CollectorProcess, incident_id: str) -> list[dict[str, Any]]:
    """The events of an incident's snapshot, as its Chrome JSON shows them (metadata left out)."""
    status, body = collector.get(f"/incidents/{incident_id}?format=chrome")
    assert status == 200, body
    events: list[dict[str, Any]] = [e for e in json.loads(body)["traceEvents"] if e.get("ph") != "M"]
    return events


def stats(collector: CollectorProcess) -> dict[str, Any]:
    """``/stats``' incident totals and what the engine adds (rules, captures, their memory, counts per rule)."""
    everything = collector.json("/stats")
    return {**everything["incidents"], **everything["incident_engine"]}


def wait_for_counts(collector: CollectorProcess, timeout_s: float = 60.0, **expected: int) -> dict[str, Any]:
    """``stats`` once its totals are ``expected`` (an incident is listed once written, counted a moment later)."""
    return wait_for(
        lambda: stats(collector),
        until=lambda counts: all(counts[key] == value for key, value in expected.items()),
        timeout_s=timeout_s,
        what=f"the incidents counted {expected}",
    )


@contextlib.contextmanager
def webhook_server() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """A local HTTP server a rule's webhook tells (204 to each POST): its URL, and the records told, in order."""
    told: list[dict[str, Any]] = []

    class Hook(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            told.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hook) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}/incident", told
        finally:
            server.shutdown()


def free_port() -> int:
    """A TCP port nothing listens on now (for a collector restarted where its clients reconnect)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port
