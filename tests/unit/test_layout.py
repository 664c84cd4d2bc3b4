"""The plan of the house (docs/architecture.md) holds: no two modules share a name, and imports go one way."""

from __future__ import annotations

import ast
import re
import tomllib
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
PACKAGES = {"wire": "ringtrace.wire", "client": "ringtrace.client", "collector": "ringtrace.collector"}

#: The rooms a room may not import from: the direction the architecture page draws.
FORBIDDEN = {
    # The ground floor: the protocol both sides share imports nothing else of ringtrace.
    "ringtrace.wire": ("ringtrace.client", "ringtrace.collector"),
    "ringtrace.client": ("ringtrace.collector",),
    # Delivery takes drained runs of events and knows timelines only as the flusher's Sweepable protocol.
    "ringtrace.client.delivery": ("ringtrace.client.recording", "ringtrace.client.otel"),
    # Recording knows no listener, streamer or option of delivery (it reaches the flusher alone, see below).
    "ringtrace.client.recording": (
        "ringtrace.client.delivery.listeners",
        "ringtrace.client.delivery.streaming",
        "ringtrace.client.delivery.threads",
        "ringtrace.client.options",
        "ringtrace.client.connect_options",
        "ringtrace.client.otel",
    ),
    "ringtrace.collector.store": (
        "ringtrace.collector.ingest",
        "ringtrace.collector.read",
        "ringtrace.collector.export",
        "ringtrace.collector.http",
        "ringtrace.collector.service",
        "ringtrace.collector.command",
    ),
    "ringtrace.collector.read": (
        "ringtrace.collector.ingest",
        "ringtrace.collector.export",
        "ringtrace.collector.http",
        "ringtrace.collector.service",
        "ringtrace.collector.command",
    ),
    "ringtrace.collector.export": (
        "ringtrace.collector.ingest",
        "ringtrace.collector.http",
        "ringtrace.collector.service",
        "ringtrace.collector.command",
    ),
    "ringtrace.collector.ingest": (
        "ringtrace.collector.read",
        "ringtrace.collector.export",
        "ringtrace.collector.http",
        "ringtrace.collector.service",
        "ringtrace.collector.command",
    ),
    "ringtrace.collector.http": ("ringtrace.collector.service", "ringtrace.collector.command"),
    "ringtrace.collector.jetstream": (
        "ringtrace.collector.ingest",
        "ringtrace.collector.http",
        "ringtrace.collector.service",
        "ringtrace.collector.command",
    ),
}
#: What recording takes of delivery: the flusher, which its buffers wake and its timelines register with.
RECORDING_MAY_IMPORT_FROM_DELIVERY = {"ringtrace.client.delivery.flusher"}


def modules() -> dict[str, Path]:
    """Every Python module of both packages, by its dotted name."""
    found = {}
    for directory, package in PACKAGES.items():
        for path in sorted((ROOT / directory).rglob("*.py")):
            parts = path.relative_to(ROOT / directory).with_suffix("").parts
            name = ".".join((package, *parts)).removesuffix(".__init__")
            found[name] = path
    return found


def imports_of(path: Path) -> set[str]:
    """The ringtrace modules a file imports from (``from X import ...`` and ``import X``)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return {name for name in names if name.startswith("ringtrace.")}


def test_no_two_modules_share_a_name() -> None:
    # Packages (their __init__) and __main__ aside: "events.py" twice read as one thing in two places.
    leaves = Counter(path.stem for path in modules().values() if path.name not in ("__init__.py", "__main__.py"))
    assert {leaf for leaf, count in leaves.items() if count > 1} == set()


def test_every_import_of_ours_is_absolute() -> None:
    # An embedding program may have a client.py of its own: nothing is imported relative to a package.
    relative = [
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for path in modules().values()
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom) and node.level > 0
    ]
    assert relative == []


@pytest.mark.parametrize("room", sorted(FORBIDDEN))
def test_imports_go_one_way(room: str) -> None:
    crossing = [
        f"{name} imports {target}"
        for name, path in modules().items()
        if name == room or name.startswith(room + ".")
        for target in imports_of(path)
        if any(target == banned or target.startswith(banned + ".") for banned in FORBIDDEN[room])
    ]
    assert crossing == []


def test_the_collector_takes_nothing_of_the_client() -> None:
    # What both sides need (the stream encoder too, which writes native frames of OTLP and foreign files) is wire's.
    taken = {
        target
        for name, path in modules().items()
        if name.startswith("ringtrace.collector")
        for target in imports_of(path)
        if target.startswith("ringtrace.client")
    }
    assert taken == set()


def test_recording_takes_nothing_of_delivery_but_the_flusher() -> None:
    taken = {
        target
        for name, path in modules().items()
        if name.startswith("ringtrace.client.recording")
        for target in imports_of(path)
        if target.startswith("ringtrace.client.delivery")
    }
    assert taken <= RECORDING_MAY_IMPORT_FROM_DELIVERY


def test_only_the_client_face_is_the_client_face() -> None:
    # ``ringtrace.client`` (its __init__) re-exports the rooms; a module inside that imported it would be a cycle.
    importing_the_face = [
        name
        for name, path in modules().items()
        if name.startswith("ringtrace.client.") and "ringtrace.client" in imports_of(path)
    ]
    assert importing_the_face == []


def test_the_client_packages_only_re_export() -> None:
    # The public face (and each room's __init__) defines nothing: what it names lives in a module of a room.
    defining = [
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for name, path in modules().items()
        if name.startswith("ringtrace.client") and path.name == "__init__.py"
        for node in ast.parse(path.read_text()).body
        if not isinstance(node, ast.Import | ast.ImportFrom | ast.Expr)
        and not (isinstance(node, ast.Assign) and [getattr(t, "id", "") for t in node.targets] == ["__all__"])
    ]
    assert defining == []


def test_every_package_face_only_re_exports() -> None:
    # An __init__.py runs before every module of its package: one that did more than re-export (set-up code, a check,
    # a class) would run it, and load what it needs, wherever any module beside it is imported (test_imports.py).
    doing_more = [
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for path in modules().values()
        if path.name == "__init__.py"
        for node in ast.parse(path.read_text()).body
        if not isinstance(node, ast.Import | ast.ImportFrom)
        and not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))  # the docstring
        and not (isinstance(node, ast.Assign) and [getattr(t, "id", "") for t in node.targets] == ["__all__"])
    ]
    assert doing_more == []


#: Sizes past which a module or a class is doing more than one job (C files are held to theirs by review).
MAX_MODULE_LINES = 500
MAX_CLASS_LINES = 350


def test_no_module_over_500_lines_and_no_class_over_350() -> None:
    too_big = []
    for path in modules().values():
        text = path.read_text()
        if len(text.splitlines()) > MAX_MODULE_LINES:
            too_big.append(f"{path.relative_to(ROOT)}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef) and (node.end_lineno or 0) - node.lineno + 1 > MAX_CLASS_LINES:
                too_big.append(
                    f"{path.relative_to(ROOT)}: class {node.name}, {node.end_lineno - node.lineno + 1} lines"
                )
    assert too_big == []


def test_the_architecture_page_names_every_module() -> None:
    # docs/architecture.md draws the rooms module by module: a module it does not name is one it no longer tells of.
    page = (ROOT / "docs" / "architecture.md").read_text()
    named = set(re.findall(r"\w+\.py", page))
    unnamed = [
        str(path.relative_to(ROOT))
        for path in modules().values()
        if path.name not in ("__init__.py", "__main__.py") and path.name not in named
    ]
    assert unnamed == []


def test_a_broken_rule_is_seen(tmp_path: Path) -> None:
    # The scan above has teeth: an import against the direction is found in a file's text.
    stray = tmp_path / "stray.py"
    stray.write_text("from ringtrace.collector.export.chrome import json_bytes\n")
    assert imports_of(stray) == {"ringtrace.collector.export.chrome"}


def test_every_package_is_in_the_distribution() -> None:
    # pyproject.toml lists the packages by hand (client/ and collector/ map to ringtrace.*): a subpackage left out
    # would be missing from every non-editable install, the README's among them.
    declared = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    packages = {name for name, path in modules().items() if path.name == "__init__.py"}
    assert packages == declared
