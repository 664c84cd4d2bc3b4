"""The flame graph's document (``GET /flamegraph``) and the pprof profile of a store of spans with samples among them,
against the ``/timeline`` document and Chrome JSON of the same store, made in-process from one snapshot file (no
HTTP): what the web view asks for each second while following live, beside what it already asks for.

The store: ``--threads`` threads, each with ``--frames`` EVENTS frames of ``--spans`` spans and ``--samples`` samples
(stack ids of a table of 64 stacks ``--depth`` frames deep), as the client's encoder and sampler pack them. Variants,
interleaved round-robin, each timing one whole document per round (the median of ``--rounds``):

  timeline      timeline_chunks (spans read a column at a time; samples by the event walk)
  chrome        chrome_trace_chunks (the C writer's spans, the Python walk's samples)
  flame graph   flame_graph_chunks (only samples decoded; frames without one skipped on their kind column)
  pprof         pprof_chunks (the same walk, a profile written)

Ratios to ``timeline``: the flame graph should cost less than the timeline it is drawn under.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import msgpack
from _common import interleave, median, table
from ringtrace.collector.export.chrome import chrome_trace_chunks
from ringtrace.collector.export.flame_graph import flame_graph_chunks
from ringtrace.collector.export.pprof import pprof_chunks
from ringtrace.collector.export.timeline_columns import timeline_chunks
from ringtrace.collector.foreign.offline import load_file
from ringtrace.collector.read.frame_walk import SnapshotView
from ringtrace.wire.frames import Events, encode, preamble
from ringtrace.wire.handshake_frames import Hello
from ringtrace.wire.model import INSTANT, SAMPLE, SPAN, THREAD_TRACK, TrackInfo
from ringtrace.wire.stack_frames import Stacks
from ringtrace.wire.stream_encoder import StreamEncoder

_STACKS = 64


def stream(threads: int, frames: int, spans: int, samples: int, depth: int) -> Iterator[bytes]:
    """The store's one stream, frame by frame."""
    encoder = StreamEncoder()
    tracks = [TrackInfo(t + 1, THREAD_TRACK, f"worker-{t}", 1000 + t) for t in range(threads)]
    yield preamble() + encode(Hello(7, "host", "bench", "i7", "boot", 1, 2, "bench"))
    for track in tracks:  # the tracks and the names
        batch = encoder.encode(track, [INSTANT, "request", 0, 0, None, INSTANT, "", 0, 0, None])
        yield b"".join(batch.control)
    # 64 stacks, each a root-to-leaf path of its own code locations under a shared root.
    locations = [(f"function_{i}", f"/app/module_{i % 7}.py", 10 + i) for i in range(_STACKS * (depth - 1) + 1)]
    nodes: list[tuple[int | None, int]] = [(None, 0)]
    for s in range(_STACKS):
        parent = 0
        for d in range(depth - 1):
            nodes.append((parent, 1 + s * (depth - 1) + d))
            parent = len(nodes) - 1
    yield encode(Stacks(0, tuple(locations), 0, tuple(nodes)))
    leaves = [(s + 1) * (depth - 1) for s in range(_STACKS)]
    name_ids = encoder.strings
    step = 1000
    for f in range(frames):
        for t, track in enumerate(tracks):
            first_ns = 10**15 + f * (spans + samples) * step
            rows = []
            for i in range(spans + samples):
                if i % ((spans + samples) // samples) == 0 and sum(r[0] == SAMPLE for r in rows) < samples:
                    rows.append((SAMPLE, name_ids[""], i * step, 0, leaves[(f + t + i) % _STACKS]))
                else:
                    rows.append((SPAN, name_ids["request"], i * step, step // 2, {"i": i}))
            payload = msgpack.packb([list(column) for column in zip(*rows, strict=True)])
            last_ns = first_ns + (spans + samples) * step
            yield encode(Events(track.track_id, len(rows), first_ns, last_ns, payload))


def bench(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "sampled.rttrace"
        with path.open("wb") as out:
            for frame in stream(args.threads, args.frames, args.spans, args.samples, args.depth):
                out.write(frame)
        view = load_file(path).view
        flame = b"".join(flame_graph_chunks(view))
        assert b'"samples":%d' % (args.threads * args.frames * args.samples) in flame, flame[:80]

        def timed(make: Callable[[SnapshotView], Iterator[bytes]]) -> Callable[[], float]:
            def run() -> float:
                started = time.perf_counter()
                for _ in make(view):
                    pass
                return (time.perf_counter() - started) * 1000

            return run

        variants = {
            "timeline": timed(timeline_chunks),
            "chrome": timed(chrome_trace_chunks),
            "flame graph": timed(flame_graph_chunks),
            "pprof": timed(pprof_chunks),
        }
        results = interleave(variants, rounds=args.rounds, warmup=1)
    medians = {name: median(values) for name, values in results.items()}
    events = args.threads * args.frames * (args.spans + args.samples)
    rows = [[name, ms, ms / medians["timeline"]] for name, ms in medians.items()]
    title = (
        f"{events:,} events ({args.threads * args.frames * args.samples:,} samples, stacks {args.depth} deep), "
        f"median of {args.rounds} rounds"
    )
    print(table(["document", "ms", "x timeline"], rows, title=title))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--frames", type=int, default=200)
    parser.add_argument("--spans", type=int, default=120)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--depth", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=5)
    return bench(parser.parse_args())


if __name__ == "__main__":
    sys.exit(main())
