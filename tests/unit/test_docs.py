"""The docs site: ``mkdocs build --strict`` builds it (a broken link between pages fails it), and the collector page's
flag table names every collector flag with its environment variable."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from ringtrace.collector.service.serve import ENVIRONMENT, build_parser

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


def flag_table_rows() -> list[list[str]]:
    """The cells of each row of docs/collector.md's flag table, between its markers, header and rule left out."""
    text = (ROOT / "docs" / "collector.md").read_text()
    table = text.split("<!-- flags:start -->\n", 1)[1].split("<!-- flags:end -->", 1)[0]
    header, rule, *rows = table.strip().splitlines()
    assert header == "| Flag | Environment | Default | Meaning |" and rule == "|---|---|---|---|"
    return [[cell.strip() for cell in row.strip().strip("|").split(" | ")] for row in rows]


def test_the_flag_table_names_every_collector_flag_and_its_variable() -> None:
    rows = flag_table_rows()
    documented = {row[0].strip("`"): row[1] for row in rows}
    flags = set(re.findall(r"\[(--[a-z-]+)", build_parser().format_usage())) - {"--help"}
    assert len(documented) == len(rows), "a flag has two rows"
    assert set(documented) == flags
    assert documented == {flag: f"`{ENVIRONMENT[flag]}`" for flag in flags}
