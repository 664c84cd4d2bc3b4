"""How a reader lets the event loop take the GIL (``read/pool.py``): it lets go after holding it ``YIELD_EVERY_S``,
counted from the last time it let go, whether by ``let_the_loop_in`` or in a C writer that ran without it
(``let_go``)."""

from __future__ import annotations

import pytest
from ringtrace.collector.read import pool


def test_a_reader_lets_go_once_it_has_held_the_gil_long_enough(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr(pool.time, "sleep", slept.append)
    monkeypatch.setattr(pool, "YIELD_EVERY_S", 0.0)
    pool.let_the_loop_in()
    pool.let_the_loop_in()
    assert slept == [0, 0]


def test_a_c_writer_that_let_go_counts_as_letting_the_loop_in(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr(pool.time, "sleep", slept.append)
    monkeypatch.setattr(pool, "YIELD_EVERY_S", 3600.0)  # (an hour: never reached in this test)
    pool.let_go()
    for _ in range(100):
        pool.let_the_loop_in()
    assert slept == []
