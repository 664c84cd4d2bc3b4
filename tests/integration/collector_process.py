"""Run the real collector as a subprocess on 127.0.0.1 port 0 and talk to it over real sockets."""

from __future__ import annotations

import contextlib
import json
import re
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from ringtrace.wire.frames import Flush, FlushAck, Frame, encode, preamble
from ringtrace.wire.handshake_frames import Hello
from ringtrace.wire.reader import CLOSED, NEED_DATA, FrameReader
from waiting import wait_for

_LISTEN = re.compile(r"(ingest|http) listening on (?:tcp|https?)://([\d.]+):(\d+)")


class CollectorProcess:
    """``python -m ringtrace.collector`` with its stderr collected line by line.

    Args:
        token: sent as ``Authorization: Bearer`` by ``get`` and ``post`` (the collector's own comes from its flags).
        cafile: the CA that signed the collector's certificate, for an https URL.
        env: the collector's environment (default: this process's).
    """

    def __init__(
        self,
        *extra_args: str,
        tcp: str = "127.0.0.1:0",
        token: str | None = None,
        cafile: str | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.args = [
            sys.executable,
            "-m",
            "ringtrace.collector",
            "--tcp",
            tcp,
            "--http",
            "127.0.0.1:0",
            *extra_args,
        ]
        self.lines: list[str] = []
        self.token = token
        self.tls = ssl.create_default_context(cafile=cafile) if cafile is not None else None
        self._changed = threading.Condition()
        self.proc = subprocess.Popen(self.args, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env)
        self._pumping = threading.Thread(target=self._pump, daemon=True)
        self._pumping.start()
        try:
            ingest = self.wait_for_log(lambda line: "ingest listening" in line)
            http = self.wait_for_log(lambda line: "http listening" in line)
        except TimeoutError:
            self.stop()
            raise
        self.tcp_address = "{}:{}".format(*_LISTEN.search(ingest).group(2, 3))  # type: ignore[union-attr]
        scheme = "https" if "https://" in http else "http"
        self.http_url = "{}://{}:{}".format(scheme, *_LISTEN.search(http).group(2, 3))  # type: ignore[union-attr]

    def _pump(self) -> None:
        assert self.proc.stderr is not None
        try:
            for line in self.proc.stderr:
                with self._changed:
                    self.lines.append(line.rstrip("\n"))
                    self._changed.notify_all()
        except ValueError:  # closed by stop() while a child that inherited the pipe keeps it open
            pass

    def wait_for_log(self, match: Callable[[str], bool], timeout_s: float = 60.0) -> str:
        """The first log line ``match`` accepts, waiting for it up to ``timeout_s``: long, as a machine busy with other
        work may take many seconds to start a collector, and a collector that exits ends the wait at once."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while True:
                found = next((line for line in self.lines if match(line)), None)
                if found is not None:
                    return found
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self.proc.poll() is not None:
                    raise TimeoutError(
                        f"no matching log line within {timeout_s}s; log so far:\n" + "\n".join(self.lines)
                    )
                self._changed.wait(remaining)

    def get(self, path: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        """GET ``path``, with ``headers`` (default: the token's, if it has one)."""
        return self._open(urllib.request.Request(self.http_url + path, headers=self._headers(headers)))

    def post(self, path: str, form: dict[str, str] | None = None) -> tuple[int, bytes]:
        """POST to ``path`` (parameters in its query string, and ``form`` as a form body)."""
        data = urllib.parse.urlencode(form).encode() if form is not None else b""
        request = urllib.request.Request(self.http_url + path, data=data, method="POST", headers=self._headers(None))
        return self._open(request)

    def _headers(self, headers: dict[str, str] | None) -> dict[str, str]:
        if headers is not None:
            return headers
        return {"Authorization": f"Bearer {self.token}"} if self.token is not None else {}

    def _open(self, request: urllib.request.Request) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(request, timeout=60, context=self.tls) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as exc:
            with exc:
                return exc.code, exc.read()

    def json(self, path: str) -> Any:
        status, body = self.get(path)
        assert status == 200, body
        return json.loads(body)

    def snapshot(self, query: str = "") -> dict[str, Any]:
        status, body = self.get("/snapshot" + query)
        assert status == 200, body
        return json.loads(body)

    def wait_for_stored(self, count: int, timeout_s: float = 30.0) -> None:
        wait_for(
            lambda: json.loads(self.get("/healthz")[1])["stored_events"],
            until=lambda stored: stored >= count,
            timeout_s=timeout_s,
            what=f"{count} events stored",
        )

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._pumping.join(5)  # every line it wrote is read (the pipe ends with the process)
        if self.proc.stderr is not None:
            self.proc.stderr.close()


def run_script(collector: CollectorProcess, script: str, *args: str) -> str:
    """Run ``script`` in a new Python process, given the collector's ingest address and ``args``; its standard output
    (it must exit with 0)."""
    done = subprocess.run(
        [sys.executable, "-c", script, collector.tcp_address, *args], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@contextlib.contextmanager
def recorded_collector(script: str, *process_names: str) -> Iterator[CollectorProcess]:
    """A collector that ``script`` recorded into, run once per name of ``process_names`` (given the collector's ingest
    address and the name; it must print its flush's result, True), and stopped at the end."""
    collector = CollectorProcess()
    try:
        for name in process_names:
            done = subprocess.run(
                [sys.executable, "-c", script, collector.tcp_address, name], capture_output=True, text=True, timeout=60
            )
            assert done.returncode == 0 and done.stdout.strip() == "True", done.stderr
        yield collector
    finally:
        collector.stop()


def run_collector(
    *args: str, env: dict[str, str] | None = None, timeout_s: float = 60.0
) -> subprocess.CompletedProcess[str]:
    """The collector run to its end: for one that must refuse to start (if it does start, its listeners are on
    127.0.0.1, port 0, and the timeout ends it)."""
    command = [sys.executable, "-m", "ringtrace.collector", "--tcp", "127.0.0.1:0", "--http", "127.0.0.1:0", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, env=env, check=False)


def hello(pid: int = 4242, instance: str = "raw", **fields: Any) -> Hello:
    """A HELLO as a hand-made client sends it."""
    return Hello(pid, "test-host", "raw", instance, "", 1, 2, "test", **fields)


def closed_by_peer(sock: socket.socket) -> bool:
    """Read until the collector closes the connection (True) or the read times out (False)."""
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
    return True


class RawClient:
    """A hand-made client on a real socket: says HELLO, waits for the collector's answer, then sends what it is told."""

    def __init__(self, address: str, first: Hello | None = None) -> None:
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.reader = FrameReader("collector")
        self.sock.sendall(preamble() + encode(first or hello()))
        self.answer = self.next_frame()  # WELCOME, or GOODBYE

    def next_frame(self) -> Frame:
        while True:
            frame = self.reader.next_frame()
            if frame is not NEED_DATA and frame is not CLOSED:
                return frame  # type: ignore[return-value]
            if frame is CLOSED:
                raise ConnectionError("collector closed the connection")
            self.reader.receive_data(self.sock.recv(65536))

    def send(self, *frames: Frame) -> None:
        self.sock.sendall(b"".join(encode(f) for f in frames))

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def flush(self, token: int = 77) -> None:
        """Wait until the collector acknowledged everything sent so far."""
        self.send(Flush(token))
        while not (isinstance(frame := self.next_frame(), FlushAck) and frame.token == token):
            pass

    def closed_by_peer(self) -> bool:
        return closed_by_peer(self.sock)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def run_workload(
    *args: str, timeout_s: float = 120.0, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``workload.py`` in a fresh interpreter (a real client process), in ``env`` (default: this one's)."""
    from pathlib import Path

    script = Path(__file__).with_name("workload.py")
    return subprocess.run(
        [sys.executable, str(script), *args], capture_output=True, text=True, timeout=timeout_s, check=False, env=env
    )


def events(trace: dict[str, Any], phase: str) -> list[dict[str, Any]]:
    return [e for e in trace["traceEvents"] if e["ph"] == phase]


def metadata(trace: dict[str, Any], name: str) -> dict[tuple[int, int], str]:
    return {(e["pid"], e["tid"]): e["args"]["name"] for e in events(trace, "M") if e["name"] == name}


__all__: Sequence[str] = [
    "CollectorProcess",
    "RawClient",
    "closed_by_peer",
    "events",
    "hello",
    "metadata",
    "run_collector",
    "run_workload",
]
