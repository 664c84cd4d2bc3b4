"""What the rules' watch's steps cost (``StepClock``): CPU time of the running thread, and of it the calls made
without the GIL; the engine paces the steps by both."""

from __future__ import annotations

from ringtrace.collector.incidents.step_clock import StepClock


def spin(n: int) -> int:
    return sum(i * i for i in range(n))


def test_a_step_counts_its_cpu_and_only_the_calls_said_to_run_without_the_gil_as_released() -> None:
    clock = StepClock()
    assert clock.run(lambda: spin(200_000)) == spin(200_000)
    assert clock.cpu_s > 0 and clock.released_s == 0
    with clock.running():
        with clock.released(False):  # (the Python twin: holds the GIL)
            spin(200_000)
        assert clock.released_s == 0
        with clock.released(True):
            spin(200_000)
    assert 0 < clock.released_s <= clock.cpu_s


def test_a_call_that_raises_is_counted_too() -> None:
    clock = StepClock()
    try:
        with clock.running(), clock.released(True):
            spin(100_000)
            raise ValueError("a bad step")
    except ValueError:
        pass
    assert 0 < clock.released_s <= clock.cpu_s
