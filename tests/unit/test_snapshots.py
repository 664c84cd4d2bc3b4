"""Snapshots (the service's pinned views of the store): the flush round trip with the connected clients, what a
snapshot freezes, and what a pop left open of a forgotten process."""

from __future__ import annotations

import asyncio

from ringtrace.collector.read.inventory import RateSampler
from ringtrace.collector.service.snapshots import Snapshots
from ringtrace.collector.store.processes import Registry
from ringtrace.collector.store.ring import MIN_SEGMENT_BYTES, Store
from ringtrace.wire.decoder import Limits
from store_client import Client


class FlushingPeer:
    """A connected client as a flush round trip sees it: it answers ``answer`` (True: all of it stored, False: it
    could not flush), or never (None)."""

    def __init__(self, answer: bool | None) -> None:
        self.answer = answer
        self.requests: list[asyncio.Future[bool]] = []

    def request_flush(self) -> asyncio.Future[bool]:
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        if self.answer is not None:
            asyncio.get_running_loop().call_soon(future.set_result, self.answer)
        self.requests.append(future)
        return future


def snapshots_of(store: Store, *peers: FlushingPeer) -> Snapshots:
    return Snapshots(store, Registry(), set(peers), RateSampler(), Limits(), origin_ns=123, max_snapshots=2)


def small_store() -> Store:
    return Store(8 * MIN_SEGMENT_BYTES, MIN_SEGMENT_BYTES)


def test_a_flush_round_trip_counts_the_clients_that_stored_everything_and_gives_up_on_the_silent() -> None:
    peers = [FlushingPeer(True), FlushingPeer(False), FlushingPeer(None)]

    async def scenario() -> tuple[tuple[int, int], list[bool]]:
        answered = await snapshots_of(small_store(), *peers).flush_clients(flush_timeout_s=0.05)
        return answered, [request.cancelled() for peer in peers for request in peer.requests]

    assert asyncio.run(scenario()) == ((1, 3), [False, False, True])


def test_a_flush_timeout_of_zero_asks_no_client() -> None:
    peer = FlushingPeer(True)
    assert asyncio.run(snapshots_of(small_store(), peer).flush_clients(flush_timeout_s=0)) == (0, 0)
    assert peer.requests == []


def test_a_snapshot_reports_its_round_trip_and_holds_every_stored_segment() -> None:
    store = small_store()
    Client(store, 1).record(0, 40)

    async def scenario() -> tuple[dict[str, object], int, int]:
        view = await snapshots_of(store, FlushingPeer(True), FlushingPeer(None)).snapshot(flush_timeout_s=0.05)
        with view.frames:
            return view.other, len(view.frames.segments), view.origin_ns

    other, segments, origin_ns = asyncio.run(scenario())
    assert (other["clients_flushed"], other["clients_connected"]) == (1, 2)
    assert (other["capacity_bytes"], other["policy"]) == (store.capacity_bytes, store.policy)
    assert segments == store.segment_count > 0
    assert origin_ns == 123


def test_what_a_pop_left_open_of_a_forgotten_process_goes_unless_a_pop_is_running() -> None:
    async def scenario() -> tuple[int, int]:
        snapshots = snapshots_of(small_store())
        snapshots.pop_left_open.marker("marker_start", "m", 1, None, (7, 1), 7)
        async with snapshots.pop_lock:  # a pop's worker is copying it: kept, for the next sweep
            snapshots.forget_left_open({7})
            during_pop = len(snapshots.pop_left_open.still_open())
        snapshots.forget_left_open({7})
        return during_pop, len(snapshots.pop_left_open.still_open())

    assert asyncio.run(scenario()) == (1, 0)
