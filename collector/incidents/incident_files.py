"""Saved incidents on disk: each a JSON record and a native snapshot file, written whole or not at all, kept within a
retention by count and bytes, and listed, read and deleted by id.

Theory of operation: a directory holds, per incident id,

- ``ID.pending.json``: a fired incident whose window is still being collected (the record so far); one left by a
  killed collector is handed back at start (``pending()``), to be completed or failed;
- ``ID.rtrace``: the native snapshot file (what ``format=native`` serves), written before
- ``ID.json``: the finished record (``status`` ``saved`` or ``failed``). Written last, so that a listed incident
  always has its snapshot.

Every file is written to a hidden temporary file in the same directory, synced, then renamed over its name (and the
directory synced), so a reader sees the old file or the new one, never part of one. A file that is not what it should
be (cut short, not JSON, another id inside) is skipped with its reason logged once, never a crash. File IO blocks:
callers on an event loop run these methods on a worker thread.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import logging
import os
import re
import secrets
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Final

__all__ = ["ID_PATTERN", "IncidentFiles", "new_incident_id", "owned_by_me", "valid_id"]

log = logging.getLogger("ringtrace.collector.incidents")

#: What an id may be: URL-safe, so it goes into a path or a query as it is.
ID_PATTERN: Final = re.compile(r"[A-Za-z0-9_-]{1,200}")
_RECORD: Final = ".json"
_PENDING: Final = ".pending.json"
_SNAPSHOT: Final = ".rtrace"
_TEMPORARY: Final = ".tmp"
_SLUG_CHARS: Final = 40


def valid_id(incident_id: str) -> bool:
    """Whether ``incident_id`` could name an incident (URL-safe characters only: never a path)."""
    return ID_PATTERN.fullmatch(incident_id) is not None


def new_incident_id(rule: str, time_ns: int, random_hex: str) -> str:
    """An incident id: the UTC time of ``time_ns`` (wall-clock) to the millisecond first, so ids sort by time, then
    the rule's name made URL-safe, then ``random_hex``."""
    when = datetime.datetime.fromtimestamp(time_ns // 10**9, datetime.UTC).strftime("%Y%m%dT%H%M%S")
    millis = time_ns // 10**6 % 1000
    slug = re.sub(r"[^a-z0-9]+", "-", rule.lower()).strip("-")[:_SLUG_CHARS].strip("-") or "incident"
    return f"{when}{millis:03d}Z-{slug}-{random_hex}"


class IncidentFiles:
    """The incidents of one directory.

    Args:
        directory: where they are kept (made if missing).
        max_count: the most finished incidents (saved and failed) kept; the oldest beyond are removed.
        max_bytes: the most bytes of snapshot files kept; the oldest beyond are removed (never the one just saved,
            which alone may be larger).
        make_now: make the directory now (else when the first incident is written: a default directory is not
            made for a collector that never has one).

    Raises:
        ValueError: a limit below 1.
        OSError: the directory cannot be made.
    """

    def __init__(self, directory: Path, max_count: int, max_bytes: int, *, make_now: bool = True) -> None:
        if max_count < 1:
            raise ValueError(f"incidents max count must be at least 1, not {max_count}")
        if max_bytes < 1:
            raise ValueError(f"incidents max bytes must be at least 1, not {max_bytes}")
        self.directory = directory
        self.max_count = max_count
        self.max_bytes = max_bytes
        #: Incidents removed by the retention since start.
        self.removed = 0
        # Saving (with its retention), failing and deleting may run on several worker threads at once.
        self._lock = threading.Lock()
        self._reported: set[tuple[str, int]] = set()  # (file name, mtime ns) of bad files already logged
        self._issued: set[str] = set()  # ids given out, perhaps not written yet
        #: What the log and ``/stats`` say incidents are kept in.
        self.where = str(directory)
        self._ids_lock = threading.Lock()
        if make_now:
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._drop_leftovers()

    def new_id(self, rule: str, time_ns: int) -> str:
        """A new id for an incident of ``rule`` at ``time_ns`` (wall-clock): its UTC time to the millisecond first,
        so ids sort by time, then the rule's name made URL-safe, then random digits; not given out before by this run
        (``begin`` refuses one of files already there)."""
        # On the event loop: no file is looked at, and no lock a writer holds across an fsync is taken. An id of a
        # file already there (a previous run's, the same millisecond and rule) is refused by ``begin``, which never
        # overwrites one.
        with self._ids_lock:  # (two threads never take the same one before either writes it)
            while True:
                incident_id = new_incident_id(rule, time_ns, secrets.token_hex(2))
                if incident_id not in self._issued:
                    if len(self._issued) >= 10_000:  # (ids a second or more old: files by now)
                        self._issued.clear()
                    self._issued.add(incident_id)
                    return incident_id

    def begin(self, record: dict[str, Any]) -> None:
        """Keep ``record`` (its ``id`` one of ``new_id``'s) as pending: fired, its window still being collected."""
        incident_id = self._id_of(record)
        for suffix in (_RECORD, _SNAPSHOT):
            if self._path(incident_id, suffix).exists():
                raise FileExistsError(f"incident {incident_id} is there already ({incident_id}{suffix})")
        self._write(self._path(incident_id, _PENDING), _json({**record, "status": "pending"}), exclusive=True)

    def save(self, record: dict[str, Any], chunks: Iterable[bytes]) -> dict[str, Any]:
        """Write the incident's snapshot file from ``chunks``, then its record (``bytes``, ``status`` saved, and
        ``saved_wall_ns`` if not given), drop its pending record, then remove the oldest incidents past the retention.

        Returns:
            the record as written.
        """
        incident_id = self._id_of(record)
        nbytes = self._write(self._path(incident_id, _SNAPSHOT), chunks)
        finished = {**record, "status": "saved", "bytes": nbytes}
        finished.setdefault("saved_wall_ns", time.time_ns())
        with self._lock:
            self._write(self._path(incident_id, _RECORD), _json(finished))
            _unlink(self._path(incident_id, _PENDING))
            self._retain(keep=incident_id)
        return finished

    def fail(self, record: dict[str, Any], reason: str) -> dict[str, Any]:
        """Write the record of an incident that could not be saved (``status`` failed, why in ``failure``; the
        firing's ``reason`` stays), drop its pending record and any part of its snapshot file.

        Returns:
            the record as written.
        """
        incident_id = self._id_of(record)
        finished = {**record, "status": "failed", "failure": reason, "bytes": 0}
        if not self._path(incident_id, _PENDING).exists() and self._path(incident_id, _RECORD).exists():
            raise FileExistsError(f"incident {incident_id} is there already, and not this one's to fail")
        with self._lock:
            self._write(self._path(incident_id, _RECORD), _json(finished))
            _unlink(self._path(incident_id, _SNAPSHOT))
            _unlink(self._path(incident_id, _PENDING))
            self._retain(keep=incident_id)
        return finished

    def amend(self, incident_id: str, fields: dict[str, Any]) -> dict[str, Any] | None:
        """Rewrite the finished record of ``incident_id`` with ``fields`` (learned after it was written, as its
        webhook's outcome), whole or not at all. Returns it as written; None if there is none (removed meanwhile)."""
        if not valid_id(incident_id):
            return None
        path = self._path(incident_id, _RECORD)
        with self._lock:  # (not removed by a retention or a delete between the read and the write)
            record = self._read(path, incident_id) if path.exists() else None
            if record is None:
                return None
            amended = {**record, **fields}
            self._write(path, _json(amended))
        return amended

    def pending(self) -> list[dict[str, Any]]:
        """The pending records (fired, never finished: left by a collector that stopped before saving them), oldest
        first. One that has a finished record too (stopped between the two) is dropped, not returned; a file whose
        name is no incident id's, or whose record is not one, is skipped (logged) and left as it is."""
        found = []
        for path in sorted(self.directory.glob(f"*{_PENDING}")):
            incident_id = path.name.removesuffix(_PENDING)
            if not valid_id(incident_id):
                self._report(path, "its name is not an incident id's (1 to 200 of A-Z a-z 0-9 _ -)")
                continue
            if self._path(incident_id, _RECORD).exists():
                _unlink(path)
                continue
            record = self._read(path, incident_id)
            problem = None if record is None else _pending_problem(record)
            if problem is not None:
                self._report(path, problem)
            elif record is not None:
                found.append(record)
        return sorted(found, key=_age)

    def records(self, *, pending: bool = False) -> list[dict[str, Any]]:
        """The finished records (saved and failed), newest first; with ``pending``, the pending ones too (status
        ``pending``: those with no finished record yet)."""
        found = self._finished()
        if pending:
            finished = {record["id"] for record in found}
            for path in self.directory.glob(f"*{_PENDING}"):
                incident_id = path.name.removesuffix(_PENDING)
                if valid_id(incident_id) and incident_id not in finished:
                    record = self._read(path, incident_id)
                    if record is not None and _pending_problem(record) is None:
                        found.append({**record, "status": "pending"})
        return sorted(found, key=_age, reverse=True)

    def record(self, incident_id: str, *, pending: bool = False) -> dict[str, Any] | None:
        """The finished record of ``incident_id`` (with ``pending``, else its pending one); None if there is none
        (or the id cannot be one)."""
        if not valid_id(incident_id):
            return None
        for suffix in (_RECORD, _PENDING) if pending else (_RECORD,):
            path = self._path(incident_id, suffix)
            record = self._read(path, incident_id) if path.exists() else None
            if record is not None:
                return record if suffix == _RECORD else {**record, "status": "pending"}
        return None

    def snapshot_path(self, incident_id: str) -> Path | None:
        """The snapshot file of a saved incident ``incident_id``; None if it has none (unknown, failed)."""
        if not valid_id(incident_id):
            return None
        path = self._path(incident_id, _SNAPSHOT)
        return path if self._path(incident_id, _RECORD).exists() and path.exists() else None

    def delete(self, incident_id: str) -> bool:
        """Remove the finished incident ``incident_id`` (record and snapshot file); False if there is none."""
        if not valid_id(incident_id):
            return False
        with self._lock:
            existed = _unlink(self._path(incident_id, _RECORD))
            if existed:
                _unlink(self._path(incident_id, _SNAPSHOT))
        return existed

    def _retain(self, keep: str) -> None:
        """Remove the oldest finished incidents while more than ``max_count`` are kept or their snapshot files
        hold more than ``max_bytes`` (never ``keep``, the one just finished). Under ``_lock``."""
        kept = sorted(self._finished(), key=_age)
        sizes = {record["id"]: self._size(record["id"]) for record in kept}
        total = sum(sizes.values())
        for record in kept:
            if len(sizes) <= self.max_count and total <= self.max_bytes:
                break
            if record["id"] == keep:
                continue
            _unlink(self._path(record["id"], _RECORD))
            _unlink(self._path(record["id"], _SNAPSHOT))
            total -= sizes.pop(record["id"])
            self.removed += 1
            log.info(
                "incident %s removed: more than %d incidents or %d bytes are kept (--incidents-max-count, "
                "--incidents-max-bytes)",
                record["id"],
                self.max_count,
                self.max_bytes,
            )

    def _finished(self) -> list[dict[str, Any]]:
        found = []
        for path in self.directory.glob(f"*{_RECORD}"):
            if path.name.startswith(".") or path.name.endswith(_PENDING):
                continue
            incident_id = path.name.removesuffix(_RECORD)
            record = self._read(path, incident_id)
            if record is None:
                continue
            if record.get("status") == "saved" and not self._path(incident_id, _SNAPSHOT).exists():
                if path.exists():  # (else it was deleted meanwhile: nothing to say)
                    self._report(path, "its snapshot file is missing")
                continue
            found.append(record)
        return found

    def _read(self, path: Path, incident_id: str) -> dict[str, Any] | None:
        """The record in ``path``, or None (logged once per version of the file) if it is not one of
        ``incident_id``."""
        try:
            record = json.loads(path.read_bytes())
        except FileNotFoundError:  # deleted meanwhile
            return None
        except (OSError, ValueError) as exc:
            self._report(path, f"it cannot be read as JSON ({exc})")
            return None
        if not isinstance(record, dict):
            self._report(path, f"it holds a JSON {type(record).__name__}, not an object")
            return None
        if record.get("id") != incident_id:
            self._report(path, f"its id is {record.get('id')!r}, not {incident_id!r}")
            return None
        return record

    def _report(self, path: Path, reason: str) -> None:
        try:
            version = (path.name, path.stat().st_mtime_ns)
        except OSError:
            return
        if version not in self._reported:
            if len(self._reported) > 10_000:  # bounded, if files keep changing: then some are logged again
                self._reported.clear()
            self._reported.add(version)
            log.warning("incident file %s skipped: %s", path, reason)

    def _size(self, incident_id: str) -> int:
        try:
            return self._path(incident_id, _SNAPSHOT).stat().st_size
        except OSError:
            return 0

    def _drop_leftovers(self) -> None:
        """Remove what a collector stopped mid-write left: temporary files, and snapshot files of no record."""
        for path in self.directory.glob(f".*{_TEMPORARY}"):
            _unlink(path)
        for path in self.directory.glob(f"*{_SNAPSHOT}"):
            incident_id = path.name.removesuffix(_SNAPSHOT)
            if not any(self._path(incident_id, suffix).exists() for suffix in (_RECORD, _PENDING)):
                log.info("incident file %s removed: a snapshot file of no incident (a save was cut short)", path)
                _unlink(path)

    def _path(self, incident_id: str, suffix: str) -> Path:
        return self.directory / f"{incident_id}{suffix}"

    def _id_of(self, record: dict[str, Any]) -> str:
        incident_id = record.get("id")
        if not isinstance(incident_id, str) or not valid_id(incident_id):
            raise ValueError(f"an incident id is 1 to 200 of A-Z a-z 0-9 _ -, not {incident_id!r}")
        return incident_id

    def _write(self, path: Path, chunks: Iterable[bytes], *, exclusive: bool = False) -> int:
        """Write ``chunks`` to ``path`` whole or not at all; returns how many bytes. ``exclusive``: never over a file
        there (``FileExistsError``)."""
        temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}{_TEMPORARY}")
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)  # (made now, or removed meanwhile)
        owned_by_me(self.directory)
        nbytes = 0
        try:
            with open(temporary, "xb") as out:
                for chunk in chunks:
                    out.write(chunk)
                    nbytes += len(chunk)
                out.flush()
                os.fsync(out.fileno())
            if exclusive:
                os.link(temporary, path)
                os.unlink(temporary)
            else:
                os.replace(temporary, path)
        except BaseException:
            _unlink(temporary)
            raise
        _sync_directory(self.directory)
        return nbytes


def owned_by_me(directory: Path) -> None:
    """Refuse a directory another user owns (where ids exist): incidents hold what programs traced.

    Raises:
        PermissionError: naming the directory, its owner and this user.
    """
    getuid = getattr(os, "getuid", None)
    try:
        owner = directory.stat().st_uid
    except FileNotFoundError:
        return
    if getuid is not None and owner != getuid():
        raise PermissionError(
            f"the incidents directory {directory} is owned by uid {owner}, not by this user (uid {getuid()}): "
            "another user could read or replace its incidents"
        )


def _json(record: dict[str, Any]) -> list[bytes]:
    return [json.dumps(record, separators=(",", ":")).encode()]


def _pending_problem(record: dict[str, Any]) -> str | None:
    """What makes a pending record unfit to be settled (its fields of the wrong types), or None."""
    window, processes = record.get("window", {}), record.get("processes", [])
    if not isinstance(record.get("rule", ""), str):
        return f"its rule is {record.get('rule')!r}, not a name"
    if not isinstance(window, dict) or not all(isinstance(window.get(k, 0), int) for k in ("since_ns", "until_ns")):
        return f"its window is {window!r}, not {{since_ns, until_ns}} in ns"
    if not isinstance(processes, list) or not all(isinstance(p, dict) for p in processes):
        return f"its processes are {processes!r}, not a list of {{pid, name, host}}"
    return None


def _age(record: dict[str, Any]) -> tuple[int, str]:
    time_ns = record.get("time_ns")
    return (time_ns if isinstance(time_ns, int) else 0, str(record.get("id")))


def _unlink(path: Path) -> bool:
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    return True


def _sync_directory(directory: Path) -> None:
    """Make a rename durable (where a directory can be opened: not on Windows)."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
