"""Where the service keeps saved incidents (``service/incident_dir.py``), and what ``/metrics`` and ``/stats`` say of
them (``http/metrics.py``, ``Collector.stats``): a collector made, not started."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from ringtrace.collector.service.app import Collector
from ringtrace.collector.service.config import CollectorConfig
from ringtrace.collector.service.incident_dir import incidents_directory
from ringtrace.wire.errors import ConfigError


def config(**options: Any) -> CollectorConfig:
    return CollectorConfig(**{"tcp_port": 0, "http_port": 0, **options})


def test_in_memory_a_directory_of_its_own_under_the_temporary_one_made_when_needed() -> None:
    assert incidents_directory(config(http_port=7701)) == Path(tempfile.gettempdir()) / "ringtrace-incidents-7701"
    directory = incidents_directory(config())
    assert directory == Path(tempfile.gettempdir()) / f"ringtrace-incidents-{os.getpid()}"
    Collector(config())
    assert not directory.exists()  # (no incident yet: nothing is left behind by a collector that never had one)


def test_with_a_data_dir_its_incidents_directory_unless_told_another(tmp_path: Path) -> None:
    data = tmp_path / "data"
    collector = Collector(config(data_dir=str(data)))
    assert collector.incident_files.directory == data / "incidents" and (data / "incidents").is_dir()
    elsewhere = tmp_path / "elsewhere"
    collector = Collector(config(data_dir=str(tmp_path / "another"), incidents_dir=str(elsewhere)))
    assert collector.incident_files.directory == elsewhere and elsewhere.is_dir()


def test_limits_are_passed_on_and_checked(tmp_path: Path) -> None:
    files = Collector(
        config(incidents_dir=str(tmp_path), incidents_max_count=3, incidents_max_bytes=4096)
    ).incident_files
    assert (files.max_count, files.max_bytes) == (3, 4096)
    with pytest.raises(ConfigError, match="incidents_max_count"):
        config(incidents_max_count=0)


def test_a_directory_that_cannot_be_made_is_refused_naming_it(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigError, match=r"--incidents-dir: cannot make .*file/incidents"):
        Collector(config(incidents_dir=str(tmp_path / "file" / "incidents")))


def test_metrics_and_stats_count_per_rule_and_the_retentions_removals(tmp_path: Path) -> None:
    collector = Collector(config(incidents_dir=str(tmp_path), incidents_max_count=1))
    counts = collector.incident_counts
    counts.add(counts.fired, "slow checkout", 3)
    counts.add(counts.saved, "slow checkout", 2)
    counts.add(counts.failed, "slow checkout")
    counts.add(counts.suppressed, "error log", 40)
    files = collector.incident_files
    for n in range(3):
        files.save({"id": files.new_id("slow checkout", n * 10**9), "time_ns": n * 10**9}, [b"x"])

    families = {f.name: f for f in text_string_to_metric_families(collector.metrics.render().decode())}
    samples = {tuple(sorted(s.labels.items())): s.value for s in families["ringtrace_incidents"].samples}
    assert samples == {
        (("outcome", "fired"), ("rule", "slow checkout")): 3,
        (("outcome", "saved"), ("rule", "slow checkout")): 2,
        (("outcome", "failed"), ("rule", "slow checkout")): 1,
        (("outcome", "suppressed"), ("rule", "error log")): 40,
    }
    assert families["ringtrace_incidents_removed"].samples[0].value == 2
    assert collector.stats()["incidents"] == {
        "directory": str(tmp_path), "fired": 3, "saved": 2, "suppressed": 40, "failed": 1, "removed": 2,
    }  # fmt: skip


def test_the_default_directory_is_this_users_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    files = Collector(config(http_port=7702)).incident_files
    files.begin({"id": files.new_id("r", 10**18), "rule": "r"})  # (made when needed: by the first incident)
    assert files.directory.stat().st_mode & 0o777 == 0o700
    if os.getuid() != 0:
        pytest.skip("only root can give a directory to another user")
    taken = tmp_path / "ringtrace-incidents-7703"
    taken.mkdir()
    os.chown(taken, 54321, -1)  # another user made it first
    with pytest.raises(ConfigError, match=r"owned by uid 54321, not by this user .*: give --incidents-dir"):
        Collector(config(http_port=7703))
