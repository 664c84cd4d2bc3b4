"""The client never breaks its host: no collector, a collector that restarts, a ring that fills."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

from collector_process import CollectorProcess, events, run_workload
from waiting import wait_for


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_no_collector_records_and_exits_promptly() -> None:
    code = (
        "import ringtrace.client\n"
        f"tl = ringtrace.client.connect('127.0.0.1:{_closed_port()}')\n"
        "for i in range(50_000):\n"
        "    with tl.scope('work', i=i):\n"
        "        tl.instant('tick')\n"
        "print(tl.flush(timeout_s=1.0), tl.listeners[0].connects)\n"
    )
    # A bound, not a timing: the process must finish on its own, well within the exit flush timeout + slack.
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=20)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "0"]
    # What was thrown away at exit is said, once, with the count: every event recorded (after, if it ran 2 s, the
    # warning that the collector cannot be reached).
    *before, line = done.stderr.splitlines()
    assert "100000 events recorded by this process never reached the collector" in line
    assert all("events cannot reach the collector: connection to 127.0.0.1" in warning for warning in before)
    assert len(before) <= 1


def test_a_client_given_several_collectors_moves_past_one_that_does_not_answer() -> None:
    collector = CollectorProcess()
    try:
        code = (
            "import sys, ringtrace.client\n"
            "tl = ringtrace.client.connect(sys.argv[1], process_name='moved')\n"
            "for i in range(1000):\n"
            "    tl.instant('n', i=i)\n"
            "print(tl.flush(timeout_s=20))\n"
        )
        addresses = f"127.0.0.1:{_closed_port()},{collector.tcp_address}"  # the first one refuses
        done = subprocess.run([sys.executable, "-c", code, addresses], capture_output=True, text=True, timeout=60)
        assert done.stdout.strip() == "True", done.stderr
        trace = collector.snapshot()
        assert sorted(e["args"]["i"] for e in events(trace, "i") if e["name"] == "n") == list(range(1000))
    finally:
        collector.stop()


def test_client_reconnects_and_resends_strings_after_collector_restart() -> None:
    first = CollectorProcess()
    address = first.tcp_address
    code = (
        "import ringtrace.client, sys\n"
        f"tl = ringtrace.client.connect({address!r}, backoff_initial_s=0.05, backoff_max_s=0.2)\n"
        "for line in sys.stdin:\n"
        "    label = line.strip()\n"
        "    for i in range(100):\n"
        "        with tl.scope(label, i=i):\n"
        "            pass\n"
        "    print(tl.flush(timeout_s=20), flush=True)\n"
    )
    client = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    second = None
    try:
        assert client.stdin is not None and client.stdout is not None

        def step(label: str) -> str:
            client.stdin.write(label + "\n")  # type: ignore[union-attr]
            client.stdin.flush()  # type: ignore[union-attr]
            return client.stdout.readline().strip()  # type: ignore[union-attr]

        assert step("before-restart") == "True"
        assert len(events(first.snapshot(), "X")) == 100
        first.stop()
        second = CollectorProcess(tcp=address)
        # The label was interned before the restart: the new collector can only name it if strings were resent.
        outcome = step("before-restart")
        while outcome != "True":  # the first flush may land while the client is still backing off
            outcome = step("before-restart")
        assert step("after-restart") == "True"
        spans = events(second.snapshot(), "X")
        names = {s["name"] for s in spans}
        assert names == {"before-restart", "after-restart"}
    finally:
        client.communicate(timeout=30)
        first.stop()
        if second is not None:
            second.stop()


class Restart:
    """A client process (``body`` runs after ``tl = connect(...)``, and prints what the test reads) and a collector
    that is stopped or killed and started again on the same port."""

    def __init__(self, body: str) -> None:
        self.first = CollectorProcess()
        self.second: CollectorProcess | None = None
        address = self.first.tcp_address
        code = (
            "import ringtrace.client, sys, time\n"
            f"tl = ringtrace.client.connect({address!r}, backoff_initial_s=0.05, backoff_max_s=0.2)\n" + body
        )
        self.client = subprocess.Popen(
            [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )

    def __enter__(self) -> Restart:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.client.communicate(timeout=30)
        self.first.stop()
        if self.second is not None:
            self.second.stop()

    def go(self) -> None:
        """Let the client go past its next ``sys.stdin.readline()``."""
        assert self.client.stdin is not None
        self.client.stdin.write("go\n")
        self.client.stdin.flush()

    def said(self) -> str:
        assert self.client.stdout is not None
        return self.client.stdout.readline().strip()

    def restart(self, *, kill: bool) -> None:
        if kill:
            self.first.proc.kill()
            self.first.proc.wait()
        else:
            self.first.stop()  # SIGTERM
        self.second = CollectorProcess(tcp=self.first.tcp_address)


def test_events_in_flight_when_the_collector_is_killed_are_counted_as_unacknowledged() -> None:
    body = (
        "print(tl.flush(timeout_s=20), flush=True)\n"
        "sys.stdin.readline()\n"
        "end = time.monotonic() + 1.0\n"  # recording goes on while the collector is killed
        "while time.monotonic() < end:\n"
        "    tl.instant('tick')\n"
        "    time.sleep(0.0002)\n"
        "print(tl.flush(timeout_s=20), flush=True)\n"  # False: what the killed collector held is in doubt
        "sys.stdin.readline()\n"
        "while not tl.flush(timeout_s=20):\n"
        "    pass\n"
        "print(tl.listeners[0].unacknowledged_events, flush=True)\n"
    )
    with Restart(body) as run:
        assert run.said() == "True"
        run.go()
        run.first.wait_for_stored(100)
        run.restart(kill=True)
        assert run.said() == "False"
        run.go()
        unacknowledged = int(run.said())
        assert unacknowledged > 0  # the events the killed collector held, and those on their way to it
        assert run.second is not None
        assert run.second.snapshot()["otherData"]["client_unacknowledged_events"] == unacknowledged


def test_a_client_that_sent_and_went_quiet_has_everything_acknowledged_without_calling_flush() -> None:
    body = (
        "print(tl.flush(timeout_s=20), flush=True)\n"
        "for _ in range(2000):\n"
        "    tl.instant('tick')\n"
        "    time.sleep(0.0005)\n"
        "time.sleep(2.5)\n"  # the streamer asks for an acknowledgement of what it sent meanwhile
        "print('quiet', flush=True)\n"
        "sys.stdin.readline()\n"
        "print(tl.flush(timeout_s=20), tl.listeners[0].unacknowledged_events, flush=True)\n"
    )
    with Restart(body) as run:
        assert run.said() == "True"
        assert run.said() == "quiet"
        run.restart(kill=True)
        run.go()
        assert run.said().split() == ["True", "0"]  # nothing in doubt: all of it was acknowledged


def test_a_collector_that_stops_cleanly_leaves_no_event_of_its_clients_in_doubt() -> None:
    body = (
        "print(tl.flush(timeout_s=20), flush=True)\n"
        "sys.stdin.readline()\n"
        "end = time.monotonic() + 1.5\n"
        "while time.monotonic() < end:\n"  # sent all along, acknowledged once a second
        "    tl.instant('tick')\n"
        "    time.sleep(0.0005)\n"
        "print('recorded', flush=True)\n"  # what came since the last acknowledgement is in doubt, for now
        "sys.stdin.readline()\n"
        "print(tl.flush(timeout_s=20), tl.listeners[0].unacknowledged_events, flush=True)\n"
    )
    with Restart(body) as run:
        assert run.said() == "True"
        run.go()
        assert run.said() == "recorded"
        run.restart(kill=False)  # it asks its clients to flush before it closes their connections
        run.go()
        assert run.said().split() == ["True", "0"]


def test_full_ring_overwrites_oldest_and_counts_exactly() -> None:
    collector = CollectorProcess("--capacity", "512KiB", "--max-frame-size", "64KiB")
    try:
        done = run_workload(collector.tcp_address, "--threads", "2", "--spans", "20000")
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["dropped_events"] == 0
        trace = collector.snapshot()
        kept = len(events(trace, "X"))
        overwritten = trace["otherData"]["overwritten_events"]
        assert 0 < kept < 40_000
        assert kept + overwritten == 40_000
        assert trace["otherData"]["processes"][0]["overwritten_events"] == overwritten
        # What survives is the most recent past: the last span of each thread is there.
        assert {s["args"]["i"] for s in events(trace, "X")} >= {19_999}
    finally:
        collector.stop()


def test_a_client_whose_tables_never_fit_the_capacity_is_refused_slowly_and_each_side_says_so_once() -> None:
    # (3MB: the least it takes, 2 frames of 1 MiB and theirs; a string budget past it, so the table never starts again
    # before it fills the capacity)
    collector = CollectorProcess("--capacity", "3MB", "--max-string-bytes", "8MiB")
    code = (
        "import ringtrace.client, sys\n"
        f"tl = ringtrace.client.connect({collector.tcp_address!r}, process_name='labels')\n"
        "for i in range(20_000):\n"  # ~3 MB of tables in the collector: more than it holds
        "    tl.instant('x' * 150 + str(i))\n"
        "sys.stdin.read()\n"
    )
    client = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:

        def refusals() -> int:
            assert client.poll() is None, "the client ended before it was refused 4 times"
            return int(collector.json("/stats")["protocol_errors"])

        wait_for(refusals, until=lambda n: n >= 4, timeout_s=60, what="the client refused 4 times", interval_s=0.1)
        _, said = client.communicate("", timeout=30)
    finally:
        client.kill()
        collector.stop()
    warnings = [line for line in said.splitlines() if line.strip()]
    reached = [w for w in warnings if "events cannot reach the collector" in w]
    assert len(reached) == 1 and "--capacity is too small for these tables" in reached[0], said
    assert not any("is closing" in w for w in warnings), said  # the refusal is the outage, not a goodbye
    assert sum("were not acknowledged" in w for w in warnings) <= 1, said  # the first break's; then the outage's
    assert "sent on connections that broke before the collector acknowledged them" in warnings[-1], said  # at exit
    closing = [line for line in collector.lines if "closing connection" in line]
    assert len(closing) == 1, closing  # then once a minute, with how many were closed so meanwhile
    assert "raise --capacity, or lower --max-strings" in closing[0]
    assert sum("connection from" in line and "'labels'" in line for line in collector.lines) == 1, collector.lines
