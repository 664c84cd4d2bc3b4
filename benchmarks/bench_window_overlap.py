"""A window query (``?since=``) on a store of ``--n`` short spans with one 10-minute span, against the same query on
the same store without the long span, in one run.

Each store is fed as ingest feeds one (the client's stream encoder's EVENTS frames, stored by their headers alone) in
segments of 4 MiB, the collector's largest default: ``--n`` spans of 500 ns, one every microsecond, in frames of 1,000;
the long span starts with the first of them and lasts ten minutes, past the end of the store. The window is the last
1% of the store's time. Three stores:

- ``short only``: no long span;
- ``long span``: the long span in the first frame (this client's encoder writes a frame's last end as its header's
  ``last_ts``: the index alone finds it);
- ``long span, starts-only headers``: the same frames with each header's ``last_ts`` its last start, as a writer may
  state it (the protocol does not say): only the segment's measured reach (``read/reach.py``) finds it.

Chrome JSON snapshots (the C writer where built) of the window, in interleaved rounds, warm (each segment's reach
measured by an earlier round and kept); and once each, cold (every reach forgotten first: the first window query after
the segments were sealed measures them). Target: a store with the long span <= 1.2x the time of the store without.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable

from _common import bench_main, interleave, median, table, verdict
from ringtrace.collector.export.chrome import chrome_trace_chunks
from ringtrace.collector.read.frame_walk import ProcessView, SnapshotView
from ringtrace.collector.read.selection import EventFilter
from ringtrace.collector.store.ring import Store
from ringtrace.wire.frame_types import EVENTS_HEADER, FRAME_HEADER, FrameType
from ringtrace.wire.frames import Stats, encode
from ringtrace.wire.handshake_frames import Hello
from ringtrace.wire.model import SPAN, THREAD_TRACK, KindRegistry, TrackInfo
from ringtrace.wire.stream_encoder import StreamEncoder
from ringtrace.wire.stream_limits import Limits

TARGET = 1.2
SEGMENT_BYTES = 4 * 1024 * 1024
PER_FRAME = 1000
START_NS = 1_700_000_000 * 10**9
TEN_MINUTES_NS = 600 * 10**9
TRACK = TrackInfo(1, THREAD_TRACK, "main", 1)


def store_of(n: int, long_span: bool, starts_only: bool) -> SnapshotView:
    """A store of ``n`` short spans (and the long one), fed frame by frame as ingest stores them."""
    store = Store(64 * n + 2**28, SEGMENT_BYTES)
    hello = encode(Hello(1, "host", "window-bench", "i1", "boot", 0, 0, "bench"))
    stream = store.open_stream(1, hello)
    encoder = StreamEncoder(max_events_per_frame=PER_FRAME, registry=KindRegistry())
    frames = list(encoder.prefix())
    for first in range(0, n, PER_FRAME):
        records: list[object] = []
        if long_span and first == 0:
            records += [SPAN, "long", START_NS, START_NS + TEN_MINUTES_NS, None]
        for i in range(first, min(first + PER_FRAME, n)):
            start = START_NS + i * 1000
            records += [SPAN, "short", start, start + 500, None]
        batch = encoder.encode(TRACK, records)
        frames += batch.control
        last_start = START_NS + (min(first + PER_FRAME, n) - 1) * 1000
        frames += [_starts_only(frame, last_start) if starts_only else frame for frame, _ in batch.events]
        for frame in frames:
            _feed(store, stream, frame)
        frames = []
        store.commit(stream)
    processes = {1: ProcessView(1, 1, 1, "host", "window-bench", 0, Stats(0, 0), {})}
    return SnapshotView(store.snapshot(), processes, store.track_counts(), limits=Limits(), origin_ns=START_NS)


def _starts_only(frame: bytes, last_start: int) -> bytes:
    """The EVENTS frame with ``last_ts`` its last start (the header rewritten; the payload as it was)."""
    size, flags, track_id, count, first, _ = EVENTS_HEADER.unpack_from(frame, FRAME_HEADER.size)
    header = EVENTS_HEADER.pack(size, flags, track_id, count, first, last_start)
    return frame[: FRAME_HEADER.size] + header + frame[FRAME_HEADER.size + EVENTS_HEADER.size :]


def _feed(store: Store, stream: object, frame: bytes) -> None:
    """One frame stored as ingest stores it (``tests/store_client.py`` does the same)."""
    _, frame_type = FRAME_HEADER.unpack_from(frame)
    body = frame[FRAME_HEADER.size :]
    if frame_type == FrameType.EVENTS:
        _, _, track_id, count, first, last = EVENTS_HEADER.unpack_from(body)
        store.events(stream, track_id, count, first, last, frame)  # type: ignore[arg-type]
    elif frame_type == FrameType.TRACK:
        store.session_frame(stream, frame, kind="track", track_id=TRACK.track_id)  # type: ignore[arg-type]
    elif frame_type == FrameType.STRINGS:
        store.session_frame(stream, frame, kind="strings")  # type: ignore[arg-type]
    else:
        kind = {FrameType.SCHEMA: "schema", FrameType.STATS: "stats"}[frame_type]
        store.session_frame(stream, frame, kind=kind)  # type: ignore[arg-type]


def window_query(view: SnapshotView, selected: EventFilter, cold: bool) -> Callable[[], tuple[float, int]]:
    def run() -> tuple[float, int]:
        if cold:
            for segment in view.frames.segments:
                segment.reach.value = None
        started = time.perf_counter()
        document = b"".join(chrome_trace_chunks(view, selected))
        seconds = time.perf_counter() - started
        shown = sum(1 for event in json.loads(document)["traceEvents"] if event["ph"] == "X")
        return seconds, shown

    return run


def bench(n: int, rounds: int) -> int:
    built = time.perf_counter()
    stores = {
        "short only": store_of(n, long_span=False, starts_only=False),
        "long span": store_of(n, long_span=True, starts_only=False),
        "long span, starts-only headers": store_of(n, long_span=True, starts_only=True),
    }
    segments = len(stores["short only"].frames.segments)
    print(f"{n:,} spans a store in {segments} segments of {SEGMENT_BYTES >> 20} MiB, built in "
          f"{time.perf_counter() - built:.1f} s")  # fmt: skip
    since = START_NS + n * 1000 * 99 // 100
    selected = EventFilter(since_ns=since)
    cold = {f"{name}, cold": window_query(view, selected, True)() for name, view in stores.items()}
    warm = interleave({f"{name}, warm": window_query(view, selected, False) for name, view in stores.items()}, rounds)
    results = {**{name: [value] for name, value in cold.items()}, **warm}
    rows = []
    for name, values in results.items():
        baseline = results["short only, " + name.rsplit(", ", 1)[1]]
        seconds = median([s for s, _ in values])
        rows.append([name, seconds, values[0][1], seconds / median([s for s, _ in baseline])])
    print(table(["window query", "s", "spans shown", "x short only"], rows, title=f"medians of {rounds} warm rounds"))
    ok = True
    for name in ("long span", "long span, starts-only headers"):
        for state in ("warm", "cold"):
            ratio = median([s for s, _ in results[f"{name}, {state}"]]) / median(
                [s for s, _ in results[f"short only, {state}"]]
            )
            ok = ok and (state == "cold" or ratio <= TARGET)
            print(f"{name}, {state}: {ratio:.2f}x short only  target <= {TARGET}x: {verdict(ratio <= TARGET)}")
    assert all(values[0][1] == results["short only, warm"][0][1] + ("long" in name) for name, values in results.items())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(bench_main(bench, __doc__, 10_000_000, 5, (200_000, 2)))
