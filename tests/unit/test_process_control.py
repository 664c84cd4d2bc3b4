"""ProcessControl: which known processes are forgotten (idle, holding nothing), and what clearing removes."""

from __future__ import annotations

from ringtrace.collector.read.query import EventFilter
from ringtrace.collector.service.process_control import ProcessControl
from ringtrace.collector.store.heap import HeapTrimmer
from ringtrace.collector.store.processes import ProcessRecord, Registry
from ringtrace.collector.store.ring import MIN_SEGMENT_BYTES, Store
from ringtrace.wire.frames import Hello
from store_client import Client


def known(registry: Registry, pid: int) -> ProcessRecord:
    return registry.known(Hello(pid, "host", f"proc{pid}", f"instance{pid}", "", 1, 2, "test"))


def control(registry: Registry, store: Store, forgotten: list[set[int]]) -> ProcessControl:
    return ProcessControl(registry, store, set(), HeapTrimmer(), forget_after_s=0.0, forgotten=forgotten.append)


def test_an_idle_process_is_forgotten_only_once_it_holds_nothing() -> None:
    registry, store = Registry(), Store(8 * MIN_SEGMENT_BYTES, MIN_SEGMENT_BYTES)
    forgotten: list[set[int]] = []
    empty, holding = known(registry, 1), known(registry, 2)
    client = Client(store, holding.uid)
    client.record(0, 20)
    store.close_stream(client.stream)
    processes = control(registry, store, forgotten)
    assert processes.forget_idle() == 1
    assert forgotten == [{empty.uid}]
    assert list(registry.processes.values()) == [holding]
    assert registry.forgotten_processes == 1
    processes.clear(EventFilter(pids=frozenset({2})))
    assert processes.forget_idle() == 1
    assert forgotten == [{empty.uid}, {holding.uid}]
    assert registry.processes == {}


def test_clear_removes_what_the_processes_selected_hold_and_nothing_else() -> None:
    registry, store = Registry(), Store(8 * MIN_SEGMENT_BYTES, MIN_SEGMENT_BYTES)
    kept, cleared = known(registry, 1), known(registry, 2)
    clients = [Client(store, process.uid) for process in (kept, cleared)]
    for client in clients:
        client.record(0, 20)
    processes = control(registry, store, [])
    assert processes.matching(EventFilter(pids=frozenset({2}))) == [cleared]
    assert processes.clear(EventFilter(pids=frozenset({2}))) == ([cleared], 20)
    counts = store.process_counts()
    assert (counts[kept.uid].stored_events, counts[cleared.uid].stored_events) == (20, 0)
    assert counts[cleared.uid].cleared_events == 20
    assert processes.set_priority(EventFilter(), "debug") == []  # no connection to send it on
