"""A live tail of the stream (``GET /stream`` with ``--jetstream``): the events of every message stored after it began,
whichever collector published it.

Each tail is an ordered consumer of the stream from its newest message on (a subject filter when one pid is
selected). A step takes the messages that arrived since the last, up to ``MAX_STEP_BYTES``, and decodes each alone
(a message is a whole segment: its session frames, then its events) into the rows the filter selects, on a worker
thread. A message shows up once sealed: within about 0.4 s of its events' arrival at a collector (``SEAL_INTERVAL_S``
twice). A reader slower than the stream falls behind: once more than ``MAX_LAG_MESSAGES`` are waiting for it, the tail
ends with ``TailBehind`` saying so (never silently skipped ahead).
"""

from __future__ import annotations

import asyncio
from typing import Any, Final

from ringtrace.collector.read.frame_walk import ProcessView
from ringtrace.collector.read.rows import Row, frame_rows
from ringtrace.collector.read.selection import EventFilter, Selection
from ringtrace.collector.read.tail import TailBehind
from ringtrace.collector.store.processes import Registry
from ringtrace.wire.decoder import SessionDecoder
from ringtrace.wire.errors import ProtocolError
from ringtrace.wire.frames import Events
from ringtrace.wire.handshake_frames import Hello
from ringtrace.wire.stream_limits import Limits

__all__ = ["MAX_LAG_MESSAGES", "FleetTail"]

MAX_STEP_BYTES: Final = 8 * 1024 * 1024
#: Messages waiting for a tail past which it ends (``TailBehind``).
MAX_LAG_MESSAGES: Final = 4096


class FleetTail:
    """One live tail of the stream; see the module docstring. ``begin`` once, then ``step`` one at a time."""

    def __init__(self, selected: EventFilter, limits: Limits) -> None:
        self.selected = selected
        self._selection = Selection(selected) if selected.by_event else None
        self._limits = limits
        #: The processes its messages named (their trace pids stay as the first message gave them).
        self._registry = Registry()
        self._subscription: Any = None

    async def begin(self, js: Any, stream: str, subject_filter: str) -> None:
        """Subscribe from the stream's newest message on."""
        from nats.js.api import ConsumerConfig, DeliverPolicy

        config = ConsumerConfig(deliver_policy=DeliverPolicy.NEW)
        self._subscription = await js.subscribe(
            subject_filter, stream=stream, ordered_consumer=True, config=config,
            pending_bytes_limit=2 * MAX_STEP_BYTES + 64 * 1024 * 1024, pending_msgs_limit=-1,
        )  # fmt: skip

    async def step(self) -> list[Row]:
        """The rows of the messages stored since the last step.

        Raises:
            TailBehind: more than MAX_LAG_MESSAGES are waiting.
        """
        assert self._subscription is not None, "begin first"
        payloads: list[bytes] = []
        budget = MAX_STEP_BYTES
        while budget > 0:
            try:
                message = await self._subscription.next_msg(timeout=0.001)
            except TimeoutError:
                break
            pending = message.metadata.num_pending
            if pending > MAX_LAG_MESSAGES:
                raise TailBehind(f"fell behind: {pending} messages of the stream unread, more than {MAX_LAG_MESSAGES}")
            if message.data:  # (not a note of what was cleared)
                payloads.append(message.data)
            budget -= len(message.data)
        if not payloads:
            return []
        return await asyncio.get_running_loop().run_in_executor(None, self._rows, payloads)

    def _rows(self, payloads: list[bytes]) -> list[Row]:
        rows: list[Row] = []
        for payload in payloads:
            rows += self.message_rows(payload)
        return rows

    def message_rows(self, payload: bytes) -> list[Row]:
        """The rows of one message (a segment) that the filter selects; none of one that does not decode."""
        decoder = SessionDecoder(self._limits, live=False)
        decoder.receive_data(payload)
        rows: list[Row] = []
        process: ProcessView | None = None
        selected = self.selected
        try:
            for frame in decoder:
                if isinstance(frame, Hello):
                    process = ProcessView.of(self._registry.known(frame))
                    if not selected.selects_process(process):
                        return []
                elif isinstance(frame, Events) and process is not None:
                    track = decoder.tables.tracks[frame.track_id]
                    if selected.track is None or selected.track_matches(track.name, track.track_id):
                        rows += frame_rows(process, track, decoder.tables, frame, self._selection)
        except ProtocolError:  # what cannot be decoded is counted by snapshots; the tail skips the message
            return rows
        return rows

    async def close(self) -> None:
        if self._subscription is not None:
            subscription, self._subscription = self._subscription, None
            await subscription.unsubscribe()
