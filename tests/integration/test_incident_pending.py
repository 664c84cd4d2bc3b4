"""An incident while its ``after`` still runs, against a real collector: listed as pending with when it will be ready,
its record served, its snapshot answered 409 with ``Retry-After`` until it is saved, and through ``ringtrace
incidents`` (listed, ``fetch`` saying when, ``fetch --wait`` waiting); and ``POST /incidents`` with its args as a JSON
body, bad ones refused and named."""

from __future__ import annotations

import asyncio
import json
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import aiohttp
import pytest
from collector_process import CollectorProcess
from incident_runs import Peer, incidents, wait_for_incidents
from ringtrace.collector.command.main import main
from ringtrace.collector.incidents.incident_files import IncidentFiles
from ringtrace.collector.service.app import Collector
from ringtrace.collector.service.config import CollectorConfig
from waiting import wait_for

pytestmark = pytest.mark.integration

ASKED = "asked: incident_call=true, reason=deploy*, before=10s, after={after}"


@pytest.fixture
def peers() -> Iterator[list[Peer]]:
    started: list[Peer] = []
    yield started
    for peer in started:
        peer.close()


def _request(
    collector: CollectorProcess, method: str, path: str, body: bytes | None = None, content_type: str | None = None
) -> tuple[int, dict[str, str], bytes]:
    headers = {"Content-Type": content_type} if content_type is not None else {}
    request = urllib.request.Request(collector.http_url + path, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, dict(exc.headers), exc.read()


def _pending(collector: CollectorProcess) -> dict[str, object]:
    [record] = wait_for(
        lambda: incidents(collector, "?status=pending"), until=bool, timeout_s=60, what="a pending incident"
    )
    return record


def test_a_pending_incident_is_listed_its_record_served_and_its_snapshot_said_not_ready(
    tmp_path: Path, peers: list[Peer], capsys: pytest.CaptureFixture[str]
) -> None:
    collector = CollectorProcess("--incidents-dir", str(tmp_path / "inc"), "--trigger", ASKED.format(after="10m"))
    try:
        peer = Peer(collector, "deployer")
        peers.append(peer)
        peer.send("ticks 5")
        peer.send("incidents 1 deploy-7")
        record = _pending(collector)
        assert record["status"] == "pending" and record["rule"] == "asked"
        assert record["trigger"]["event"]["name"] == "deploy-7"  # type: ignore[index]
        assert record["ready_wall_ns"] == record["window"]["until_ns"]  # type: ignore[index]
        assert record["ready_wall_ns"] > time.time_ns() + 60 * 10**9  # type: ignore[operator]
        assert incidents(collector, "?status=saved") == []
        assert [r["id"] for r in incidents(collector)] == [record["id"]]

        status, _, body = _request(collector, "GET", f"/incidents/{record['id']}?format=record")
        assert status == 200, body
        assert json.loads(body)["status"] == "pending" and json.loads(body)["id"] == record["id"]
        status, headers, body = _request(collector, "GET", f"/incidents/{record['id']}?format=perfetto")
        assert status == 409 and "still being captured (pending): its window ends at 20" in body.decode(), body
        assert 540 <= int(headers["Retry-After"]) <= 602 and "format=record" in body.decode()
        status, headers, _ = _request(collector, "HEAD", f"/incidents/{record['id']}")
        assert status == 409 and 540 <= int(headers["Retry-After"]) <= 602
        status, _, body = _request(collector, "GET", f"/incidents/{record['id']}?format=record&pid=1")
        assert status == 400 and "'pid'" in body.decode(), body
        status, _, body = _request(collector, "GET", "/incidents/no-such-one?format=record")
        assert status == 404, body
        status, headers, body = _request(collector, "DELETE", f"/incidents/{record['id']}")  # listed: not unknown
        assert status == 409 and "still being captured (pending)" in body.decode(), body
        assert 540 <= int(headers["Retry-After"]) <= 602
        assert [r["id"] for r in incidents(collector)] == [record["id"]]

        url = collector.http_url
        assert main(["incidents", "list", "--url", url]) == 0
        out, _ = capsys.readouterr()
        assert record["id"] in out and "pending: ready " in out
        target = tmp_path / "pending.json"
        assert main(["incidents", "fetch", str(record["id"]), "-o", str(target), "--url", url]) == 1
        _, err = capsys.readouterr()
        assert "is still being captured: ready at " in err and "--wait" in err, err
        assert not target.exists()
        assert (
            main(["incidents", "fetch", str(record["id"]), "--format", "record", "-o", str(target), "--url", url]) == 0
        )
        assert json.loads(target.read_text())["status"] == "pending"
        assert main(["incidents", "open", str(record["id"]), "--url", url]) == 1
        assert "is still being captured: ready at " in capsys.readouterr().err
    finally:
        collector.stop()


def test_fetch_wait_waits_for_a_pending_incident_then_writes_it(
    tmp_path: Path, peers: list[Peer], capsys: pytest.CaptureFixture[str]
) -> None:
    collector = CollectorProcess("--incidents-dir", str(tmp_path / "inc"), "--trigger", ASKED.format(after="6s"))
    try:
        peer = Peer(collector, "deployer")
        peers.append(peer)
        peer.send("ticks 5")
        peer.send("incidents 1 deploy")
        record = _pending(collector)
        target = tmp_path / "incident.json"
        url = collector.http_url
        assert main(["incidents", "fetch", str(record["id"]), "--wait", "-o", str(target), "--url", url]) == 0
        _, err = capsys.readouterr()
        # (pending when fetch asked, unless this machine is slow enough that the window ran out meanwhile)
        assert "waiting" in err or incidents(collector, "?status=saved")
        names = [e["name"] for e in json.loads(target.read_text())["traceEvents"] if e.get("ph") != "M"]
        assert names.count("tick") == 5 and "deploy" in names
        [saved] = wait_for_incidents(collector, 1)
        assert saved["id"] == record["id"] and "ready_wall_ns" not in saved
        assert incidents(collector, "?status=pending") == []
    finally:
        collector.stop()


def test_post_incidents_records_its_json_body_as_the_trigger_events_args(tmp_path: Path, peers: list[Peer]) -> None:
    collector = CollectorProcess("--incidents-dir", str(tmp_path / "inc"))
    try:
        peer = Peer(collector, "asked")
        peers.append(peer)
        peer.send("ticks 3")
        args = {"version": "1.4.2", "canary": True, "shard": 7, "load": 0.5, "note": None}
        status, _, body = _request(
            collector, "POST", f"/incidents?reason=deploy&pid={peer.pid}&after=10m", json.dumps(args).encode(),
            "application/json",
        )  # fmt: skip
        assert status == 202, body
        incident_id = json.loads(body)["id"]
        status, _, body = _request(collector, "GET", f"/incidents/{incident_id}?format=record")
        assert status == 200, body
        event = json.loads(body)["trigger"]["event"]
        assert event["name"] == "deploy" and event["args"] == args
        # curl -d sends a JSON body as a form unless told otherwise: taken as the args all the same
        status, _, body = _request(
            collector, "POST", f"/incidents?reason=form&pid={peer.pid}&after=10m", b'{"shard": 8}',
            "application/x-www-form-urlencoded",
        )  # fmt: skip
        assert status == 202, body
        status, _, body = _request(collector, "GET", f"/incidents/{json.loads(body)['id']}?format=record")
        assert json.loads(body)["trigger"]["event"]["args"] == {"shard": 8}

        refused = (
            (b"not json", "application/json", "not JSON"),
            (b"[1, 2]", "application/json", "must be a JSON object, not an array"),
            (b"null", "application/json", "must be a JSON object, not null"),
            (b'{"nested": {"a": 1}}', "application/json", "arg 'nested' is a JSON object"),
            (b'{"list": [1]}', "application/json", "arg 'list' is a JSON array"),
            (b'{"big": 18446744073709551616}', "application/json", "arg 'big'"),
            (b'{"": 1}', "application/json", "a name is 1 to 100 characters"),
            (json.dumps({f"k{i}": i for i in range(33)}).encode(), "application/json", "33 args, more than 32"),
            (json.dumps({"pad": "x" * 5000}).encode(), "application/json", "more than 4096 bytes"),
            (b'{"a": 1}', "text/plain", "Content-Type: application/json"),
        )
        for data, content_type, said in refused:
            status, _, body = _request(collector, "POST", "/incidents?reason=x", data, content_type)
            assert status == 400 and said in body.decode(), (data[:40], body)
        assert len(incidents(collector)) == 2
    finally:
        collector.stop()


def test_post_incidents_reads_a_json_body_that_arrives_in_parts(tmp_path: Path, peers: list[Peer]) -> None:
    """A body sent in two writes is read whole: the first part alone is not JSON, and must not be answered as such."""
    collector = CollectorProcess("--incidents-dir", str(tmp_path / "inc"))
    try:
        peer = Peer(collector, "asked")
        peers.append(peer)
        peer.send("ticks 3")
        body = json.dumps({"version": "1.4.2", "note": "x" * 1000}).encode()
        host, port = collector.http_url.removeprefix("http://").rsplit(":", 1)
        head = (
            f"POST /incidents?reason=deploy&pid={peer.pid}&after=1s HTTP/1.1\r\nHost: {host}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        ).encode()
        with socket.create_connection((host, int(port)), timeout=60) as sock:
            sock.sendall(head + body[:500])
            # the collector must wait for the rest: an answer before it is sent is one to half a body
            sock.settimeout(1.0)
            with pytest.raises(TimeoutError):
                early = sock.recv(1000)
                pytest.fail(f"answered before the whole body was sent: {early!r}")
            sock.settimeout(60)
            sock.sendall(body[500:])
            answer = b""
            while chunk := sock.recv(65536):
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 202"), answer
        incident_id = json.loads(answer.split(b"\r\n\r\n", 1)[1])["id"]
        status, _, record = _request(collector, "GET", f"/incidents/{incident_id}?format=record")
        assert status == 200 and json.loads(record)["trigger"]["event"]["args"]["note"] == "x" * 1000, record
    finally:
        collector.stop()


def test_an_incident_that_ends_while_the_list_is_read_is_still_listed(
    tmp_path: Path, peers: list[Peer], monkeypatch: pytest.MonkeyPatch
) -> None:
    """GET /incidents reads the files on a worker thread: a capture that ends meanwhile (its record written, then no
    longer under way) is listed, pending or saved, never left out."""
    read_records = IncidentFiles.records

    def records_then_capture_ends(files: IncidentFiles, *, pending: bool = False) -> list[dict[str, Any]]:
        found = read_records(files, pending=pending)  # the files as they were: the capture's record not yet among them
        wait_for(lambda: not collector.incidents_under_way(), until=bool, timeout_s=60, what="the capture's end")
        return found

    async def scenario() -> tuple[str, list[dict[str, Any]]]:
        await collector.start()
        try:
            assert collector.http_address is not None
            assert collector.tcp_address is not None
            url = "http://{}:{}".format(*collector.http_address)
            ingest = cast(CollectorProcess, SimpleNamespace(tcp_address="{}:{}".format(*collector.tcp_address)))
            peer = await asyncio.to_thread(Peer, ingest, "asked")
            peers.append(peer)
            await asyncio.to_thread(peer.send, "ticks 3")
            async with aiohttp.ClientSession() as session:
                deadline = time.monotonic() + 60
                while not await _known(session, url, peer.pid):  # (its HELLO read by the collector)
                    assert time.monotonic() < deadline, "the peer's process never known"
                    await asyncio.sleep(0.05)
                async with session.post(f"{url}/incidents?reason=deploy&pid={peer.pid}&after=1s") as response:
                    assert response.status == 202, await response.text()
                    incident_id = (await response.json())["id"]
                monkeypatch.setattr(IncidentFiles, "records", records_then_capture_ends)
                async with session.get(f"{url}/incidents") as response:
                    assert response.status == 200, await response.text()
                    return incident_id, (await response.json())["incidents"]
        finally:
            await collector.stop()

    collector = Collector(CollectorConfig(tcp_port=0, http_port=0, incidents_dir=str(tmp_path / "inc")))
    incident_id, listed = asyncio.run(scenario())
    assert [record["id"] for record in listed] == [incident_id], listed


async def _known(session: aiohttp.ClientSession, url: str, pid: int) -> bool:
    async with session.get(f"{url}/sources?pid={pid}") as response:
        return response.status == 200 and bool(await response.json())  # (a list of the processes selected)
