"""The plan of the house (docs/architecture.md) holds: no two modules share a name, and imports go one way."""

from __future__ import annotations

import ast
import tomllib
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
PACKAGES = {"client": "ringtrace.client", "collector": "ringtrace.collector"}

#: The rooms a room may not import from: the direction the architecture page draws.
FORBIDDEN = {
    "ringtrace.client": ("ringtrace.collector",),
    "ringtrace.wire": ("ringtrace.client.delivery.streaming", "ringtrace.collector"),
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
#: What the wire format may take from the rest of the client (it is shared with the collector).
WIRE_MAY_IMPORT = {"ringtrace.wire.version", "ringtrace.client.accelerator", "ringtrace.client.recording.messages"}


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


def test_the_wire_format_takes_only_what_it_needs_from_the_client() -> None:
    taken = {
        target
        for name, path in modules().items()
        if name.startswith("ringtrace.wire")
        for target in imports_of(path)
        if not target.startswith("ringtrace.wire")
    }
    assert taken <= WIRE_MAY_IMPORT


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
