"""The fleet switch: with ``RINGTRACE_AUTO=1`` (and ``RINGTRACE_COLLECTOR``) in its environment, a fresh Python process
records with no code (the collector sees it under its program's name), its output unchanged; unset, ringtrace is not
even imported; a bad value is one warning line and the program runs unrecorded; a collector that is down does not break
the program; ringtrace's own commands and the collector do not record themselves."""

from __future__ import annotations

import socket
import sys
import sysconfig
from collections import Counter
from pathlib import Path

from collector_process import CollectorProcess
from launching import RINGTRACE, names_seen, program_environment, run, wait_for_names

WORKER = "import sys\nprint('working', sys.argv[1:])\nprint('warned', file=sys.stderr)\n"


def _auto(collector_address: str, **extra: str) -> dict[str, str]:
    return program_environment(**{"RINGTRACE_AUTO": "1", "RINGTRACE_COLLECTOR": collector_address, **extra})


def test_the_switch_is_installed_in_site_packages() -> None:
    pth = Path(sysconfig.get_paths()["purelib"]) / "ringtrace-fleet-switch.pth"
    (line,) = pth.read_text().splitlines()
    assert line.startswith('import os; os.environ.get("RINGTRACE_AUTO") not in (None, "", "0") and __import__(')
    assert line.count("os.environ") == 1  # unset: one lookup


def test_a_fresh_process_records_with_no_code(collector: CollectorProcess, tmp_path: Path) -> None:
    (tmp_path / "worker.py").write_text(WORKER)
    plain = run([sys.executable, "worker.py", "x"], tmp_path, program_environment())
    switched = run([sys.executable, "worker.py", "x"], tmp_path, _auto(collector.tcp_address))
    assert (switched.stdout, switched.stderr, switched.returncode) == (plain.stdout, plain.stderr, plain.returncode)
    command = run([sys.executable, "-c", "print(1)"], tmp_path, _auto(collector.tcp_address))
    module = run([sys.executable, "-W", "ignore", "-m", "worker"], tmp_path, _auto(collector.tcp_address))
    assert (command.returncode, module.returncode) == (0, 0)
    wait_for_names(collector, Counter({"worker.py": 1, "python": 1, "worker": 1}))


def test_unset_imports_nothing_of_ringtrace(tmp_path: Path) -> None:
    probe = "import sys; print(sorted(name for name in sys.modules if name.startswith('ringtrace')))"
    for value in (None, "0", ""):
        environment = program_environment() if value is None else program_environment(RINGTRACE_AUTO=value)
        done = run([sys.executable, "-c", probe], tmp_path, environment)
        assert (done.stdout, done.stderr) == ("[]\n", "")


def test_a_bad_value_is_one_warning_and_no_recording(tmp_path: Path) -> None:
    (tmp_path / "worker.py").write_text(WORKER)
    for extra, said in (
        ({"RINGTRACE_SAMPLE_HZ": "lots"}, "ringtrace: RINGTRACE_SAMPLE_HZ takes samples a second"),
        ({"RINGTRACE_COLLECTOR": "nowhere"}, "ringtrace: RINGTRACE_COLLECTOR takes HOST:PORT"),
        ({"RINGTRACE_INTEGRATIONS_OFF": "nope"}, "ringtrace: RINGTRACE_INTEGRATIONS_OFF takes integration names"),
        ({"RINGTRACE_AUTO": "maybe"}, "ringtrace: RINGTRACE_AUTO takes 1 or 0, got 'maybe'"),
        ({"RINGTRACE_COLLECTOR": ""}, "ringtrace: no collector"),
    ):
        done = run([sys.executable, "worker.py"], tmp_path, _auto("127.0.0.1:9", **extra))
        assert (done.stdout, done.returncode) == ("working []\n", 0)
        warning, program_line = done.stderr.splitlines()
        assert warning.startswith(said), warning
        assert warning.endswith("not recording") or warning.endswith("not recording (RINGTRACE_AUTO=1)"), warning
        assert program_line == "warned"


def test_a_collector_that_is_down_does_not_break_the_program(tmp_path: Path) -> None:
    with socket.socket() as unused:  # a port nothing listens on
        unused.bind(("127.0.0.1", 0))
        address = "{}:{}".format(*unused.getsockname())
    (tmp_path / "worker.py").write_text(WORKER)
    done = run([sys.executable, "worker.py"], tmp_path, _auto(address))
    assert (done.stdout, done.returncode) == ("working []\n", 0)
    assert "Traceback" not in done.stderr


def test_a_program_whose_name_starts_like_ours_records(collector: CollectorProcess, tmp_path: Path) -> None:
    (tmp_path / "ringtrace_demo.py").write_text(WORKER)
    assert run([sys.executable, "ringtrace_demo.py"], tmp_path, _auto(collector.tcp_address)).returncode == 0
    wait_for_names(collector, Counter({"ringtrace_demo.py": 1}))


def test_ringtrace_s_own_commands_do_not_record_themselves(collector: CollectorProcess, tmp_path: Path) -> None:
    auto = _auto(collector.tcp_address)
    second = CollectorProcess(env=auto)  # `python -m ringtrace.collector`, with the switch on
    try:
        assert run([RINGTRACE, "--help"], tmp_path, auto).returncode == 0
        (tmp_path / "worker.py").write_text(WORKER)
        assert run([sys.executable, "worker.py"], tmp_path, auto).returncode == 0  # (seen: the switch is on)
        wait_for_names(collector, Counter({"worker.py": 1}))
        seen = names_seen(collector)
        assert set(seen) == {"worker.py"}, seen
    finally:
        second.stop()
