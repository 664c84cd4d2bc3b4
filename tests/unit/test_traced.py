"""@traced: one span per call, for functions, coroutines, generators and async generators."""

from __future__ import annotations

import asyncio
import copy
import inspect
import pickle
from collections.abc import AsyncIterator, Iterator

import pytest
from ringtrace.client import MemoryListener, Timeline, traced


@pytest.fixture
def setup() -> Iterator[tuple[Timeline, MemoryListener]]:
    listener = MemoryListener()
    tl = Timeline("traced", [listener])
    yield tl, listener
    tl.close()


def spans(tl: Timeline, listener: MemoryListener) -> list[tuple[str, object]]:
    assert tl.flush(timeout_s=30)
    return [(event.name, event.args) for event in listener.events]


def test_a_function_is_one_span_named_after_its_qualified_name(setup: tuple[Timeline, MemoryListener]) -> None:
    tl, listener = setup

    @traced(timeline=tl)
    def inner(x: int) -> int:
        return x + 1

    @traced("outer call", timeline=tl)
    def outer() -> int:
        return inner(1) + inner(2)

    assert outer() == 5
    assert outer.__name__ == "outer"
    qualname = "test_a_function_is_one_span_named_after_its_qualified_name.<locals>.inner"
    assert spans(tl, listener) == [(qualname, None), (qualname, None), ("outer call", None)]
    inner_event, _, outer_event = listener.events
    assert outer_event.ts_ns <= inner_event.ts_ns and outer_event.dur_ns >= inner_event.dur_ns


def test_an_exception_ends_the_span_records_its_type_and_propagates(setup: tuple[Timeline, MemoryListener]) -> None:
    tl, listener = setup

    @traced("fails", timeline=tl)
    def fails() -> None:
        raise ValueError("no")

    with pytest.raises(ValueError, match="no"):
        fails()
    assert spans(tl, listener) == [("fails", {"exception": "ValueError"})]


def test_a_generator_is_one_span_from_first_next_to_exhaustion(setup: tuple[Timeline, MemoryListener]) -> None:
    tl, listener = setup

    @traced("gen", timeline=tl)
    def gen(n: int) -> Iterator[int]:
        yield from range(n)
        return None

    assert list(gen(3)) == [0, 1, 2]
    closed = gen(3)
    next(closed)
    closed.close()
    assert spans(tl, listener) == [("gen", None), ("gen", {"exception": "GeneratorExit"})]


def test_coroutines_and_async_generators_are_one_span_each(setup: tuple[Timeline, MemoryListener]) -> None:
    tl, listener = setup

    @traced("work", timeline=tl)
    async def work(x: int) -> int:
        await asyncio.sleep(0)
        return x

    @traced("stream", timeline=tl)
    async def stream() -> AsyncIterator[int]:
        for i in range(2):
            await asyncio.sleep(0)
            yield i

    async def main() -> list[int]:
        results = await asyncio.gather(work(1), work(2))
        return [*results, *[i async for i in stream()]]

    assert asyncio.run(main()) == [1, 2, 0, 1]
    assert sorted(name for name, _ in spans(tl, listener)) == ["stream", "work", "work"]
    assert len({event.track for event in listener.events if event.name == "work"}) == 2  # a lane per task


def test_a_label_that_is_not_text_is_refused() -> None:
    with pytest.raises(TypeError, match="a function or a label"):
        traced(42)  # type: ignore[call-overload]


def test_a_traced_method_binds_as_a_function_does_and_keeps_its_signature(
    setup: tuple[Timeline, MemoryListener],
) -> None:
    tl, listener = setup

    class Loader:
        @traced(timeline=tl)
        def load(self, path: str, *, retries: int = 0) -> str:
            """Loads."""
            return f"{path}:{retries}"

        @staticmethod
        @traced("static", timeline=tl)
        def plain(x: int) -> int:
            return x

    loader = Loader()
    assert loader.load("a", retries=2) == "a:2"
    assert Loader.load(loader, "b") == "b:0"
    assert Loader.plain(3) == 3
    assert (Loader.load.__name__, Loader.load.__doc__) == ("load", "Loads.")
    assert str(inspect.signature(Loader.load)) == "(self, path: 'str', *, retries: 'int' = 0) -> 'str'"
    load = "test_a_traced_method_binds_as_a_function_does_and_keeps_its_signature.<locals>.Loader.load"
    assert spans(tl, listener) == [(load, None), (load, None), ("static", None)]


def test_a_traced_function_records_nothing_while_nothing_listens() -> None:
    tl = Timeline("idle")

    @traced(timeline=tl)
    def work(x: int) -> int:
        return x * 2

    assert [work(i) for i in range(3)] == [0, 2, 4]
    listener = MemoryListener()
    tl.add_listener(listener)
    assert work(5) == 10
    assert spans(tl, listener) == [(work.__qualname__, None)]
    tl.close()


@traced
def double(x: int) -> int:
    return 2 * x


class Jobs:
    @traced
    def run(self) -> str:
        return "ran"


def test_a_traced_function_pickles_and_copies_as_a_function_does() -> None:
    # By reference to its module and qualified name, as multiprocessing hands a function to its children; a copy is
    # the function itself. With the C recorder as with the pure-Python one.
    assert pickle.loads(pickle.dumps(double)) is double
    assert pickle.loads(pickle.dumps(Jobs.run)) is Jobs.run
    assert pickle.loads(pickle.dumps(Jobs().run))() == "ran"
    assert copy.copy(double) is double and copy.deepcopy(double) is double
    assert copy.deepcopy({"f": [double]})["f"][0] is double

    def local() -> None:
        pass

    for function in (local, traced(local)):  # what cannot be found by its name fails alike
        with pytest.raises((pickle.PicklingError, AttributeError), match="local"):
            pickle.dumps(function)
