"""STACKS, sans-I/O: the frame's round trip, the rules a stream's stack table keeps (growth, limits, reset), a
malformed frame named by its field, a stack id resolved to its frames, root first, and what the store's segments
replay of them."""

from __future__ import annotations

import tracemalloc

import msgpack
import pytest
from ringtrace.collector.store.budget import table_charge_bound
from ringtrace.collector.store.streams import Stream
from ringtrace.wire.decoder import SessionDecoder
from ringtrace.wire.errors import LimitExceeded, MalformedFrame
from ringtrace.wire.frame_types import FRAME_HEADER, FrameType
from ringtrace.wire.frames import encode, preamble
from ringtrace.wire.handshake_frames import Hello, Welcome
from ringtrace.wire.model import BUILTIN_KINDS, SAMPLE
from ringtrace.wire.stack_frames import Stacks
from ringtrace.wire.stack_tree import MAX_RESOLVED_DEPTH
from ringtrace.wire.stream_limits import Limits

HELLO = Hello(1, "host", "proc", "instance", "boot", 0, 0, "0.0")
MAIN = ("main", "app.py", 10)
WORK = ("work", "app.py", 20)
LEAF = ("leaf", "lib.py", 3)
NO_LIMITS = Limits()


def _decoder(limits: Limits = NO_LIMITS, keep_strings: bool = True) -> SessionDecoder:
    decoder = SessionDecoder(limits, live=False, keep_strings=keep_strings)
    decoder.receive_data(preamble() + encode(HELLO))
    assert list(decoder) == [HELLO]
    return decoder


def _feed(decoder: SessionDecoder, *frames: Stacks | bytes) -> None:
    decoder.receive_data(b"".join(f if isinstance(f, bytes) else encode(f) for f in frames))
    list(decoder)


def _raw(body: dict[str, object]) -> bytes:
    packed: bytes = msgpack.packb(body)
    return FRAME_HEADER.pack(len(packed), FrameType.STACKS) + packed


def test_sample_is_a_built_in_kind_of_its_own_shape() -> None:
    assert FrameType.STACKS == 0x84
    assert [(k.id, k.name, k.shape) for k in BUILTIN_KINDS if k.id == SAMPLE] == [(10, "sample", "sample")]


def test_a_stacks_frame_round_trips_and_a_reset_is_said_only_when_set() -> None:
    frame = Stacks(0, (MAIN, WORK), 0, ((None, 0), (0, 1)))
    assert Stacks.decode_body(frame.encode_body()) == frame
    assert "reset" not in msgpack.unpackb(frame.encode_body())
    reset = Stacks(0, (), 0, (), reset=True)
    assert Stacks.decode_body(reset.encode_body()) == reset


def test_welcome_states_the_stack_limits_and_an_older_one_means_the_defaults() -> None:
    welcome = Welcome(2, 1 << 20, 10, 10, 10, "x", max_stacks=7, max_stack_frames=5)
    assert Welcome.decode_body(welcome.encode_body()) == welcome
    body = msgpack.unpackb(welcome.encode_body())
    del body["max_stacks"], body["max_stack_frames"]
    older = Welcome.decode_body(msgpack.packb(body))
    assert (older.max_stacks, older.max_stack_frames) == (Limits().max_stacks, Limits().max_stack_frames)


def test_a_stack_id_resolves_to_its_frames_root_first_across_frames() -> None:
    decoder = _decoder()
    _feed(decoder, Stacks(0, (MAIN, WORK), 0, ((None, 0), (0, 1))), Stacks(2, (LEAF,), 2, ((1, 2), (0, 2))))
    stacks = decoder.tables.stacks
    assert stacks.resolve(0) == (MAIN,)
    assert stacks.resolve(2) == (MAIN, WORK, LEAF)
    assert stacks.resolve(3) == (MAIN, LEAF)
    assert stacks.resolve(4) is None and stacks.resolve(-1) is None and stacks.resolve("2") is None
    assert (decoder.stack_count, decoder.stack_frame_count) == (4, 3)


def test_a_hostile_chain_of_nodes_resolves_to_its_innermost_frames_in_bounded_memory() -> None:
    # A peer may declare max_stacks nodes in one chain for a few hundred KiB; a reader resolving its deepest stacks
    # must not walk, nor keep, each whole chain.
    depth = 4 * MAX_RESOLVED_DEPTH
    decoder = _decoder()
    locations = tuple((f"f{i}", "deep.py", i + 1) for i in range(depth))
    nodes = tuple((i - 1 if i else None, i) for i in range(depth))
    for first in range(0, depth, 1000):
        _feed(decoder, Stacks(first, locations[first : first + 1000], first, nodes[first : first + 1000]))
    stacks = decoder.tables.stacks
    deepest = stacks.resolve(depth - 1)
    assert deepest is not None and len(deepest) == MAX_RESOLVED_DEPTH
    assert deepest[-1] == locations[-1] and deepest[0] == locations[depth - MAX_RESOLVED_DEPTH]  # the innermost
    assert stacks.resolve(9) == locations[:10]
    tracemalloc.start()
    try:
        for stack_id in range(depth - 1, depth - 1 - 1500, -1):
            stacks.resolve(stack_id)
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert held < 16 * 1024 * 1024  # (every stack kept whole: over 40 MiB)


def test_a_reset_starts_the_table_again_and_tables_read_before_keep_their_stacks() -> None:
    decoder = _decoder()
    _feed(decoder, Stacks(0, (MAIN, WORK), 0, ((None, 0), (0, 1))))
    before = decoder.tables
    _feed(decoder, Stacks(0, (LEAF,), 0, ((None, 0),), reset=True))
    assert decoder.tables.stacks.resolve(0) == (LEAF,) and decoder.tables.stacks.resolve(1) is None
    assert before.stacks.resolve(1) == (MAIN, WORK)
    assert decoder.tables.strings is before.strings  # only the stacks start again
    assert (decoder.stack_count, decoder.stack_frame_count) == (1, 1)


@pytest.mark.parametrize("keep_strings", [True, False])
def test_stack_limits_take_the_limit_and_refuse_one_more(keep_strings: bool) -> None:
    limits = Limits(max_stacks=2, max_stack_frames=2)
    decoder = _decoder(limits, keep_strings)
    _feed(decoder, Stacks(0, (MAIN, WORK), 0, ((None, 0), (0, 1))))
    with pytest.raises(LimitExceeded, match="max_stacks"):
        _feed(decoder, Stacks(2, (), 2, ((1, 1),)))
    decoder = _decoder(limits, keep_strings)
    with pytest.raises(LimitExceeded, match="max_stack_frames"):
        _feed(decoder, Stacks(0, (MAIN, WORK, LEAF), 0, ()))


def test_texts_past_max_string_chars_or_bytes_are_refused() -> None:
    with pytest.raises(LimitExceeded, match="max_string_chars"):
        _feed(_decoder(), Stacks(0, (("f" * 257, "a.py", 1),), 0, ()))
    with pytest.raises(LimitExceeded, match="max_string_bytes"):
        _feed(_decoder(Limits(max_string_bytes=10)), Stacks(0, (("fn", "file.py", 1), ("g", "h.py", 2)), 0, ()))


def test_stacks_count_in_the_tables_bytes() -> None:
    decoder = _decoder(keep_strings=False)
    empty = decoder.table_bytes
    _feed(decoder, Stacks(0, (MAIN, WORK), 0, ((None, 0), (0, 1))))
    assert decoder.table_bytes > empty


@pytest.mark.parametrize(
    ("frame", "field"),
    [
        (Stacks(1, (MAIN,), 0, ()), "'first_frame'"),
        (Stacks(0, (MAIN,), 1, ((None, 0),)), "'first_stack'"),
        (Stacks(0, (MAIN,), 0, ((0, 0),)), "'stacks'"),  # its own parent
        (Stacks(0, (MAIN,), 0, ((None, 1),)), "'stacks'"),  # a code location never declared
        (Stacks(0, (("f", "a.py", -1),), 0, ()), "'frames'"),
    ],
)
def test_a_stacks_frame_against_the_rules_names_its_field(frame: Stacks, field: str) -> None:
    with pytest.raises(MalformedFrame, match=f"STACKS frame: field {field}"):
        _feed(_decoder(), frame)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"first_frame": 0, "frames": [["f", "a.py"]], "first_stack": 0, "stacks": []}, "'frames'"),
        ({"first_frame": 0, "frames": [], "first_stack": 0, "stacks": [[None]]}, "'stacks'"),
        ({"first_frame": 0, "frames": [], "stacks": []}, "'first_stack'"),
        ({"first_frame": 0, "frames": [], "first_stack": 0, "stacks": [], "reset": 1}, "'reset'"),
        ({"first_frame": 1, "frames": [], "first_stack": 0, "stacks": [], "reset": True}, "'first_frame'"),
    ],
)
def test_a_malformed_stacks_body_names_its_field(body: dict[str, object], field: str) -> None:
    with pytest.raises(MalformedFrame, match=f"STACKS frame: .*{field}"):
        _feed(_decoder(), _raw(body))


def test_a_live_decoder_states_its_stack_limits_in_welcome() -> None:
    decoder = SessionDecoder(Limits(max_stacks=9, max_stack_frames=8))
    decoder.receive_data(preamble() + encode(HELLO))
    list(decoder)
    welcome = decoder.welcome()
    assert (welcome.max_stacks, welcome.max_stack_frames) == (9, 8)


def test_a_stream_in_the_store_replays_its_stacks_since_the_last_reset() -> None:
    hello = encode(HELLO)
    stream = Stream(1, {}, hello, 64 * 1024)
    first, second = encode(Stacks(0, (MAIN,), 0, ((None, 0),))), encode(Stacks(1, (WORK,), 1, ((0, 1),)))
    reset = encode(Stacks(0, (LEAF,), 0, ((None, 0),), reset=True))
    stream.keep(first, "stacks", -1, False)
    stream.keep(second, "stacks", -1, False)
    assert b"".join(stream.session_frames()) == preamble() + hello + first + second
    stream.keep(reset, "stacks_reset", -1, False)
    replayed = b"".join(stream.session_frames())
    assert replayed == preamble() + hello + reset and stream.session_bytes == len(replayed)
    decoder = SessionDecoder(live=False)
    decoder.receive_data(replayed)
    list(decoder)
    assert decoder.tables.stacks.resolve(0) == (LEAF,)


def test_a_stream_at_the_stack_limits_is_charged_within_the_bound_the_collector_warns_by() -> None:
    frames, nodes, text = 2000, 4000, 256
    limits = Limits(max_stacks=nodes, max_stack_frames=frames, max_string_bytes=frames * 2 * text)
    decoder, stream = _decoder(limits, keep_strings=False), Stream(1, {}, encode(HELLO), 64 * 1024)
    before = decoder.table_bytes + stream.memory_bytes
    locations = tuple((f"{i:0{text}}", f"{i:0{text}}", 2**32 - 1) for i in range(frames))
    chain = tuple((i - 1 if i else None, i // 2) for i in range(nodes))
    for first in range(0, frames, 500):
        run = encode(Stacks(first, locations[first : first + 500], 2 * first, chain[2 * first : 2 * first + 1000]))
        _feed(decoder, run)
        stream.keep(run, "stacks", -1, False)
    assert (decoder.stack_count, decoder.stack_frame_count) == (nodes, frames)
    charged = decoder.table_bytes + stream.memory_bytes - before
    without_stacks = Limits(max_stacks=0, max_stack_frames=0, max_string_bytes=limits.max_string_bytes)
    assert charged <= table_charge_bound(limits) - table_charge_bound(without_stacks)
