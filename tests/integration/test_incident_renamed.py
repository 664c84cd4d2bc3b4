"""An incident of a program run under ``ringtrace run`` that connects again under a name of its own (which renames
the process: the name it ran under was the launcher's guess): the new name names it everywhere, in the record, the
list, and the incident's timeline, read from the segments it saved (the first of which still say the name before)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from collector_process import CollectorProcess
from incident_runs import wait_for_incidents
from launching import RINGTRACE, program_environment, run

pytestmark = pytest.mark.integration

#: Runs under ``ringtrace run`` (as ``live.py``), records, then names itself ``live-web``: its slow span is live-web's.
LIVE = """
import sys, time
import ringtrace.client
with ringtrace.client.timeline().scope("boot"):  # (live.py's, in the incident's window)
    time.sleep(0.1)
tl = ringtrace.client.connect(sys.argv[1], process_name="live-web")
with tl.scope("checkout"):
    time.sleep(0.25)
assert tl.flush(timeout_s=30)
"""


#: What the incident holds, by the rule's scope: the process that recorded the trigger, renamed ``live-web``, whose
#: boot was recorded under ``live.py``: one process either way.
HELD = {"process": ["live-web"], "host": ["live-web"]}


@pytest.mark.parametrize(("store", "scope"), [("memory", "process"), ("data dir", "process"), ("memory", "host")])
def test_the_incident_of_a_process_that_connected_again_under_another_name_says_that_name(
    tmp_path: Path, store: str, scope: str
) -> None:
    rule = f"slow checkout: span=checkout, min_duration=200ms, before=10s, after=0s, scope={scope}"
    kept = ("--data-dir", str(tmp_path / "data")) if store == "data dir" else ("--incidents-dir", str(tmp_path))
    collector = CollectorProcess(*kept, "--trigger", rule)
    try:
        (tmp_path / "live.py").write_text(LIVE)
        argv = [RINGTRACE, "run", "--collector", collector.tcp_address, "live.py", collector.tcp_address]
        done = run(argv, tmp_path, program_environment())
        assert done.returncode == 0, done.stderr
        [listed] = wait_for_incidents(collector, 1)
        record = collector.json(f"/incidents/{listed['id']}?format=record")
        shown = {
            "listed": listed["trigger"]["process"]["name"],
            "record": record["trigger"]["process"]["name"],
            "processes": sorted(p["name"] for p in record["processes"]),
        }
        assert shown == {"listed": "live-web", "record": "live-web", "processes": HELD[scope]}
        # The timelines (Chrome JSON, the web view's columns) name the same, the boot recorded before the rename in
        # the process's window too.
        status, body = collector.get(f"/incidents/{listed['id']}?format=chrome")
        assert status == 200, body
        chrome = json.loads(body)["traceEvents"]
        shown_names = sorted(e["args"]["name"] for e in chrome if e.get("name") == "process_name")
        web_view = collector.json(f"/incidents/{listed['id']}?format=timeline")
        columns_names = sorted({track["process_name"] for track in web_view["tracks"]})
        assert [name.split(" (pid ")[0] for name in shown_names] == columns_names == HELD[scope]
        checkouts = [e for e in chrome if e.get("ph") == "X" and e["name"] == "checkout"]
        boots = [e for e in chrome if e.get("ph") == "X" and e["name"] == "boot"]
        assert len(checkouts) == 1 and len(boots) == 1 and boots[0]["pid"] == checkouts[0]["pid"]
        by_pid = {e["pid"]: e["args"]["name"] for e in chrome if e.get("name") == "process_name"}
        assert by_pid[checkouts[0]["pid"]].startswith("live-web")
    finally:
        collector.stop()
