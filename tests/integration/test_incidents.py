"""Incidents end to end: a real collector (a subprocess, port 0) with rules, real client processes; each condition the
engine fires on its own (a crash, ``POST /incidents``) and the rules' scopes keep exactly their processes' windows;
a rule held to its ``max_per_minute``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from collector_process import CollectorProcess
from incident_runs import Peer, incident_events, incidents, stats, wait_for_counts, wait_for_incidents, webhook_server
from waiting import wait_for

pytestmark = pytest.mark.integration

SLOW = "slow checkout: span=checkout, min_duration=200ms, before=10s, after=1s"


@pytest.fixture
def peers() -> Iterator[list[Peer]]:
    started: list[Peer] = []
    yield started
    for peer in started:
        peer.close()


def _collector(tmp_path: Path, *flags: str) -> CollectorProcess:
    return CollectorProcess("--incidents-dir", str(tmp_path / "incidents"), *flags)


@pytest.mark.parametrize("store", ["memory", "data dir"])
def test_a_slow_span_keeps_its_process_window_and_nothing_of_the_others(
    tmp_path: Path, peers: list[Peer], store: str
) -> None:
    if store == "data dir":  # (incidents kept in the data dir's incidents/)
        collector = CollectorProcess("--data-dir", str(tmp_path / "data"), "--trigger", SLOW)
    else:
        collector = _collector(tmp_path, "--trigger", SLOW)
    try:
        slow, other = Peer(collector, "slow-one"), Peer(collector, "other-one")
        peers += [slow, other]
        other.send("ticks 50")
        slow.send("ticks 100")
        slow.send("slow checkout 300")
        slow.send("ticks 20")
        slow.send("slow quick 1")  # (not slow enough: no incident)
        [record] = wait_for_incidents(collector, 1)
        assert record["rule"] == "slow checkout"
        assert record["scope"] == "process"
        assert "checkout" in record["reason"]
        assert [p["name"] for p in record["processes"]] == ["slow-one"]
        assert record["trigger"]["process"]["pid"] == slow.pid
        assert record["lost"]["over_budget"] == 0
        window = record["window"]
        assert window["until_ns"] - window["since_ns"] >= 11 * 10**9 - 10**6
        events = incident_events(collector, record["id"])
        assert {e["pid"] for e in events} == {slow.pid}
        assert sorted(e["args"]["i"] for e in events if e["name"] == "tick") == list(range(120))
        assert [e["name"] for e in events if e["ph"] == "X"].count("checkout") == 1
        assert record["events"] == len(events)
        kept = tmp_path / ("data" if store == "data dir" else "") / "incidents"
        assert (kept / f"{record['id']}.json").exists() and (kept / f"{record['id']}.rtrace").exists()
        wait_for_counts(collector, saved=1)
    finally:
        collector.stop()


def test_a_trace_scope_keeps_every_process_of_the_trace_and_no_other(tmp_path: Path, peers: list[Peer]) -> None:
    collector = _collector(tmp_path, "--trigger", SLOW.replace("after=1s", "after=2s") + ", scope=trace")
    try:
        caller, server, bystander = Peer(collector, "caller"), Peer(collector, "server"), Peer(collector, "bystander")
        peers += [caller, server, bystander]
        bystander.send("ticks 30")
        traceparent = caller.send("call").split()[1]
        server.send(f"serve {traceparent} 300")
        caller.send("end")
        [record] = wait_for_incidents(collector, 1)
        trace_id = traceparent.split("-")[1]
        assert record["trace_id"] == trace_id
        assert sorted(p["name"] for p in record["processes"]) == ["caller", "server"]
        events = incident_events(collector, record["id"])
        assert {e["pid"] for e in events} == {caller.pid, server.pid}
        spans = {e["name"]: e["args"].get("trace_id") for e in events if e["ph"] == "X"}
        assert spans == {"call": trace_id, "checkout": trace_id}
    finally:
        collector.stop()


def test_a_host_scope_keeps_every_process_of_the_host(tmp_path: Path, peers: list[Peer]) -> None:
    collector = _collector(tmp_path, "--trigger", SLOW + ", scope=host")
    try:
        slow, neighbour = Peer(collector, "slow-one"), Peer(collector, "neighbour")
        peers += [slow, neighbour]
        neighbour.send("ticks 15")
        neighbour.send("flush")
        slow.send("slow checkout 250")
        [record] = wait_for_incidents(collector, 1)
        assert sorted(p["name"] for p in record["processes"]) == ["neighbour", "slow-one"]
        events = incident_events(collector, record["id"])
        assert sorted(e["args"]["i"] for e in events if e["pid"] == neighbour.pid) == list(range(15))
    finally:
        collector.stop()


def test_a_crash_is_an_incident_and_a_clean_exit_is_not(tmp_path: Path, peers: list[Peer]) -> None:
    collector = _collector(tmp_path, "--trigger", "crashed: crash=true, before=5s, after=0s")
    try:
        leaving, crashing = Peer(collector, "leaving"), Peer(collector, "crashing")
        peers += [leaving, crashing]
        for peer in (leaving, crashing):
            peer.send("ticks 10")
            peer.send("flush")
        leaving.close()
        crashing.send("crash")
        [record] = wait_for_incidents(collector, 1)
        assert record["trigger"]["event"]["kind"] == "crash"
        assert [p["name"] for p in record["processes"]] == ["crashing"]
        assert "without GOODBYE" in record["reason"]
        events = incident_events(collector, record["id"])
        assert sorted(e["args"]["i"] for e in events) == list(range(10))
        # The clean exit came first: had it fired, it would be listed too.
        assert len(incidents(collector)) == 1
        assert stats(collector)["fired"] == 1
    finally:
        collector.stop()


def test_post_incidents_takes_one_now_and_names_a_bad_parameter(tmp_path: Path, peers: list[Peer]) -> None:
    collector = _collector(tmp_path)
    try:
        peer = Peer(collector, "asked")
        peers.append(peer)
        peer.send("ticks 25")
        peer.send("flush")
        status, body = collector.post(f"/incidents?reason=looks+wrong&pid={peer.pid}&before=1m&after=0s")
        assert status == 202, body
        incident_id = json.loads(body)["id"]
        [record] = wait_for_incidents(collector, 1)
        assert record["id"] == incident_id
        assert record["rule"] == "by hand"
        assert record["reason"] == "looks wrong"
        assert sorted(e["args"]["i"] for e in incident_events(collector, incident_id)) == list(range(25))
        refused = (
            ("scope=everything&reason=x", "scope"),
            ("reason=x&before=5", "before"),
            ("pid=1", "reason"),
            ("reason=x&colour=red", "colour"),
            ("reason=x&scope=trace", "trace_id"),
            ("reason=x&before=0s&after=0s", "after"),
            ("reason=x&before=99999999999999h", "before' must be from 0 to 1h"),
            ("reason=x&after=-5ms", "after' must be from 0 to 1h"),
        )
        for query, named in refused:
            status, body = collector.post(f"/incidents?{query}")
            assert status == 400 and f"'{named}" in body.decode(), (query, body)
        status, body = collector.post("/incidents?reason=x&process=nobody-has-this-name")
        assert status == 404, body
    finally:
        collector.stop()


def test_a_rule_is_held_to_its_max_per_minute_and_the_rest_are_counted(tmp_path: Path, peers: list[Peer]) -> None:
    collector = _collector(tmp_path, "--trigger", SLOW.replace("after=1s", "after=0s") + ", max_per_minute=2")
    try:
        peer = Peer(collector, "often-slow")
        peers.append(peer)
        for _ in range(5):
            peer.send("slow checkout 210")
        counted = wait_for(
            lambda: stats(collector),
            until=lambda s: s["fired"] + s["suppressed"] == 5,
            timeout_s=60,
            what="5 firings counted",
        )
        assert (counted["fired"], counted["suppressed"]) == (2, 3)
        assert counted["by_rule"]["suppressed"] == {"slow checkout": 3}
        wait_for_incidents(collector, 2)
        assert len(incidents(collector)) == 2  # (the other three were never begun)
        status, body = collector.get("/metrics")
        assert status == 200 and b"incidents" in body
    finally:
        collector.stop()


def test_a_flood_of_tl_incident_calls_is_held_to_the_rules_limit_and_every_one_counted(
    tmp_path: Path, peers: list[Peer]
) -> None:
    rule = "asked: incident_call=true, reason=payment*, before=1s, after=0s, max_per_minute=3"
    collector = _collector(tmp_path, "--trigger", rule)
    try:
        peer = Peer(collector, "hostile")
        peers.append(peer)
        peer.send("incidents 5000 payment-failed")
        peer.send("incidents 10 unrelated")
        assert peer.send("flush").startswith("flushed True")
        counted = wait_for(
            lambda: stats(collector),
            until=lambda s: s["fired"] + s["suppressed"] == 5000,
            timeout_s=120,
            what="5000 firings counted, fired or suppressed",
        )
        assert counted["fired"] == 3
        records = wait_for_incidents(collector, 3)
        assert {r["rule"] for r in records} == {"asked"}
        assert all(r["trigger"]["event"]["name"] == "payment-failed" for r in records)
        assert collector.json("/healthz")["status"] == "ok"
    finally:
        collector.stop()


def test_a_rules_webhook_is_told_of_its_incident_once_it_is_saved(tmp_path: Path, peers: list[Peer]) -> None:
    with webhook_server() as (url, told):
        collector = _collector(tmp_path, "--trigger", SLOW + f", url={url}")
        try:
            peer = Peer(collector, "hooked")
            peers.append(peer)
            peer.send("slow checkout 250")
            [record] = wait_for_incidents(collector, 1)
            wait_for(lambda: told, timeout_s=30, what="the webhook's POST")
            assert told[0]["id"] == record["id"] and told[0]["status"] == "saved"
            collector.wait_for_log(lambda line: "webhook" in line and "delivered" in line)
            # What it answered is in the saved record too, rewritten once it is known.
            told_record = wait_for(
                lambda: collector.json("/incidents?rule=slow%20checkout")["incidents"][0],
                until=lambda r: r["webhook"]["status"] is not None,
                timeout_s=30,
                what="the webhook's outcome in the record",
            )
            assert told_record["webhook"] == {"url": url, "status": "delivered", "attempts": 1}
            assert told_record["status"] == "saved" and told_record["events"] == record["events"]
        finally:
            collector.stop()
