"""Package faces are thin: importing a module loads what it needs and nothing of the rooms above it.

Each group of modules is imported in one fresh interpreter, a module at a time; after each, the modules it brought in
that its group must not load are noted against it. What the layout test reads in the source (who imports whom), this
holds in a running process, through every ``__init__.py`` and every indirect import.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]

#: The collector's service and its third-party weight: the asyncio server, its event loop, the HTTP API and ingest,
#: the JetStream and gRPC clients, the OTLP protos and the metrics library.
SERVICE_LIBRARIES = ("aiohttp", "uvloop", "nats", "grpc", "opentelemetry", "prometheus_client")
SERVICE = (
    *SERVICE_LIBRARIES,
    "ringtrace.collector.service",
    "ringtrace.collector.http",
    "ringtrace.collector.ingest",
)

#: Rooms (folders of modules, or one module), and what importing any of their modules may not load.
GROUPS = {
    "wire": (("wire",), (*SERVICE, "ringtrace.client", "ringtrace.collector")),
    "collector store, read, export and foreign": (
        ("collector/store", "collector/read", "collector/export", "collector/foreign"),
        SERVICE,
    ),
    # The ``ringtrace`` command: only ``ringtrace collect`` loads the service, when it runs. It checks its filters with
    # the HTTP API's query parser (``http/query.py``, no aiohttp), and nothing else of the API.
    "command": (
        ("collector/command",),
        (
            *SERVICE_LIBRARIES,
            "ringtrace.collector.service",
            "ringtrace.collector.http.api",
        ),
    ),
}

#: Watches each import in turn: prints, as JSON, the forbidden modules (or packages) each module loaded first (or
#: its error).
PROBE = """
import importlib, json, sys
modules, forbidden = sys.argv[1].split(","), tuple(sys.argv[2].split(","))
found = {}
for module in modules:
    try:
        importlib.import_module(module)
    except Exception as exc:
        found[module] = [f"failed: {type(exc).__name__}: {exc}"]
        continue
    loaded = [f for f in forbidden if any(name == f or name.startswith(f + ".") for name in sys.modules)]
    if loaded:
        found[module] = loaded
        forbidden = tuple(f for f in forbidden if f not in loaded)  # (named once: by the first that loaded it)
print(json.dumps(found))
"""


def modules_in(folder: str) -> list[str]:
    """The dotted names of every module under ``folder`` (``wire/`` is ``ringtrace.wire``), packages included."""
    found = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        found.append(".".join(("ringtrace", *parts)).removesuffix(".__init__"))
    return found


def forbidden_loads(modules: list[str], forbidden: tuple[str, ...], path: str = "") -> dict[str, list[str]]:
    """Per module of ``modules``, imported in that order in one fresh interpreter, the ``forbidden`` modules (or
    packages) that loaded first with it; ``path``: more room on ``PYTHONPATH``."""
    env = dict(os.environ)
    if path:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, (path, env.get("PYTHONPATH"))))
    result = subprocess.run(
        [sys.executable, "-c", PROBE, ",".join(modules), ",".join(forbidden)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    )
    found: dict[str, list[str]] = json.loads(result.stdout)
    return found


@pytest.mark.parametrize("group", sorted(GROUPS))
def test_a_room_loads_nothing_above_it(group: str) -> None:
    folders, forbidden = GROUPS[group]
    modules = [module for folder in folders for module in modules_in(folder)]
    assert len(modules) > len(folders)
    assert forbidden_loads(modules, forbidden) == {}


def test_the_client_loads_nothing_of_the_collector() -> None:
    # The client's public face (connect, the listeners, the streamer) and every module behind it.
    assert forbidden_loads(["ringtrace.client"], (*SERVICE, "ringtrace.collector")) == {}


def test_a_package_face_imports_nothing() -> None:
    # ``import ringtrace.collector.store.ring`` runs ``collector/__init__.py`` and ``store/__init__.py`` first: a
    # face that imported a module of its package would load it (and all it needs) for every module beside it. The
    # client's face is its public API, and imports what it re-exports.
    modules = [module for folder in ("wire", "collector") for module in modules_in(folder)]
    faces = [module for module in modules if (ROOT / f"{module.replace('.', '/')[10:]}/__init__.py").exists()]
    others = tuple(module for module in modules if module not in faces)
    assert len(faces) > 10
    assert forbidden_loads(faces, (*others, "ringtrace.client", *SERVICE_LIBRARIES)) == {}


def test_a_forbidden_import_is_seen(tmp_path: Path) -> None:
    # The probe has teeth: a store module that imported aiohttp would be named, with what it loaded.
    (tmp_path / "stray_store_module.py").write_text("import ringtrace.collector.store.ring\nimport aiohttp\n")
    found = forbidden_loads(["ringtrace.collector.store.ring", "stray_store_module"], SERVICE, str(tmp_path))
    assert list(found) == ["stray_store_module"]
    assert "aiohttp" in found["stray_store_module"]


#: Starts recording as the fleet switch does (connect, the integrations, the sampler), records, and prints, as JSON,
#: which of the given modules are loaded. Nothing answers at the address: connecting is tried in the background, and
#: the process leaves by ``os._exit`` (no exit delivery to wait for).
START_PROBE = """
import json, os, sys
import ringtrace.client
from ringtrace.client.launch import settings_from, start_recording

settings = settings_from({}, {"RINGTRACE_COLLECTOR": sys.argv[1], "RINGTRACE_SAMPLE_HZ": "50"})
timeline = start_recording(settings, "probe")
with timeline.scope("work"):
    timeline.instant("inside")
timeline.flush(timeout_s=2)  # the flusher drains what was recorded (nothing answers: False, after at most 2 s)
print(json.dumps([name for name in sys.argv[2].split(",") if name in sys.modules]), flush=True)
os._exit(0)
"""


@pytest.mark.parametrize("pure_python", [False, True], ids=["c", "pure-python"])
def test_starting_recording_loads_neither_asyncio_nor_ssl(pure_python: bool) -> None:
    # With RINGTRACE_AUTO=1 every Python process starts recording: one that never runs an event loop, nor talks TLS,
    # must not pay for loading asyncio or ssl (nor uuid, which loads platform).
    env = {name: value for name, value in os.environ.items() if not name.startswith("RINGTRACE_")}
    env["RINGTRACE_PURE_PYTHON"] = "1" if pure_python else "0"
    unwanted = ("asyncio", "ssl", "_ssl", "uuid", "importlib.abc", "ringtrace.client")
    result = subprocess.run(
        [sys.executable, "-c", START_PROBE, "127.0.0.1:9", ",".join(unwanted)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    )
    assert json.loads(result.stdout) == ["ringtrace.client"]  # (the probe sees what it looks for)


#: Starts recording before the program imports asyncio, then runs tasks that record: each records on its own lane
#: of the thread, as where asyncio was imported first. Prints, as JSON, each event's name and its track's kind.
LATE_ASYNCIO_PROBE = """
import json, sys
from ringtrace.client import MemoryListener, Timeline

listener = MemoryListener()
timeline = Timeline("late", [listener])
timeline.instant("before asyncio")
assert "asyncio" not in sys.modules
import asyncio

async def work(i):
    with timeline.scope("task", i=i):
        await asyncio.sleep(0)

async def main():
    await asyncio.gather(*(work(i) for i in range(3)))

asyncio.run(main())
assert timeline.flush(timeout_s=60)
print(json.dumps([[event.name, event.track.kind, event.track.track_id] for event in listener.events]))
"""


@pytest.mark.parametrize("pure_python", [False, True], ids=["c", "pure-python"])
def test_a_program_that_imports_asyncio_after_recording_started_records_on_task_lanes(pure_python: bool) -> None:
    from ringtrace.wire.model import ASYNC_TRACK, THREAD_TRACK

    env = dict(os.environ, RINGTRACE_PURE_PYTHON="1" if pure_python else "0")
    result = subprocess.run(
        [sys.executable, "-c", LATE_ASYNCIO_PROBE], capture_output=True, text=True, env=env, timeout=120, check=True
    )
    events = json.loads(result.stdout)
    assert [(name, kind) for name, kind, _ in events if name == "before asyncio"] == [("before asyncio", THREAD_TRACK)]
    tasks = [(kind, track) for name, kind, track in events if name == "task"]
    assert len(tasks) == 3
    assert {kind for kind, _ in tasks} == {ASYNC_TRACK}
    assert len({track for _, track in tasks}) == 3  # concurrent tasks: a lane each


def test_the_instance_id_made_without_uuid_is_a_random_uuid_s_hex() -> None:
    # ``uuid`` is left out of a start (it loads ``platform``): the id made in its place is what ``uuid4().hex`` was.
    import uuid

    from ringtrace.client.delivery.process_identity import _uuid4_hex

    made = [_uuid4_hex() for _ in range(200)]
    assert len(set(made)) == len(made)
    for text in made:
        parsed = uuid.UUID(hex=text)
        assert (parsed.hex, parsed.version, parsed.variant) == (text, 4, uuid.RFC_4122)
