"""The fleet switch's cost: interpreter start (``python -c pass``) with its ``.pth`` in site-packages and without, with
``RINGTRACE_AUTO`` unset; the ``.pth`` line's own cost when unset; and interpreter start (and exit) with
``RINGTRACE_AUTO=1`` against a real collector, against the same interpreter with it unset.

The first pair runs two throwaway venvs (``--without-pip``) that differ only by the ``.pth`` file, started in turn
(interleaved, rotating the order each round); the AUTO pair runs this interpreter, where ringtrace is installed. With
``RINGTRACE_AUTO=1`` a process connects, applies the integrations this install has (those it lacks are turned off:
each would say so on stderr), records its start and delivers it before it exits: that is what the figure holds.
"""

from __future__ import annotations

import importlib.util
import os
import site
import subprocess
import sys
import tempfile
import time
import timeit
import venv
from pathlib import Path

from _common import bench_main, collector, interleave, median, table
from ringtrace.client.integrations import INTEGRATIONS

PTH = Path(__file__).parents[1] / "client" / "launch" / "ringtrace-fleet-switch.pth"
#: What the switch imports when set (the client with it): the share of the AUTO=1 figure that is importing.
IMPORTED = "ringtrace.client.launch.fleet_switch"


def _start_us(python: str, environment: dict[str, str], code: str = "pass") -> float:
    started = time.perf_counter()
    subprocess.run([python, "-c", code], env=environment, check=True)
    return (time.perf_counter() - started) * 1e6


def _venv(directory: Path, with_switch: bool) -> str:
    venv.EnvBuilder(with_pip=False).create(directory)
    python = directory / "bin" / "python"
    site_packages = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    if with_switch:
        (Path(site_packages) / PTH.name).write_text(PTH.read_text())
    return str(python)


def _line_ns(n: int) -> float:
    """The ``.pth`` line as ``site`` runs it (``exec``), RINGTRACE_AUTO unset; less an empty ``exec``'s cost."""
    line = compile(PTH.read_text().strip(), "<pth>", "exec")
    empty = compile("pass", "<pth>", "exec")
    namespace: dict[str, object] = {}
    with_line = min(timeit.repeat(lambda: exec(line, namespace), number=n, repeat=5)) / n
    baseline = min(timeit.repeat(lambda: exec(empty, namespace), number=n, repeat=5)) / n
    return (with_line - baseline) * 1e9


def _site_us(directory: str, n: int) -> float:
    """What ``site`` spends on the ``.pth`` file at start, RINGTRACE_AUTO unset: open, read, exec each line."""
    os.environ.pop("RINGTRACE_AUTO", None)
    n = max(n // 500, 20)
    return min(timeit.repeat(lambda: site.addpackage(directory, PTH.name, set()), number=n, repeat=5)) / n * 1e6


def bench(n: int, rounds: int) -> int:
    unset = {name: value for name, value in os.environ.items() if not name.startswith("RINGTRACE_")}
    with tempfile.TemporaryDirectory() as scratch:
        bare = _venv(Path(scratch, "bare"), with_switch=False)
        switched = _venv(Path(scratch, "switch"), with_switch=True)
        results = interleave(
            {"no .pth": lambda: _start_us(bare, unset), ".pth, unset": lambda: _start_us(switched, unset)}, rounds
        )
        pth_only = Path(scratch, "pth-only")
        pth_only.mkdir()
        (pth_only / PTH.name).write_text(PTH.read_text())
        site_us = _site_us(str(pth_only), n)
    without, with_pth = median(results["no .pth"]), median(results[".pth, unset"])
    line_ns = _line_ns(n)
    missing = [
        integration.name
        for integration in INTEGRATIONS
        if importlib.util.find_spec(integration.install.partition(":")[0]) is None
    ]
    with collector() as running:
        auto = dict(unset, RINGTRACE_AUTO="1", RINGTRACE_COLLECTOR=running.tcp)
        auto["RINGTRACE_INTEGRATIONS_OFF"] = ",".join(missing)
        auto_results = interleave(
            {
                "unset": lambda: _start_us(sys.executable, unset),
                "import": lambda: _start_us(sys.executable, unset, f"import {IMPORTED}"),
                "AUTO=1": lambda: _start_us(sys.executable, auto),
            },
            max(rounds // 4, 3),
        )
    plain, recording = median(auto_results["unset"]), median(auto_results["AUTO=1"])
    imported = median(auto_results["import"])
    rows = [
        ["python -c pass, RINGTRACE_AUTO unset", without, with_pth, with_pth / without, with_pth - without],
        [
            "python -c pass, RINGTRACE_AUTO=1 (connect, deliver, exit)",
            plain,
            recording,
            recording / plain,
            recording - plain,
        ],
    ]
    label = f"python -c 'import {IMPORTED}' (what AUTO=1 imports)"
    rows.append([label, plain, imported, imported / plain, imported - plain])
    print(table(["start and exit", "baseline us", "variant us", "ratio", "added us"], rows))
    print(f"the .pth file, unset: {site_us:.1f} us per interpreter start (site's open, read and exec of it)")
    print(f"the .pth line, unset: {line_ns:.0f} ns per interpreter start (exec of the line less an empty exec's)")
    print(f"integrations off under AUTO=1 (not in this install): {', '.join(missing) or 'none'}")
    print("target: unset, one environment lookup (the ratio within noise of 1)")
    return 0


if __name__ == "__main__":
    sys.exit(bench_main(bench, __doc__, 1_000_000, 200, (10_000, 5)))
