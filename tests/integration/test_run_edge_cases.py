"""``ringtrace run`` on programs a review tried as a new user would: each ends as under ``python``, says nothing of its
own on stderr, and loses nothing it did not count.
"""

from __future__ import annotations

import sys
from pathlib import Path

from collector_process import CollectorProcess, events
from launching import RINGTRACE, program_environment, run
from waiting import wait_for


def test_a_program_that_exits_at_once_loses_no_samples_at_exit(collector: CollectorProcess, tmp_path: Path) -> None:
    # The sampler went on sampling while the exit delivery ran: the samples it took between the last sweep and the
    # close were counted as dropped, and about one run in three said "N events dropped" on stderr.
    (tmp_path / "quick.py").write_text("print('done')\n")
    environment = program_environment()
    under_python = run([sys.executable, "quick.py"], tmp_path, environment)
    for _ in range(8):
        done = run(
            [RINGTRACE, "run", "--collector", collector.tcp_address, "--sample-hz", "1000", "quick.py"],
            tmp_path,
            environment,
        )
        assert (done.stdout, done.stderr, done.returncode) == (
            under_python.stdout,
            under_python.stderr,
            under_python.returncode,
        )


def test_a_log_call_whose_arguments_do_not_fit_its_format_is_recorded_unrendered_and_said_by_logging_alone(
    collector: CollectorProcess, tmp_path: Path
) -> None:
    # logging's own handler says "--- Logging error ---" for such a call, if it ever formats it; python never formats
    # an info record that no handler of the program takes (the last resort takes warnings), and ringtrace said a
    # warning of its own for it. (The logger lets info through: ringtrace records what the program's levels let by.)
    (tmp_path / "logs.py").write_text(
        "import logging\n"
        "logging.getLogger('app').setLevel(logging.INFO)\n"
        "logging.getLogger('app').info('rows=%d', 'many')\n"
        "class Unprintable:\n"
        "    def __str__(self):\n"
        "        raise RuntimeError('no')\n"
        "logging.getLogger('app').info(Unprintable())\n"
        "print('end')\n"
    )
    environment = program_environment()
    under_python = run([sys.executable, "logs.py"], tmp_path, environment)
    done = run([RINGTRACE, "run", "--collector", collector.tcp_address, "logs.py"], tmp_path, environment)
    assert (
        (done.stdout, done.stderr, done.returncode)
        == ("end\n", "", 0)
        == (
            under_python.stdout,
            under_python.stderr,
            under_python.returncode,
        )
    )
    shown = wait_for(
        lambda: [e["args"]["message"] for e in events(collector.snapshot(), "i") if e.get("cat") == "app"],
        timeout_s=60,
        what="the app's two messages",
        until=lambda found: len(found) == 2,
    )
    assert shown == ["rows=%d", "<Unprintable whose str() failed>"]


CLOSES_EVERY_FD = """
import logging, os, socket, time
logging.warning("before")
time.sleep(0.3)
os.closerange(3, 4096)  # as a daemon does (python-daemon's DaemonContext): ringtrace's sockets go too
pairs = [socket.socketpair() for _ in range(6)]  # the program's own sockets, on the lowest free fds
for i in range(30):
    logging.warning("after %d", i)
    time.sleep(0.01)
foreign = 0
for a, b in pairs:
    for end in (a, b):
        end.setblocking(False)
        try:
            foreign += len(end.recv(65536))
        except BlockingIOError:
            pass
print("foreign bytes", foreign)
"""


def test_a_program_that_closes_every_fd_gets_no_bytes_of_ours_and_recording_goes_on(
    collector: CollectorProcess, tmp_path: Path
) -> None:
    # After os.closerange the streamer's and its wake-up's fd numbers are the program's: ringtrace wrote its wake-up
    # byte into a socket of the program, and its streamer died of EBADF ("stopped by an unexpected error").
    (tmp_path / "daemon.py").write_text(CLOSES_EVERY_FD)
    done = run([RINGTRACE, "run", "--collector", collector.tcp_address, "daemon.py"], tmp_path, program_environment())
    assert done.stdout == "foreign bytes 0\n"
    assert "stopped by an unexpected error" not in done.stderr
    assert numbered_messages(collector, "after", 30) == [f"after {i}" for i in range(30)]


FORKS_THEN_CLOSES_EVERY_FD = """
import logging, os, sys, time
logging.warning("before")
time.sleep(0.3)
pid = os.fork()
if pid:
    os.waitpid(pid, 0)
    sys.exit(0)
os.closerange(3, 4096)  # a daemon's child: the fork's new wake-up pair goes, and its numbers are free again
for i in range(30):
    logging.warning("child %d", i)
    time.sleep(0.01)
"""


def test_a_daemons_forked_child_that_closes_every_fd_connects_and_records_all_it_logs(
    collector: CollectorProcess, tmp_path: Path
) -> None:
    # The forked child's streamer makes its wake-up pair at the fork, on the lowest free numbers (its parent's, just
    # closed); after os.closerange its first connection got the old pair reader's number, still registered in its
    # select: "already registered", a failed pass, and what it held was lost.
    (tmp_path / "daemon.py").write_text(FORKS_THEN_CLOSES_EVERY_FD)
    done = run([RINGTRACE, "run", "--collector", collector.tcp_address, "daemon.py"], tmp_path, program_environment())
    assert done.returncode == 0
    assert "unexpected error" not in done.stderr
    assert numbered_messages(collector, "child", 30) == [f"child {i}" for i in range(30)]


def numbered_messages(collector: CollectorProcess, word: str, count: int) -> list[str]:
    """The messages ``"WORD N"`` the collector holds, in N's order, once it holds ``count`` of them (60 s at most)."""
    found = wait_for(
        lambda: [
            e["args"]["message"]
            for e in events(collector.snapshot(), "i")
            if e.get("args", {}).get("message", "").startswith(word + " ")
        ],
        until=lambda found: len(found) >= count,
        timeout_s=60,
        what=f"{count} messages '{word} N' logged after the program closed every descriptor",
    )
    return sorted(found, key=lambda text: int(text.split()[1]))


def test_a_programs_samples_begin_where_they_would_under_python_not_in_ringtrace_run(
    collector: CollectorProcess, tmp_path: Path
) -> None:
    # The command's own frames (its script, its main, the function that runs the program) sat at the root of every
    # sample of the program. Now a script's stacks begin at its <module>, and a module's at runpy's, as a sampling
    # profiler shows them under `python` and `python -m` (the command's own work before, if sampled, keeps its frames).
    spin = (
        "import time\n"
        "def hot():\n"
        "    until = time.monotonic() + 0.4\n"
        "    while time.monotonic() < until:\n"
        "        pass\n"
    )
    (tmp_path / "stackroot.py").write_text(spin + "def main():\n    hot()\nmain()\n")
    (tmp_path / "stackroot_mod.py").write_text(spin + "hot()\n")
    for program, name, root in (
        (["stackroot.py"], "stackroot.py", "<module>"),
        (["-m", "stackroot_mod"], "stackroot_mod", "_run_module_as_main"),
    ):
        done = run(
            [RINGTRACE, "run", "--collector", collector.tcp_address, "--sample-hz", "500", *program],
            tmp_path,
            program_environment(),
        )
        assert (done.stderr, done.returncode) == ("", 0)
        graph = wait_for(
            lambda name=name: collector.json(f"/flamegraph?process={name}"),
            until=lambda graph: graph["samples"] >= 20,
            timeout_s=60,
            what=f"samples of {name}",
        )
        nodes = graph["nodes"]
        path, at = [], nodes["function"].index("hot") + 1  # (a node's parent is its index + 1; 0 for a root)
        while at:
            path.append((nodes["function"][at - 1], nodes["file"][at - 1]))
            at = nodes["parent"][at - 1]
        assert path[-1][0] == root, path
        assert not any("ringtrace" in file or "launch" in file for _, file in path), path


def test_a_program_that_names_itself_under_ringtrace_run_is_one_process_renamed(
    collector: CollectorProcess, tmp_path: Path
) -> None:
    # The name recording started with is the launcher's guess: the program's own first connect() under a name renamed
    # nothing but made another process, so /sources listed "named.py" (holding the start instant) beside "svc". Its
    # second connect() under another name is another process, as documented.
    (tmp_path / "named.py").write_text(
        "import sys, ringtrace.client\n"
        "tl = ringtrace.client.connect(sys.argv[1], process_name='svc')\n"
        "tl.instant('as svc')\n"
        "assert tl.flush(timeout_s=30)\n"
        "tl = ringtrace.client.connect(sys.argv[1], process_name='batch')\n"
        "tl.instant('as batch')\n"
        "assert tl.flush(timeout_s=30)\n"
    )
    done = run(
        [RINGTRACE, "run", "--collector", collector.tcp_address, "named.py", collector.tcp_address],
        tmp_path,
        program_environment(),
    )
    assert (done.stderr, done.returncode) == ("", 0)
    names = wait_for(
        lambda: sorted(p["process_name"] for p in collector.json("/sources")["processes"]),
        until=lambda names: "svc" in names and "batch" in names,
        timeout_s=60,
        what="the program's two names in /sources",
    )
    assert "named.py" not in names, names
    recorded = {e["name"] for e in events(collector.snapshot("?process=svc"), "i")}
    assert {"ringtrace.recording", "as svc"} <= recorded, recorded
