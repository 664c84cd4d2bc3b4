"""The second run of ``scripts/check`` (``RINGTRACE_PURE_PYTHON=1``, ``-m pure_python``) takes every unit test of code
with a C twin: ``TWINNED`` names every module that loads one, and only modules that are there."""

from __future__ import annotations

import ast
from pathlib import Path

from pure_python import TWINNED, imported_modules, imports_twinned

ROOT = Path(__file__).parents[2]
#: Each top-level folder of the package (wire/, once it is one, too) and its module name.
PACKAGES = {"client": "ringtrace.client", "collector": "ringtrace.collector", "wire": "ringtrace.wire"}


def modules() -> dict[str, Path]:
    found = {}
    for folder, package in PACKAGES.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            found[".".join((package, *parts)).removesuffix(".__init__")] = path
    return found


def loads_a_c_twin(tree: ast.Module) -> bool:
    """Calls ``load_optional`` (a C module, or None on the pure-Python path), or takes the accelerator's
    ``speedups``."""
    calls = any(
        isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "load_optional"
        for node in ast.walk(tree)
    )
    return calls or any(name.endswith((".speedups", "._speedups")) for name in imported_modules(tree))


def test_every_module_that_loads_a_c_twin_is_twinned() -> None:
    loading = {name for name, path in modules().items() if loads_a_c_twin(ast.parse(path.read_text()))}
    assert "ringtrace.client.accelerator" in loading and "ringtrace.collector.ingest.scan" in loading
    assert loading <= TWINNED, sorted(loading - TWINNED)


def test_every_twinned_name_is_a_module() -> None:
    assert set(modules()) >= TWINNED, sorted(TWINNED - set(modules()))


def test_the_unit_tests_of_the_recorder_and_of_the_c_writers_are_marked() -> None:
    unit = Path(__file__).parent
    for name in ("test_timeline.py", "test_encoder.py", "test_accelerator.py", "test_flows.py", "test_traced.py"):
        assert imports_twinned(unit / name), name
    assert not imports_twinned(unit / "test_protocol.py")  # the wire protocol alone: one run is enough
