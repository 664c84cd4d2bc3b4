"""The HTTP integrations across processes, with no ringtrace call in the programs (``http_programs.py``): a bootstrap
module (``sitecustomize``, as a launcher would do) connects each process to a real collector and applies the
integrations; a requests client calls an aiohttp server, a waitress server and gunicorn's sync worker, an httpx
client (sync and async) a wsgiref server, a uvicorn server, a hypercorn server and gunicorn's ASGI worker. The
snapshot holds a client span per request in one process, its server span in the other, the arrow between them, and
``?trace_id=`` selects both; the answers the clients get are the same without the integrations."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from collector_process import CollectorProcess
from waiting import wait_for

PROGRAMS = Path(__file__).with_name("http_programs.py")
CALLS = 3
INTEGRATIONS = ("asgi", "wsgi", "aiohttp-server", "requests", "httpx", "aiohttp-client", "urllib")
BOOTSTRAP = f"""
import os
if os.environ.get("HTTP_TEST_COLLECTOR"):
    import ringtrace.client
    from ringtrace.client.integrations import apply

    apply(
        # (a busy machine may need more than the default 2 s to deliver at exit: a forked worker's spans, say)
        ringtrace.client.connect(
            os.environ["HTTP_TEST_COLLECTOR"], process_name=os.environ["HTTP_TEST_NAME"], exit_timeout_s=30
        ),
        {set(INTEGRATIONS)!r},
    )
"""


@pytest.fixture
def bootstrap(tmp_path: Path) -> Path:
    (tmp_path / "sitecustomize.py").write_text(textwrap.dedent(BOOTSTRAP))
    return tmp_path


def environment(bootstrap: Path | None, collector: CollectorProcess | None, name: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HTTP_TEST_")}
    if bootstrap is not None and collector is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(bootstrap), env.get("PYTHONPATH")]))
        env["HTTP_TEST_COLLECTOR"], env["HTTP_TEST_NAME"] = collector.tcp_address, name
    return env


def run_pair(server_role: str, client_role: str, env: dict[str, dict[str, str]]) -> list[Any]:
    """The server and the client, each a process of its own; what the client got."""
    server = subprocess.Popen(
        [sys.executable, str(PROGRAMS), server_role], stdout=subprocess.PIPE, text=True, env=env["server"]
    )
    with server:
        try:
            assert server.stdout is not None
            port = server.stdout.readline().split()[1]
            client = subprocess.run(
                [sys.executable, str(PROGRAMS), client_role, port, str(CALLS)],
                capture_output=True, text=True, timeout=120, check=False, env=env["client"],
            )  # fmt: skip
            assert client.returncode == 0, client.stderr
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/stop", timeout=30) as response:
                assert response.status == 200
            assert server.wait(60) == 0
        finally:
            if server.poll() is None:
                server.send_signal(signal.SIGUSR1)  # its threads' stacks, on its stderr: where it hangs
                with contextlib.suppress(subprocess.TimeoutExpired):
                    server.wait(5)
                server.kill()
                server.wait()
    got: list[Any] = json.loads(client.stdout)
    return got


def spans(trace: dict[str, Any], process: str) -> list[dict[str, Any]]:
    names = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"}
    return [e for e in trace["traceEvents"] if e["ph"] == "X" and names.get(e["pid"]) == process]


@pytest.fixture
def collector() -> Iterator[CollectorProcess]:
    process = CollectorProcess()
    try:
        yield process
    finally:
        process.stop()


# The server's spans, by path: one per request the client made of it (the unanswered one reaches no server).
_SERVED = {f"/items/{i}" for i in range(CALLS)} | {"/missing", "/fail", "/stream", "/file"}


@pytest.mark.parametrize(
    ("server_role", "client_role", "work_label"),
    [
        ("aiohttp-server", "requests-client", "GET /items/{item}"),
        ("wsgi-server", "httpx-client", None),
        ("asgi-server", "httpx-client", None),
        ("hypercorn-server", "httpx-client", None),
        ("waitress-server", "requests-client", None),
        ("gunicorn-server", "requests-client", None),
        ("gunicorn-asgi-server", "httpx-client", None),
    ],
)
def test_a_request_between_two_programs_is_one_trace_with_no_code_change(
    collector: CollectorProcess, bootstrap: Path, server_role: str, client_role: str, work_label: str | None
) -> None:
    env = {role: environment(bootstrap, collector, role) for role in ("server", "client")}
    traced = run_pair(server_role, client_role, env)
    per_call = 2 if client_role == "httpx-client" else 1  # httpx: once sync, once async
    requests_made = (CALLS + 5) * per_call  # /items x CALLS, /missing, /fail, /stream, /file, a port with no server

    def both_sides() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        trace = collector.snapshot()
        clients = [e for e in spans(trace, "client") if e["args"].get("kind") == "client"]
        # (not GET /stop's: the server stops as it answers it, and may end before its span does)
        servers = [
            e for e in spans(trace, "server") if e["args"].get("kind") == "server" and e["args"]["path"] != "/stop"
        ]
        return clients, servers

    wanted = (requests_made, requests_made - per_call)  # (the request to a port with no server reaches none)
    wait_for(
        lambda: tuple(map(len, both_sides())),
        timeout_s=60,
        what=f"every client and server span ({wanted[0]} and {wanted[1]}; last seen: how many of each)",
        until=lambda counts: counts == wanted,
    )
    clients, servers = both_sides()
    by_parent = {e["args"].get("parent_span_id"): e for e in servers}
    assert len(by_parent) == len(servers)  # one server span per request: none twice
    assert sorted(e["args"]["path"] for e in servers) == sorted([*_SERVED] * per_call)
    unanswered = 0
    for client in clients:
        args = client["args"]
        assert "?" not in args["url"] and client["name"].startswith("GET 127.0.0.1:")
        server = by_parent.get(args["span_id"])
        if server is None:  # the call to a port where nothing listens
            assert args["exception"] and args["response"]["error"] and "status" not in args["response"]
            unanswered += 1
            continue
        path = server["args"]["path"]
        assert args["url"].endswith(path) and server["args"]["trace_id"] == args["trace_id"]
        assert client["flow_out"] is True and server["flow_in"] is True and client["bind_id"] == server["bind_id"]
        expected = {"/missing": 404, "/fail": 500}.get(path, 200)
        assert args["response"]["status"] == expected
        if path == "/fail":  # the handler's exception, recorded by the server's span and raised on to the server
            assert server["args"]["exception"] == "ValueError"
            assert server["args"]["response"]["error"] == "the handler failed"
        else:
            assert server["args"]["response"]["status"] == expected
        if path.startswith("/items/") and work_label is not None:
            assert server["name"] == work_label and server["args"]["route"] == "/items/{item}"
        elif path.startswith("/items/"):
            assert server["name"] == f"GET {path}"
        # One request's trace, in both processes: the two spans and nothing else.
        selected = collector.snapshot(f"?trace_id={args['trace_id']}")
        kinds = sorted(e["args"]["kind"] for e in selected["traceEvents"] if e["ph"] == "X")
        assert kinds == ["client", "server"]
    assert unanswered == per_call
    # In error (`has_error`), as OpenTelemetry's HTTP conventions have it: a client span of a 4xx or 5xx answer or of
    # none, a server span whose handler raised (its 500), and not a server span that answered 404.
    in_error = [s["args"] for s in collector.json("/spans?has_error=yes&limit=1000")["spans"]]
    said = Counter((args["kind"], args["path"] if "path" in args else urlsplit(args["url"]).path) for args in in_error)
    unreached = [urlsplit(a["url"]).path for a in in_error if a["kind"] == "client" and "status" not in a["response"]]
    errors = Counter({("client", "/missing"): 1, ("client", "/fail"): 1, ("server", "/fail"): 1})
    assert said == Counter({key: count * per_call for key, count in errors.items()}) + Counter(
        ("client", path) for path in unreached
    )
    assert len(unreached) == per_call

    # The same programs without the integrations get the same answers.
    plain = {role: environment(None, None, role) for role in ("server", "client")}
    assert run_pair(server_role, client_role, plain) == traced
