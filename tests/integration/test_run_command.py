"""``ringtrace run``: a set of programs run under ``python`` and under ``ringtrace run`` give the same stdout, stderr
and exit status (a plain script, ``sys.exit(3)``, an uncaught exception, ``KeyboardInterrupt``, a self-kill by SIGTERM,
``-m module`` with arguments, a fork, multiprocessing's spawn and forkserver children, a subprocess), and each process,
children included, appears in the collector's ``GET /sources`` under its name. Bad flags and values: one line, status
2.
"""

from __future__ import annotations

import signal
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest
from collector_process import CollectorProcess
from launching import RINGTRACE, names_seen, program_environment, run, wait_for_names

#: name -> (the program's files, how it is started after `python` / `ringtrace run ...`, the process names under run)
PROGRAMS: dict[str, tuple[dict[str, str], list[str], dict[str, int]]] = {
    "plain": (
        {
            "plain.py": """
                import os, sys
                print("argv", sys.argv[1:], __name__, os.path.basename(__file__), __spec__, __cached__)
                print("path0", sys.path[0] == os.path.dirname(os.path.abspath(__file__)))
                print("main", sys.modules["__main__"].__dict__ is globals(), sorted(k for k in globals() if "__" in k))
                print("to stderr", file=sys.stderr)
                def helper():
                    return 41 + 1
                if __name__ == "__main__":
                    print("helper", helper())
            """
        },
        ["plain.py", "a", "--collector", "not ours"],
        {"plain.py": 1},
    ),
    "exit-3": ({"exit3.py": "import sys\nprint('leaving')\nsys.exit(3)\n"}, ["exit3.py"], {"exit3.py": 1}),
    "exit-message": (
        {"exitmsg.py": "import sys\nsys.exit('gone: said on stderr')\n"},
        ["exitmsg.py"],
        {"exitmsg.py": 1},
    ),
    "uncaught": (
        {
            "uncaught.py": """
                def inner():
                    raise ValueError("no such thing")
                def outer():
                    try:
                        {}["key"]
                    except KeyError:
                        inner()
                print("before")
                outer()
            """
        },
        ["uncaught.py"],
        {"uncaught.py": 1},
    ),
    "keyboard-interrupt": (
        {"interrupt.py": "import atexit\natexit.register(print, 'at exit')\nraise KeyboardInterrupt\n"},
        ["interrupt.py"],
        {"interrupt.py": 1},
    ),
    "sigterm": (
        {
            "sigterm.py": """
                import json, os, signal, sys, time, urllib.request
                print("flushed before", flush=True)
                # Under ringtrace run (the test says where the collector lists processes): until this one is listed.
                # A process killed before its first batch went out is not (what SIGTERM ends is lost, as documented),
                # which on a busy machine the first milliseconds of a program may be.
                deadline, url = time.monotonic() + 60, os.environ.get("LISTED_AT")
                while url and time.monotonic() < deadline:
                    listed = json.load(urllib.request.urlopen(url, timeout=10))["processes"]
                    if any(process["pid"] == os.getpid() for process in listed):
                        break
                    time.sleep(0.05)
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(60)
            """
        },
        ["sigterm.py"],
        {"sigterm.py": 1},
    ),
    "module": (
        {
            "tool/__init__.py": "",
            "tool/cli.py": """
                import os, sys
                print("argv", [os.path.relpath(sys.argv[0])] + sys.argv[1:], __name__, __spec__.name, __package__)
                print("path0", sys.path[0] == os.getcwd())
            """,
        },
        ["-m", "tool.cli", "x", "-m", "--sample-hz=9"],
        {"tool.cli": 1},
    ),
    "directory": (
        {
            "appdir/__main__.py": """
                import sys
                import helper
                print("argv", sys.argv, sys.path[0], __name__, __spec__.name, helper.NAME)
            """,
            "appdir/helper.py": "NAME = 'helper of appdir'\n",
        },
        ["appdir", "z"],
        {"appdir": 1},
    ),
    "fork": (
        {
            "forks.py": """
                import os, sys
                pid = os.fork()
                if pid == 0:
                    print("child", flush=True)
                    sys.exit(0)
                _, status = os.waitpid(pid, 0)
                print("parent", os.waitstatus_to_exitcode(status))
            """
        },
        ["forks.py"],
        {"forks.py": 2},
    ),
    "multiprocessing": (
        {
            "pools.py": """
                import multiprocessing
                def square(x):
                    return x * x
                def report(method):
                    print("in", method, multiprocessing.current_process().name, flush=True)
                if __name__ == "__main__":
                    for method in ("spawn", "forkserver", "fork"):
                        context = multiprocessing.get_context(method)
                        child = context.Process(target=report, args=(method,))
                        child.start()
                        child.join()
                        print(method, child.exitcode)
                    with multiprocessing.get_context("fork").Pool(1) as pool:
                        print("fork pool", pool.map(square, [2, 3]))
            """
        },
        ["pools.py"],
        {
            "pools.py": 1,
            "pools.py (SpawnProcess-1)": 1,
            "pools.py (ForkServerProcess-2)": 1,
            "pools.py (ForkProcess-3)": 1,
            "pools.py (ForkPoolWorker-4)": 1,
        },
    ),
    "subprocess": (
        {
            "parent.py": """
                import subprocess, sys
                done = subprocess.run([sys.executable, "child.py", "arg"], capture_output=True, text=True)
                print("child said", done.stdout.strip(), done.returncode)
            """,
            "child.py": "import sys\nprint('child', sys.argv[1:])\nsys.exit(5)\n",
        },
        ["parent.py"],
        {"parent.py": 1, "child.py": 1},
    ),
}


def _write(directory: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip())


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_a_program_runs_as_under_python_and_each_of_its_processes_is_recorded(
    name: str, collector: CollectorProcess, tmp_path: Path
) -> None:
    files, argv, names = PROGRAMS[name]
    _write(tmp_path, files)
    environment = program_environment()
    under_python = run([sys.executable, *argv], tmp_path, environment)
    listed_at = {"LISTED_AT": f"{collector.http_url}/sources"} if name == "sigterm" else {}
    under_run = run(
        [RINGTRACE, "run", "--collector", collector.tcp_address, *argv], tmp_path, {**environment, **listed_at}
    )
    assert (under_run.stdout, under_run.stderr, under_run.returncode) == (
        under_python.stdout,
        under_python.stderr,
        under_python.returncode,
    )
    assert under_python.stdout or under_python.stderr  # (the program ran)
    wait_for_names(collector, Counter(names))


def test_the_endings_are_python_s(tmp_path: Path, collector: CollectorProcess) -> None:
    # What the comparison above holds, said outright: the statuses and the traceback's first frame.
    endings = {}
    for name in ("exit-3", "uncaught", "keyboard-interrupt", "sigterm"):
        files, argv, _ = PROGRAMS[name]
        _write(tmp_path, files)
        endings[name] = run(
            [RINGTRACE, "run", "--collector", collector.tcp_address, *argv], tmp_path, program_environment()
        )
    assert endings["exit-3"].returncode == 3
    assert endings["uncaught"].returncode == 1
    assert endings["uncaught"].stderr.splitlines()[1].startswith(f'  File "{tmp_path / "uncaught.py"}", line ')
    assert "During handling of the above exception" in endings["uncaught"].stderr
    assert endings["keyboard-interrupt"].returncode == -signal.SIGINT
    assert endings["keyboard-interrupt"].stdout == "at exit\n"
    assert endings["sigterm"].returncode == -signal.SIGTERM
    assert endings["sigterm"].stdout == "flushed before\n"


def test_the_process_name_flag_names_the_program_and_not_its_children(
    collector: CollectorProcess, tmp_path: Path
) -> None:
    files, argv, _ = PROGRAMS["subprocess"]
    _write(tmp_path, files)
    done = run(
        [RINGTRACE, "run", "--collector", collector.tcp_address, "--process-name", "web-1", *argv],
        tmp_path,
        program_environment(),
    )
    assert done.returncode == 0, done.stderr
    wait_for_names(collector, Counter({"web-1": 1, "child.py": 1}))


def test_a_process_name_from_the_environment_names_the_program_and_not_its_children(
    collector: CollectorProcess, tmp_path: Path
) -> None:
    # RINGTRACE_PROCESS_NAME given to run, as --process-name is: its children (a subprocess, a pool's workers started
    # by spawn and by fork) are named as without it, after their own program or their parent and themselves.
    _write(
        tmp_path,
        {
            "named.py": """
                import multiprocessing, subprocess, sys
                def square(x):
                    return x * x
                if __name__ == "__main__":
                    for method in ("spawn", "fork"):
                        with multiprocessing.get_context(method).Pool(1) as pool:
                            print(method, pool.map(square, [2, 3]))
                    subprocess.run([sys.executable, "child.py"], check=True)
            """,
            "child.py": "print('child')\n",
        },
    )
    done = run(
        [RINGTRACE, "run", "--collector", collector.tcp_address, "named.py"],
        tmp_path,
        program_environment(RINGTRACE_PROCESS_NAME="web-1"),
    )
    assert (done.returncode, done.stdout) == (0, "spawn [4, 9]\nfork [4, 9]\nchild\n"), done.stderr
    expected = Counter({"web-1": 1, "web-1 (SpawnPoolWorker-1)": 1, "web-1 (ForkPoolWorker-2)": 1, "child.py": 1})
    wait_for_names(collector, expected)
    assert names_seen(collector) == expected  # (and no other: no child under the parent's name)


def test_a_child_multiprocessing_forks_is_named_as_it_is_born_however_early_it_records(
    collector: CollectorProcess, tmp_path: Path
) -> None:
    # Its first event (a garbage collection, in an after-fork hook of the program's, which multiprocessing runs before
    # those registered in the child) starts its stream before multiprocessing's hooks have all run: the stream's
    # HELLO names the child already. (Named only then, it went out under the parent's name, and a HELLO under the
    # child's raced it: the collector took the name that came last.)
    _write(
        tmp_path,
        {
            "early.py": """
                import gc, multiprocessing, multiprocessing.util, ringtrace.client
                class Cache:
                    pass
                CACHE = Cache()
                def collected_after_fork(cache):
                    gc.collect()
                    listeners = ringtrace.client.default_timeline().listeners
                    print("streamed as", *(x.process_name for x in listeners if type(x).__name__ == "Streamer"))
                def report():
                    print("in", multiprocessing.current_process().name, flush=True)
                if __name__ == "__main__":
                    multiprocessing.util.register_after_fork(CACHE, collected_after_fork)
                    child = multiprocessing.get_context("fork").Process(target=report)
                    child.start()
                    child.join()
            """
        },
    )
    done = run([RINGTRACE, "run", "--collector", collector.tcp_address, "early.py"], tmp_path, program_environment())
    assert (done.returncode, done.stdout) == (0, "streamed as early.py (ForkProcess-1)\nin ForkProcess-1\n"), done
    expected = Counter({"early.py": 1, "early.py (ForkProcess-1)": 1})
    wait_for_names(collector, expected)
    assert names_seen(collector) == expected


@pytest.mark.parametrize(
    ("argv", "environment", "said"),
    [
        (["plain.py"], {}, "ringtrace run: no collector: give --collector HOST:PORT or set RINGTRACE_COLLECTOR"),
        (["--collector", "nowhere", "plain.py"], {}, "ringtrace run: --collector takes HOST:PORT"),
        (["--collector", "h:1", "--sample-hz", "fast", "plain.py"], {}, "ringtrace run: --sample-hz takes samples"),
        (["--collector", "h:1", "--sample-hz=-1", "plain.py"], {}, "ringtrace run: --sample-hz takes samples"),
        (
            ["--collector", "h:1", "plain.py"],
            {"RINGTRACE_SAMPLE_HZ": "1e9"},
            "ringtrace run: RINGTRACE_SAMPLE_HZ takes",
        ),
        (["plain.py"], {"RINGTRACE_COLLECTOR": "h:1", "RINGTRACE_INTEGRATIONS_OFF": "nope"}, "ringtrace run: "),
        (["--collector", "h:1", "--no-such-thing", "plain.py"], {}, "ringtrace run: unknown option '--no-such-thing'"),
        (["--collector", "h:1"], {}, "ringtrace run: give a script or -m module to run"),
        (["--collector", "h:1", "-m"], {}, "ringtrace run: -m takes a module's name"),
        (["--collector"], {}, "ringtrace run: --collector takes a value"),
    ],
)
def test_a_bad_flag_or_value_is_one_line_and_status_2(
    argv: list[str], environment: dict[str, str], said: str, tmp_path: Path
) -> None:
    _write(tmp_path, PROGRAMS["plain"][0])
    done = run([RINGTRACE, "run", *argv], tmp_path, program_environment(**environment))
    assert done.returncode == 2
    assert done.stdout == ""
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stderr.startswith(said)
    for value in ("nowhere", "fast", "-1", "1e9", "nope"):  # the value refused is named
        if value in argv or value in environment.values():
            assert repr(value) in done.stderr


def test_a_script_that_cannot_be_opened_is_one_line_and_status_2(tmp_path: Path) -> None:
    done = run([RINGTRACE, "run", "--collector", "h:1", "absent.py"], tmp_path, program_environment())
    assert done.returncode == 2
    assert (
        done.stderr
        == f"ringtrace run: can't open file {str(tmp_path / 'absent.py')!r}: [Errno 2] No such file or directory\n"
    )


def test_the_options_stop_at_the_script(collector: CollectorProcess, tmp_path: Path) -> None:
    _write(tmp_path, {"args.py": "import sys\nprint(sys.argv[1:])\n"})
    done = run(
        [RINGTRACE, "run", "--collector", collector.tcp_address, "args.py", "--no-logging", "--help", "-m", "x"],
        tmp_path,
        program_environment(),
    )
    assert (done.stdout, done.stderr, done.returncode) == ("['--no-logging', '--help', '-m', 'x']\n", "", 0)


def test_the_sampler_stops_before_the_exit_delivery_so_no_sample_is_lost(
    collector: CollectorProcess, tmp_path: Path
) -> None:
    # Samples taken while the exit delivery closes the timeline would be refused, counted and said as lost: the
    # sampler stops first. 1,000 Hz and busy threads make such a sample likely in every run before it did.
    _write(
        tmp_path,
        {
            "busy.py": """
                import threading, time
                def spin(until):
                    while time.monotonic() < until:
                        sum(range(100))
                until = time.monotonic() + 0.3
                threads = [threading.Thread(target=spin, args=(until,)) for _ in range(3)]
                for thread in threads:
                    thread.start()
                spin(until)
                for thread in threads:
                    thread.join()
                print("done")
            """
        },
    )
    for _ in range(5):
        done = run(
            [RINGTRACE, "run", "--collector", collector.tcp_address, "--sample-hz", "1000", "busy.py"],
            tmp_path,
            program_environment(),
        )
        assert (done.stdout, done.stderr, done.returncode) == ("done\n", "", 0)
    wait_for_names(collector, Counter({"busy.py": 5}))
    processes = collector.json("/sources")["processes"]
    assert [process["client_dropped_events"] for process in processes] == [0] * 5


def test_the_batch_interval_is_the_program_s_and_its_children_s(collector: CollectorProcess, tmp_path: Path) -> None:
    # The flag sets how often the program's events are handed to its connection, and its children's (a subprocess
    # is given it through RINGTRACE_BATCH_INTERVAL); everything still reaches the collector.
    shown = "import ringtrace.client as c\nprint([x.batch_interval_s for x in c.default_timeline().listeners])\n"
    _write(
        tmp_path,
        {
            "paced.py": shown + "import subprocess, sys\nsubprocess.run([sys.executable, 'child.py'], check=True)\n",
            "child.py": shown,
        },
    )
    done = run(
        [RINGTRACE, "run", "--collector", collector.tcp_address, "--batch-interval", "0.25", "paced.py"],
        tmp_path,
        program_environment(RINGTRACE_BATCH_INTERVAL="9"),  # (the flag wins, and is what its children are given)
    )
    assert (done.returncode, done.stdout) == (0, "[0.25]\n[0.25]\n"), done.stderr
    wait_for_names(collector, Counter({"paced.py": 1, "child.py": 1}))
