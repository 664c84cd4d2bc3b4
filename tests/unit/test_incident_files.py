"""IncidentFiles (``incidents/incident_files.py``): incidents written whole, listed newest first, kept within their
retention, and a bad file on disk skipped with its reason logged, never a crash."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ringtrace.collector.incidents.incident_files import IncidentFiles, valid_id

SECOND = 10**9
T0 = 1_796_000_000 * SECOND  # 2026-11-30T00:53:20Z


def record_of(files: IncidentFiles, rule: str = "slow checkout", time_ns: int = T0) -> dict[str, Any]:
    return {"id": files.new_id(rule, time_ns), "rule": rule, "time_ns": time_ns, "reason": "span lasted 250 ms"}


def names(directory: Path) -> list[str]:
    return sorted(path.name for path in directory.iterdir())


def test_ids_are_url_safe_sort_by_time_and_say_the_rule(tmp_path: Path) -> None:
    files = IncidentFiles(tmp_path, max_count=10, max_bytes=10**6)
    first = files.new_id("Slow checkout / EU!", T0)
    later = files.new_id("a", T0 + SECOND // 1000)
    assert re.fullmatch(r"\d{8}T\d{9}Z-slow-checkout-eu-[0-9a-f]{4}", first), first
    assert valid_id(first) and first < later
    assert files.new_id("!!!", T0).split("-")[1] == "incident"
    assert len(files.new_id("x" * 500, T0)) < 80
    assert not valid_id("../etc") and not valid_id("") and not valid_id("a.json")


def test_ids_given_at_one_instant_are_unique_before_any_is_written(tmp_path: Path) -> None:
    files = IncidentFiles(tmp_path, max_count=10, max_bytes=10**6)
    assert len({files.new_id("flood", T0) for _ in range(5000)}) == 5000


def test_a_saved_incident_has_its_snapshot_file_and_record(tmp_path: Path) -> None:
    files = IncidentFiles(tmp_path, max_count=10, max_bytes=10**6)
    record = record_of(files)
    files.begin(record)
    assert names(tmp_path) == [f"{record['id']}.pending.json"]
    assert files.pending() == [{**record, "status": "pending"}]
    assert files.records() == []

    saved = files.save(record, iter([b"abc", b"", b"defg"]))
    assert saved["status"] == "saved" and saved["bytes"] == 7 and saved["saved_wall_ns"] > 0
    assert names(tmp_path) == [f"{record['id']}.json", f"{record['id']}.rtrace"]
    assert files.pending() == []
    assert files.records() == [saved] and files.record(record["id"]) == saved
    path = files.snapshot_path(record["id"])
    assert path is not None and path.read_bytes() == b"abcdefg"


def test_a_failed_incident_keeps_the_firings_reason_and_says_why(tmp_path: Path) -> None:
    files = IncidentFiles(tmp_path, max_count=10, max_bytes=10**6)
    record = record_of(files)
    files.begin(record)
    failed = files.fail(record, "the collector stopped before the window was collected")
    assert failed["status"] == "failed" and failed["reason"] == record["reason"]
    assert failed["failure"] == "the collector stopped before the window was collected"
    assert files.records() == [failed] and files.pending() == []
    assert files.snapshot_path(record["id"]) is None


def test_a_finished_record_is_rewritten_whole_with_fields_learned_later(tmp_path: Path) -> None:
    files = IncidentFiles(tmp_path, max_count=10, max_bytes=10**6)
    record = record_of(files)
    saved = files.save({**record, "webhook": {"url": "http://hook/", "status": None}}, iter([b"abc"]))
    told = {"url": "http://hook/", "status": "delivered", "attempts": 2}
    amended = files.amend(record["id"], {"webhook": told})
    assert amended == {**saved, "webhook": told}
    assert files.record(record["id"]) == amended
    assert names(tmp_path) == [f"{record['id']}.json", f"{record['id']}.rtrace"]  # (no temporary file left)
    files.delete(record["id"])
    assert files.amend(record["id"], {"webhook": told}) is None  # gone meanwhile: nothing written back
    assert names(tmp_path) == []
    assert files.amend("../x", {"webhook": told}) is None


def test_records_are_newest_first_and_delete_removes_both_files(tmp_path: Path) -> None:
    files = IncidentFiles(tmp_path, max_count=10, max_bytes=10**6)
    ids = [files.save(record_of(files, time_ns=T0 + n * SECOND), [b"x"])["id"] for n in range(3)]
    assert [record["id"] for record in files.records()] == ids[::-1]
    assert files.delete(ids[1]) is True
    assert files.delete(ids[1]) is False
    assert files.delete("../../etc/passwd") is False
    assert files.record(ids[1]) is None and files.snapshot_path(ids[1]) is None
    assert [record["id"] for record in files.records()] == [ids[2], ids[0]]
    assert len(names(tmp_path)) == 4


def test_retention_by_count_removes_the_oldest_and_counts_them(tmp_path: Path) -> None:
    files = IncidentFiles(tmp_path, max_count=2, max_bytes=10**6)
    ids = [files.save(record_of(files, time_ns=T0 + n * SECOND), [b"x"])["id"] for n in range(5)]
    assert [record["id"] for record in files.records()] == [ids[4], ids[3]]
    assert files.removed == 3
    assert len(names(tmp_path)) == 4


def test_retention_by_bytes_keeps_the_newest_even_alone_too_large(tmp_path: Path) -> None:
    files = IncidentFiles(tmp_path, max_count=100, max_bytes=10)
    first = files.save(record_of(files, time_ns=T0), [b"x" * 4])["id"]
    second = files.save(record_of(files, time_ns=T0 + SECOND), [b"x" * 4])["id"]
    assert [record["id"] for record in files.records()] == [second, first] and files.removed == 0
    third = files.save(record_of(files, time_ns=T0 + 2 * SECOND), [b"x" * 4])["id"]
    assert [record["id"] for record in files.records()] == [third, second] and files.removed == 1
    huge = files.save(record_of(files, time_ns=T0 + 3 * SECOND), [b"x" * 50])["id"]
    assert [record["id"] for record in files.records()] == [huge] and files.removed == 3


def test_failed_records_count_toward_the_count_limit(tmp_path: Path) -> None:
    files = IncidentFiles(tmp_path, max_count=1, max_bytes=10**6)
    files.fail(record_of(files, time_ns=T0), "window lost")
    kept = files.save(record_of(files, time_ns=T0 + SECOND), [b"x"])
    assert files.records() == [kept] and files.removed == 1


def test_a_save_cut_short_leaves_nothing_listed_and_no_temporary_file(tmp_path: Path) -> None:
    files = IncidentFiles(tmp_path, max_count=10, max_bytes=10**6)
    record = record_of(files)
    files.begin(record)

    def chunks() -> Iterator[bytes]:
        yield b"part"
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space"):
        files.save(record, chunks())
    assert names(tmp_path) == [f"{record['id']}.pending.json"]
    assert files.records() == [] and files.pending() == [{**record, "status": "pending"}]


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b'{"id": "cut', "cannot be read as JSON"),
        (b"[1, 2]", "JSON list, not an object"),
        (b'{"id": "another"}', "its id is 'another'"),
    ],
)
def test_a_bad_record_is_skipped_with_its_reason_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, content: bytes, reason: str
) -> None:
    files = IncidentFiles(tmp_path, max_count=10, max_bytes=10**6)
    good = files.save(record_of(files), [b"x"])
    (tmp_path / "20261129T000000000Z-bad-0000.json").write_bytes(content)
    (tmp_path / "20261129T000000000Z-bad-0000.rtrace").write_bytes(b"x")
    (tmp_path / "20261129T000000000Z-pend-0000.pending.json").write_bytes(content)
    with caplog.at_level(logging.WARNING, logger="ringtrace.collector.incidents"):
        assert files.records() == [good]
        assert files.records() == [good]
        assert files.pending() == []
        assert files.record("20261129T000000000Z-bad-0000") is None
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2, warnings
    assert all(reason in warning for warning in warnings)
    assert "20261129T000000000Z-bad-0000.json skipped" in warnings[0]


def test_a_saved_record_without_its_snapshot_is_not_listed(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    files = IncidentFiles(tmp_path, max_count=10, max_bytes=10**6)
    saved = files.save(record_of(files), [b"x"])
    (tmp_path / f"{saved['id']}.rtrace").unlink()
    with caplog.at_level(logging.WARNING, logger="ringtrace.collector.incidents"):
        assert files.records() == []
    assert "its snapshot file is missing" in caplog.text


def test_at_start_leftovers_of_a_stopped_writer_are_cleared(tmp_path: Path) -> None:
    files = IncidentFiles(tmp_path, max_count=10, max_bytes=10**6)
    pending = record_of(files, "pending")
    files.begin(pending)
    (tmp_path / f"{pending['id']}.rtrace").write_bytes(b"part of it")  # kept: the engine redoes it
    (tmp_path / ".x.json.1234.tmp").write_bytes(b"{")
    (tmp_path / "20261129T000000000Z-orphan-0000.rtrace").write_bytes(b"no record")
    finished = record_of(files, "finished", T0 + SECOND)
    files.save(finished, [b"x"])
    (tmp_path / f"{finished['id']}.pending.json").write_text(json.dumps({**finished, "status": "pending"}))

    again = IncidentFiles(tmp_path, max_count=10, max_bytes=10**6)
    assert [record["id"] for record in again.pending()] == [pending["id"]]
    kept = [f"{pending['id']}.pending.json", f"{pending['id']}.rtrace"]
    kept += [f"{finished['id']}.json", f"{finished['id']}.rtrace"]
    assert names(tmp_path) == sorted(kept)


def test_limits_and_ids_are_checked(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="max count must be at least 1, not 0"):
        IncidentFiles(tmp_path, max_count=0, max_bytes=1)
    with pytest.raises(ValueError, match="max bytes must be at least 1, not -1"):
        IncidentFiles(tmp_path, max_count=1, max_bytes=-1)
    files = IncidentFiles(tmp_path, max_count=1, max_bytes=1)
    with pytest.raises(ValueError, match=r"not '\.\./x'"):
        files.begin({"id": "../x"})
    with pytest.raises(ValueError, match="not None"):
        files.save({}, [b""])


def test_a_directory_made_later_is_made_by_the_first_incident(tmp_path: Path) -> None:
    directory = tmp_path / "later" / "incidents"
    files = IncidentFiles(directory, max_count=10, max_bytes=10**6, make_now=False)
    assert not directory.exists()
    assert files.records() == [] and files.pending() == [] and files.delete("x") is False
    saved = files.save(record_of(files), [b"x"])
    assert files.records() == [saved]


def test_a_pending_file_of_no_incident_id_or_of_a_badly_typed_record_is_skipped_and_left(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    files = IncidentFiles(tmp_path, max_count=10, max_bytes=10**6)
    kept = record_of(files)
    files.begin(kept)
    (tmp_path / "bad id.pending.json").write_text(json.dumps({"id": "bad id", "rule": "x"}))
    badly_typed = {
        "20261129T000000000Z-window-0000": {"window": "none"},
        "20261129T000000000Z-processes-0000": {"processes": [5]},
        "20261129T000000000Z-rule-0000": {"rule": 7},
    }
    for incident_id, fields in badly_typed.items():
        (tmp_path / f"{incident_id}.pending.json").write_text(json.dumps({"id": incident_id, **fields}))
    with caplog.at_level(logging.WARNING, logger="ringtrace.collector.incidents"):
        assert files.pending() == [{**kept, "status": "pending"}]
    warnings = " ".join(r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    assert "bad id.pending.json skipped: its name is not an incident id's" in warnings
    assert "its window is 'none'" in warnings and "its processes are [5]" in warnings and "its rule is 7" in warnings
    assert (tmp_path / "bad id.pending.json").exists()


def test_an_id_is_given_without_looking_at_files_and_begin_never_overwrites_an_incident(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = IncidentFiles(tmp_path, max_count=10, max_bytes=10**6)
    saved = files.save(record_of(files), [b"x"])
    with monkeypatch.context() as patched:  # (new_id runs on the event loop: no file system call there)
        for name in ("exists", "stat", "glob", "iterdir"):
            patched.setattr(Path, name, lambda *args, **kwargs: pytest.fail("new_id looked at a file"))
        fresh = record_of(files)
    files.begin(fresh)
    with pytest.raises(FileExistsError):
        files.begin(fresh)
    with pytest.raises(FileExistsError, match=saved["id"]):
        files.begin({**fresh, "id": saved["id"]})
    with pytest.raises(FileExistsError, match=saved["id"]):  # (what the engine does next: nor is it failed)
        files.fail({**fresh, "id": saved["id"]}, "its id was taken")
    assert files.record(saved["id"]) == saved and files.snapshot_path(saved["id"]) is not None


def test_pending_records_are_listed_and_read_only_when_asked_for_until_finished(tmp_path: Path) -> None:
    files = IncidentFiles(tmp_path, max_count=10, max_bytes=10**6)
    saved, running = record_of(files, time_ns=T0), record_of(files, time_ns=T0 + SECOND)
    files.begin(saved)
    files.begin(running)
    files.save(saved, [b"snapshot"])
    assert [r["id"] for r in files.records()] == [saved["id"]]
    assert [(r["id"], r["status"]) for r in files.records(pending=True)] == [
        (running["id"], "pending"),
        (saved["id"], "saved"),
    ]
    assert files.record(running["id"]) is None
    assert files.record(running["id"], pending=True) == {**running, "status": "pending"}
    assert files.record(saved["id"], pending=True)["status"] == "saved"  # type: ignore[index]
    files.fail(running, "disk full")
    assert [r["status"] for r in files.records(pending=True)] == ["failed", "saved"]
    assert files.record(running["id"], pending=True)["status"] == "failed"  # type: ignore[index]
