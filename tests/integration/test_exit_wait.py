"""The wait at exit: a collector that nothing listens for (a closed port) is tried once and not waited for, and one
line says what was lost and why; a collector started late, or up all along, still gets everything; one that is there
but slow keeps the whole ``exit_timeout_s``.

The exit is timed inside the program (from its first exit hook, which runs before ringtrace's, to its last, which runs
after): the bounds are generous, half the timeout for a refusal, never a measure of speed.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

from collector_process import CollectorProcess, events
from launching import program_environment, run
from waiting import wait_for

#: Records 1000 instants, then (with ``wait``) says whether a flush got through and waits for a line on stdin; prints
#: how long ringtrace's exit delivery took and the streamer's drops, from exit hooks around ringtrace's own.
PROGRAM = """
import atexit, sys, time, ringtrace.client
began = []
def ended():  # registered before connect(), which registers ringtrace's exit hook: runs after it
    print(f"exit {time.monotonic() - began[0]:.3f} {streamer.dropped_events}", flush=True)
atexit.register(ended)
tl = ringtrace.client.connect(sys.argv[1], process_name="exiting", exit_timeout_s=float(sys.argv[2]))
streamer = tl.listeners[0]
atexit.register(lambda: began.append(time.monotonic()))  # runs first
for i in range(1000):
    tl.instant("n", i=i)
if sys.argv[3] == "wait":
    print("flushed", tl.flush(timeout_s=1.0), flush=True)
    sys.stdin.readline()
"""


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _exit_and_drops(stdout: str) -> tuple[float, int]:
    (line,) = [line for line in stdout.splitlines() if line.startswith("exit ")]
    _, seconds, dropped = line.split()
    return float(seconds), int(dropped)


def _run(address: str, exit_timeout_s: float) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-c", PROGRAM, address, str(exit_timeout_s), "exit"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)


def test_with_nothing_listening_the_exit_does_not_wait_and_says_what_was_lost_in_one_line() -> None:
    address = f"127.0.0.1:{_closed_port()}"
    done = _run(address, exit_timeout_s=10.0)
    assert done.returncode == 0, done.stderr
    seconds, dropped = _exit_and_drops(done.stdout)
    assert seconds < 5.0, done.stdout  # not the 10 s timeout: one attempt, refused, and it gives up
    assert dropped == 1000
    (line,) = done.stderr.splitlines()  # one line, not the outage's warning and then this one
    assert line.startswith(f"ringtrace: 1000 events recorded by this process never reached the collector at {address}")
    assert "gave up at once (not connected)" in line and f"connection to {address} refused" in line, line


def test_a_collector_that_is_there_but_slow_keeps_the_whole_exit_timeout() -> None:
    with socket.socket() as silent:  # takes connections (the kernel's backlog) and never answers HELLO
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        address = "{}:{}".format(*silent.getsockname())
        done = _run(address, exit_timeout_s=3.0)
    assert done.returncode == 0, done.stderr
    seconds, dropped = _exit_and_drops(done.stdout)
    assert seconds >= 2.5, done.stdout  # it waited (near enough) the whole exit_timeout_s for a WELCOME
    assert dropped == 1000
    (line,) = done.stderr.splitlines()
    assert "1000 events recorded by this process never reached" in line and "gave up after 3.0s" in line, line


def test_a_collector_up_all_along_gets_everything_from_a_process_that_exits_at_once(
    collector: CollectorProcess,
) -> None:
    done = _run(collector.tcp_address, exit_timeout_s=10.0)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert _exit_and_drops(done.stdout)[1] == 0
    trace = collector.snapshot()
    assert sorted(e["args"]["i"] for e in events(trace, "i") if e["name"] == "n") == list(range(1000))


def test_a_collector_started_late_gets_everything_at_exit() -> None:
    port = _closed_port()
    argv = [sys.executable, "-c", PROGRAM, f"127.0.0.1:{port}", "10", "wait"]
    client = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    collector = None
    try:
        assert client.stdout is not None
        assert client.stdout.readline() == "flushed False\n"  # refused so far
        collector = CollectorProcess(tcp=f"127.0.0.1:{port}")
        out, err = client.communicate("go\n", timeout=60)
        assert client.returncode == 0, err
        assert _exit_and_drops(out)[1] == 0, (out, err)
        assert "never reached" not in err, err
        trace = wait_for(
            lambda: collector.snapshot() if collector is not None else {},
            until=lambda t: len([e for e in events(t, "i") if e["name"] == "n"]) >= 1000,
            timeout_s=30,
            what="the late collector's 1000 instants",
        )
        assert sorted(e["args"]["i"] for e in events(trace, "i") if e["name"] == "n") == list(range(1000))
    finally:
        client.kill()
        if collector is not None:
            collector.stop()


def test_under_the_fleet_switch_a_collector_that_is_down_costs_one_line_and_no_wait(tmp_path: Path) -> None:
    (tmp_path / "worker.py").write_text("import sys\nprint('working')\nprint('warned', file=sys.stderr)\n")
    address = f"127.0.0.1:{_closed_port()}"
    environment = program_environment(RINGTRACE_AUTO="1", RINGTRACE_COLLECTOR=address)
    done = run([sys.executable, "worker.py"], tmp_path, environment)
    assert (done.stdout, done.returncode) == ("working\n", 0)
    lines = done.stderr.splitlines()
    assert lines[0] == "warned" and len(lines) <= 2, lines  # what it recorded (if any) said in one line
    assert all("gave up at once" in line and f"connection to {address} refused" in line for line in lines[1:]), lines


def test_ringtrace_run_waits_at_exit_as_long_as_its_exit_timeout_says_and_so_do_its_children(tmp_path: Path) -> None:
    (tmp_path / "app.py").write_text(
        "import subprocess, sys\nsubprocess.run([sys.executable, '-c', 'print(1)'], check=True)\n", encoding="utf-8"
    )
    with socket.socket() as silent:  # takes connections (the kernel's backlog) and never answers HELLO
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        address = "{}:{}".format(*silent.getsockname())
        done = run(
            [str(Path(sys.executable).parent / "ringtrace"), "run", "--collector", address, "--exit-timeout", "0.5",
             "app.py"],
            tmp_path,
            program_environment(RINGTRACE_EXIT_TIMEOUT="7"),  # (the flag wins, and is what its children are given)
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if "never reached" in line]
    assert len(lines) == 2 and all("gave up after 0.5s" in line for line in lines), done.stderr  # the child's, its own
