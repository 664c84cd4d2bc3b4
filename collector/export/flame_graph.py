"""The ``GET /flamegraph`` document: the samples a filter selects, their stacks merged into one tree, for the web
view's flame graph (``http/static/flamegraph.js``).

The walk is a snapshot's (``read/event_walk.py``): the filter selects processes, threads (``track``) and the time
window as it does for ``/snapshot``; every sample selected adds one to its stack's leaf node (``sample_stacks.py``).
Memory holds the distinct stack nodes, never the samples; of a stored frame, only its samples are decoded, and a frame
without one is not (``sample_flags``). The document, written once the walk is done::

    {"samples": 1234,                       samples counted
     "cut_sample_stacks": 0,                stacks named by a prefix (the node table full)
     "nodes": {"function": [...], "file": [...], "line": [...],
               "parent": [...],              node id of the caller, 0 for a stack's root (ids count from 1)
               "self": [...],                samples whose stack ends at the node
               "total": [...]},              samples whose stack goes through it
     "capture": {...}}                      the window read and the query, as snapshots say it

Nodes come in the order they were first seen: a node's caller comes before it.

A ``limit`` counts samples alone: the newest N samples the other parameters select, not the newest N events of every
kind (a window of many spans would hold few samples). The capture says the query as it was given.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Final

import orjson
from ringtrace.collector.export.sample_stacks import SAMPLE, StackNodes, sample_flags, sample_stack
from ringtrace.collector.read.event_walk import EventWalk
from ringtrace.collector.read.frame_walk import SnapshotView
from ringtrace.collector.read.selection import EVERYTHING, EventFilter, Pattern

__all__ = ["flame_graph_chunks"]

#: Samples' category (``selection.category_of``).
_SAMPLES: Final = "sample"


def flame_graph_chunks(view: SnapshotView, selected: EventFilter = EVERYTHING) -> Iterator[bytes]:
    """Yield the pieces of one ``/flamegraph`` document of the samples ``selected`` (b"" while the walk goes on:
    the reader may hand over its step)."""
    walk = EventWalk(view, _samples_counted(selected))
    stacks = StackNodes()
    self_counts: dict[int, int] = {}
    samples = 0
    for (process, track, tables, frame), _ in walk.walked():
        only = sample_flags(tables, frame)
        for event in (walk.shown(process, track, tables, frame, only) or ()) if only is not None else ():
            if event[0] == SAMPLE:
                samples += 1
                leaf = stacks.leaf(sample_stack(event[4]))
                self_counts[leaf] = self_counts.get(leaf, 0) + 1
        yield b""
    nodes = stacks.nodes
    totals = [0] * (len(nodes) + 1)
    for node_id, count in self_counts.items():
        totals[node_id] = count
    for node_id in range(len(nodes), 0, -1):  # a caller's id is below its callees': one pass up adds them
        totals[nodes[node_id - 1][0]] += totals[node_id]
    document = {
        "samples": samples,
        "cut_sample_stacks": stacks.cut_stacks,
        "nodes": {
            "function": [frame[0] for _, frame in nodes],
            "file": [frame[1] for _, frame in nodes],
            "line": [frame[2] for _, frame in nodes],
            "parent": [parent for parent, _ in nodes],
            "self": [self_counts.get(node_id, 0) for node_id in range(1, len(nodes) + 1)],
            "total": totals[1:],
        },
        "capture": {**walk.capture(), "query": selected.describe()},
    }
    yield orjson.dumps(document)


def _samples_counted(selected: EventFilter) -> EventFilter:
    """``selected`` with its ``limit`` counting samples alone (their category; one that takes no sample keeps
    its own: the graph is empty either way). Without a limit, as it is: the walk decodes the samples alone anyway."""
    if selected.limit is None or (selected.category is not None and not selected.category(_SAMPLES)):
        return selected
    return dataclasses.replace(selected, category=Pattern(_SAMPLES))
