"""The docs site: ``mkdocs build --strict`` builds it, and a broken link between pages fails it. (The collector page's
flag table is held to the option table in test_options.py; the snapshots page's table of formats to the format
registry here; the client page's options table to the client's in test_client_options.py.)"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from ringtrace.collector.export.formats import FORMATS_END, FORMATS_START, formats_block, formats_markdown

ROOT = Path(__file__).parents[2]
needs_mkdocs = pytest.mark.skipif(
    importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None,
    reason="mkdocs or mkdocs-material is not installed (pip install -e '.[docs]')",
)


def mkdocs_build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    # Material's notice of its successor is not a finding of the build.
    environ = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    build = [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(config)]
    return subprocess.run([*build, "--site-dir", str(site)], capture_output=True, text=True, timeout=120, env=environ)


@needs_mkdocs
def test_the_site_builds_strict(tmp_path: Path) -> None:
    done = mkdocs_build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "site" / "collector" / "index.html").is_file()


@needs_mkdocs
def test_a_broken_link_between_pages_fails_the_build(tmp_path: Path) -> None:
    # The check above has teeth: the same site with one link to a page that does not exist is refused.
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    index = tmp_path / "docs" / "index.md"
    index.write_text(index.read_text() + "\nSee [the missing page](missing.md).\n")
    done = mkdocs_build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert done.returncode != 0
    assert "missing.md" in done.stdout + done.stderr


def test_the_setup_command_installs_the_checkout_as_scripts_check_does() -> None:
    # The two commands share .venv. Were the collector's install not editable, scripts/check's editable one would
    # delete the installed package under the collector that still runs from it (its web page then answered 500).
    check = (ROOT / "scripts" / "check").read_text()
    assert ".venv/bin/python -m pip install -q -e '.[dev]'" in check
    for document in (ROOT / "README.md", ROOT / "docs" / "index.md"):
        setup = [line for line in document.read_text().splitlines() if line.startswith("python3 -m venv .venv &&")]
        assert setup == [
            "python3 -m venv .venv && .venv/bin/pip install -e '.[collector]' && .venv/bin/ringtrace-collector"
        ], document.name


def test_the_docs_format_table_is_the_format_registry() -> None:
    block = formats_block((ROOT / "docs" / "snapshots.md").read_text(encoding="utf-8"))
    assert block is not None, f"docs/snapshots.md has no {FORMATS_START} ... {FORMATS_END} block"
    assert block == formats_markdown(), (
        "rewrite the block with ringtrace.collector.export.formats.with_formats_markdown"
    )
