"""The token and TLS through a real collector: HELLO and ``Authorization: Bearer`` accepted and refused, TLS on both
listeners with certificates made for the run, and the command line with both. Real sockets on 127.0.0.1 only."""

from __future__ import annotations

import json
import logging
import os
import secrets
import socket
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from certificates import Certificates, make_certificates
from collector_process import CollectorProcess, RawClient, events, hello, run_collector, run_workload
from ringtrace.client import FileListener, Streamer, StreamerOptions, Timeline, read_trace_streams
from ringtrace.collector.command.main import main
from ringtrace.wire.frame_types import AUTHENTICATION_FAILED, MAGIC
from ringtrace.wire.frames import Goodbye, encode, preamble
from ringtrace.wire.handshake_frames import Welcome
from ringtrace.wire.table_frames import Track

# Its tests share a collector (a module-scoped fixture): one worker runs them all, and starts it once.
pytestmark = pytest.mark.xdist_group("security")

TOKEN = "rt-test-" + secrets.token_hex(16)
WRONG = "rt-wrong-" + secrets.token_hex(16)
_VARIABLES = ("RINGTRACE_TOKEN", "RINGTRACE_TOKEN_FILE", "RINGTRACE_CACERT")


def environment(token: str | None = None) -> dict[str, str]:
    """This process's environment without ringtrace's access variables, then with ``RINGTRACE_TOKEN`` if given."""
    env = {name: value for name, value in os.environ.items() if name not in _VARIABLES}
    if token is not None:
        env["RINGTRACE_TOKEN"] = token
    return env


def request(
    url: str, headers: dict[str, str] | None = None, method: str = "GET", context: ssl.SSLContext | None = None
) -> tuple[int, dict[str, str], bytes]:
    """Status, headers and body of one HTTP request (an error status is an answer too)."""
    try:
        with urllib.request.urlopen(
            urllib.request.Request(url, headers=headers or {}, method=method), timeout=60, context=context
        ) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, dict(exc.headers), exc.read()


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def never_logged(collector: CollectorProcess, *secrets_: str) -> None:
    for line in collector.lines:
        for secret in secrets_:
            assert secret not in line, line


@pytest.fixture
def no_access_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    path.chmod(0o600)
    return path


@pytest.fixture
def guarded(token_file: Path) -> Iterator[CollectorProcess]:
    """A collector that requires TOKEN (the harness's requests send it unless told otherwise)."""
    collector = CollectorProcess("--token-file", str(token_file), token=TOKEN, env=environment())
    try:
        yield collector
    finally:
        collector.stop()


# -- the token on ingest ---------------------------------------------------------------------------------------------


def test_ingest_welcomes_the_token_and_refuses_a_wrong_or_missing_one_saying_only_that(
    guarded: CollectorProcess, tmp_path: Path
) -> None:
    with RawClient(guarded.tcp_address, hello(instance="good", token=TOKEN)) as good:
        assert isinstance(good.answer, Welcome)
        good.send(Track(1, 0, "main", 1))
        for presented, reason in ((WRONG, "wrong"), ("", "missing")):
            with RawClient(guarded.tcp_address, hello(instance=f"refused-{reason}", token=presented)) as refused:
                assert refused.answer == Goodbye(AUTHENTICATION_FAILED)  # and nothing more: no reason, no limits
                assert refused.closed_by_peer()
            said = f"({reason} token)"
            line = guarded.wait_for_log(lambda line, said=said: said in line)  # type: ignore[misc]
            assert "WARNING" in line and "refusing connection from 127.0.0.1:" in line
            assert "authentication failed" in line
        good.flush()  # the connection that presented the token goes on, unharmed

    done = run_workload(guarded.tcp_address, "--spans", "200", "--name", "with-token", env=environment(TOKEN))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["flushed"] is True
    assert len(events(guarded.snapshot("?process=with-token"), "X")) == 200

    stats = guarded.json("/stats")
    assert stats["connections_unauthenticated"] == 2
    names = sorted(p["process_name"] for p in guarded.json("/sources")["processes"])
    assert names == ["raw", "with-token"]  # a refused peer leaves nothing behind
    # What the collector stores, and serves, holds no token: its log neither.
    status, native = guarded.get("/snapshot?format=native")
    assert status == 200 and TOKEN.encode() not in native
    (tmp_path / "native.rtsnap").write_bytes(native)
    streams = read_trace_streams(tmp_path / "native.rtsnap")
    assert streams and all(s.hello is not None and s.hello.token == "" for s in streams)
    never_logged(guarded, TOKEN, WRONG)


def test_a_refused_client_counts_its_events_as_dropped_and_nothing_raises(
    guarded: CollectorProcess, caplog: pytest.LogCaptureFixture
) -> None:
    options = StreamerOptions(token=WRONG, backoff_initial_s=0.05)
    assert WRONG not in repr(options)
    refused = Streamer(guarded.tcp_address, options)
    timeline = Timeline("refused", [refused])
    welcomed = Streamer(guarded.tcp_address, StreamerOptions(token=TOKEN, process_name="welcomed"))
    other = Timeline("welcomed", [welcomed])
    with caplog.at_level(logging.WARNING, logger="ringtrace.client"):
        for i in range(100):
            timeline.instant("lost", i=i)
            other.instant("kept", i=i)
        assert timeline.flush(timeout_s=1.0) is False
        assert other.flush(timeout_s=10.0) is True
        assert timeline.close(timeout_s=0.2) is False
    assert refused.dropped_events == 100 and refused.sent_events == 0
    said = [r.getMessage() for r in caplog.records if "authentication failed" in r.getMessage()]
    assert len(said) == 1  # once, at once: waiting will not mend it
    assert f"the collector at {guarded.tcp_address} closed the connection: authentication failed" in said[0]
    assert "token=" in said[0]  # and what to give
    assert WRONG not in caplog.text
    guarded.wait_for_log(lambda line: "(wrong token)" in line)
    assert len(events(guarded.snapshot(), "i")) == 100
    other.close(timeout_s=5.0)


# -- the token on HTTP -----------------------------------------------------------------------------------------------


def test_http_needs_the_bearer_token_and_the_probes_say_only_their_status_without_one(
    guarded: CollectorProcess,
) -> None:
    url = guarded.http_url
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    # The first refusal of each reason is logged (repeats are counted; see below). A path cannot forge a log line:
    # it is logged as sent, percent-encoded, and cut short.
    forging = "/snapshot%0A2026-01-01%20WARNING%20forged" + "y" * 500
    refused = [
        ("GET", forging, {}),
        ("GET", "/snapshot", {"Authorization": f"Bearer {WRONG}"}),
        ("GET", "/snapshot", {}),
        ("POST", "/clear", {}),
        ("GET", "/sources", {"Authorization": f"Basic {TOKEN}"}),  # the token, but not as a bearer token
        ("GET", "/healthz", {"Authorization": f"Bearer {WRONG}"}),
        ("GET", "/readyz", {"Authorization": f"Bearer {WRONG}"}),
    ]
    for method, path, headers in refused:
        status, answer_headers, body = request(url + path, headers, method)
        assert (status, body) == (401, b"authentication failed\n"), (method, path)
        assert answer_headers["WWW-Authenticate"] == "Bearer"
    missing = guarded.wait_for_log(lambda line: "(missing token)" in line)
    assert "WARNING" in missing and "refusing HTTP GET /snapshot%0A2026-01-01%20WARNING%20forgedyyy" in missing
    assert f"{'y' * 150} from 127.0.0.1:" in missing and "y" * 250 not in missing
    assert not any(line.startswith("2026-01-01 WARNING forged") for line in guarded.lines)
    wrong = guarded.wait_for_log(lambda line: "(wrong token)" in line)
    assert "refusing HTTP GET /snapshot from 127.0.0.1:" in wrong

    status, _, body = request(url + "/snapshot", bearer)
    assert status == 200 and "traceEvents" in json.loads(body)
    status, _, body = request(url + "/healthz")  # a liveness probe has no secret, and learns nothing more
    assert status == 200 and json.loads(body) == {"status": "ok"}
    status, _, body = request(url + "/healthz", bearer)
    assert status == 200 and "stored_events" in json.loads(body)
    for headers in ({}, bearer):  # (a readiness probe: its store, in memory, always takes events)
        status, _, body = request(url + "/readyz", headers)
        assert status == 200 and json.loads(body) == {"status": "ready"}

    assert guarded.json("/stats")["http_unauthorized"] == len(refused)
    status, metrics = guarded.get("/metrics")
    assert status == 200 and b'ringtrace_connections_total{outcome="unauthenticated"} 0.0' in metrics
    never_logged(guarded, TOKEN, WRONG)


def test_the_command_line_presents_the_token(
    guarded: CollectorProcess,
    token_file: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    no_access_variables: None,
) -> None:
    done = run_workload(guarded.tcp_address, "--spans", "20", "--name", "web", env=environment(TOKEN))
    assert done.returncode == 0, done.stderr
    url, output = guarded.http_url, str(tmp_path / "trace.json")

    status, _, err = run(capsys, "snapshot", url, "-o", output)
    assert status == 1 and "answered 401: authentication failed" in err and "--token-file" in err
    assert run(capsys, "snapshot", url, "-o", output, "--token-file", str(token_file))[0] == 0
    assert len(events(json.loads(Path(output).read_bytes()), "X")) == 20
    status, _, err = run(capsys, "tail", url)
    assert status == 1 and "401" in err
    status, _, err = run(capsys, "snapshot", url, "-o", output, "--token-file", str(tmp_path / "absent"))
    assert status == 2 and "cannot read the token file" in err

    monkeypatch.setenv("RINGTRACE_TOKEN", TOKEN)
    status, out, err = run(capsys, "sources", url, "--json")
    assert status == 0, err
    assert [p["process_name"] for p in json.loads(out)["processes"]] == ["web"]
    status, out, err = run(capsys, "dump", url, "--limit", "3")
    assert status == 0 and len(out.splitlines()) == 3, err

    recorded = tmp_path / "db.rttrace"
    timeline = Timeline("db", [FileListener(recorded)])
    for i in range(30):
        with timeline.scope("query", i=i):
            pass
    timeline.close()
    monkeypatch.delenv("RINGTRACE_TOKEN")
    status, _, err = run(capsys, "replay", str(recorded), "--to", guarded.tcp_address)
    assert status == 1 and "the collector refused the stream: authentication failed" in err
    status, out, err = run(
        capsys, "replay", str(recorded), "--to", guarded.tcp_address, "--token-file", str(token_file)
    )
    assert status == 0 and out.startswith("replayed 30 events"), err
    assert len(events(guarded.snapshot(), "X")) == 50
    never_logged(guarded, TOKEN)


def test_a_collector_without_a_readable_token_file_refuses_to_start(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.write_text("\n")
    for path, says in ((tmp_path / "absent", "cannot read the token file"), (empty, "is empty")):
        done = run_collector("--token-file", str(path), env=environment())
        assert done.returncode == 2
        assert says in done.stderr and str(path) in done.stderr


# -- TLS -------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def module_token_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("token") / "token"
    path.write_text(TOKEN + "\n")
    path.chmod(0o600)
    return path


@pytest.fixture(scope="module")
def over_tls(certificates: Certificates, module_token_file: Path) -> Iterator[CollectorProcess]:
    """A collector with a token whose two listeners speak TLS with a certificate of the test CA."""
    c = certificates
    collector = CollectorProcess(
        "--token-file", str(module_token_file), "--tls-cert", c.cert, "--tls-key", c.key,
        token=TOKEN, cafile=c.ca, env=environment(),
    )  # fmt: skip
    try:
        yield collector
    finally:
        collector.stop()


def trusting(certificates: Certificates) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=certificates.ca)


def test_a_client_streams_over_tls_and_its_events_reach_the_snapshot(
    over_tls: CollectorProcess, certificates: Certificates
) -> None:
    assert over_tls.http_url.startswith("https://")
    done = run_workload(
        over_tls.tcp_address, "--threads", "2", "--spans", "5000", "--name", "over-tls", "--cafile", certificates.ca,
        env=environment(TOKEN),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["flushed"] is True
    assert len(events(over_tls.snapshot("?process=over-tls"), "X")) == 10_000


def test_a_plain_client_is_refused_by_the_tls_listener_and_others_go_on(
    over_tls: CollectorProcess, certificates: Certificates, caplog: pytest.LogCaptureFixture
) -> None:
    secure = Streamer(over_tls.tcp_address, StreamerOptions(token=TOKEN, tls=trusting(certificates)))
    timeline = Timeline("secure", [secure])
    timeline.instant("before", n=1)
    assert timeline.flush(timeout_s=10.0) is True

    host, port = over_tls.tcp_address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as plain:
        plain.sendall(preamble() + encode(hello(instance="plain", token=TOKEN)))
        answer = b""
        try:
            while chunk := plain.recv(65536):
                answer += chunk
        except ConnectionResetError:
            pass
    assert not answer.startswith(MAGIC)  # closed without a WELCOME (nor anything else of ringtrace's)

    with caplog.at_level(logging.WARNING, logger="ringtrace.client"):
        plain_streamer = Streamer(over_tls.tcp_address, StreamerOptions(token=TOKEN))
        untrusting = Streamer(over_tls.tcp_address, StreamerOptions(token=TOKEN, tls=True))  # the system's CAs
        for streamer in (plain_streamer, untrusting):
            lost = Timeline("lost", [streamer])
            lost.instant("never delivered")
            assert lost.flush(timeout_s=1.0) is False
            lost.close(timeout_s=0.1)
    assert "closed the connection without answering HELLO" in caplog.text  # the plain one: told to look at TLS
    assert f"TLS with {over_tls.tcp_address} failed" in caplog.text and "CERTIFICATE_VERIFY_FAILED" in caplog.text

    timeline.instant("after", n=2)
    assert timeline.flush(timeout_s=10.0) is True  # the TLS connection never noticed
    assert secure.connects == 1
    names = {e["name"] for e in events(over_tls.snapshot(), "i")}
    assert {"before", "after"} <= names and "never delivered" not in names
    timeline.close(timeout_s=5.0)


def test_the_command_line_over_tls_with_cacert(
    over_tls: CollectorProcess,
    certificates: Certificates,
    module_token_file: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    no_access_variables: None,
) -> None:
    recorded = tmp_path / "replayed.rttrace"
    timeline = Timeline("replayed", [FileListener(recorded)])
    for i in range(25):
        timeline.instant("replayed-event", i=i)
    timeline.close()
    token = ("--token-file", str(module_token_file))
    status, out, err = run(
        capsys, "replay", str(recorded), "--to", over_tls.tcp_address, "--cacert", certificates.ca, *token
    )
    assert status == 0 and out.startswith("replayed 25 events"), err
    status, _, err = run(capsys, "replay", str(recorded), "--to", over_tls.tcp_address, "--tls", *token)
    assert status == 1 and "CERTIFICATE_VERIFY_FAILED" in err and "--cacert" in err

    output = tmp_path / "trace.json"
    status, _, err = run(capsys, "snapshot", over_tls.http_url, "-o", str(output), "--cacert", certificates.ca, *token)
    assert status == 0, err
    assert sum(e["name"] == "replayed-event" for e in events(json.loads(output.read_bytes()), "i")) == 25
    status, _, err = run(capsys, "snapshot", over_tls.http_url, "-o", str(output), *token)
    assert status == 1 and "CERTIFICATE_VERIFY_FAILED" in err and "--cacert FILE" in err
    monkeypatch.setenv("RINGTRACE_CACERT", certificates.ca)
    status, _, err = run(capsys, "sources", over_tls.http_url, *token)
    assert status == 0, err
    status, _, err = run(capsys, "sources", over_tls.http_url.replace("https://", "http://"), *token)
    assert status == 1 and "then use an https:// URL" in err  # plain HTTP to a TLS listener: told what to do


def test_tls_ingest_reads_straight_into_data_dir_segments(certificates: Certificates, tmp_path: Path) -> None:
    """With TLS, frames are still decrypted into the segments they are stored in (mapped files here), across many
    segment boundaries; a restart reads them back with every checksum right."""
    c = certificates
    data_dir = str(tmp_path / "data")
    tls = ("--tls-cert", c.cert, "--tls-key", c.key)
    collector = CollectorProcess("--data-dir", data_dir, "--capacity", "8MiB", *tls, cafile=c.ca, env=environment())
    try:
        done = run_workload(
            collector.tcp_address, "--threads", "4", "--spans", "20000", "--name", "bulk", "--cafile", c.ca,
            env=environment(),
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["flushed"] is True
        stats = collector.json("/stats")
        assert stats["stored_events"] == 80_000 and stats["overwritten_events"] == 0
        assert stats["segments"] >= 3
    finally:
        collector.stop()
    again = CollectorProcess("--data-dir", data_dir, "--capacity", "8MiB", env=environment())
    try:
        assert "(0 with a tail cut)" in again.wait_for_log(lambda line: "recovered" in line)
        assert len(events(again.snapshot("?process=bulk"), "X")) == 80_000
    finally:
        again.stop()
