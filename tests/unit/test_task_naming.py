"""A lane's run named by its tasks: the C recorder's ``name_tasks`` against its pure-Python twin,
``drain._name_tasks``. A lane serves many tasks in turn (a server's requests), each after the first marked by a
``TASK_SWITCH`` record; the drain takes the switches out and gives each span and instant a ``task`` argument, the
name of the task that recorded it. The twins must leave the same run, the same objects where an event keeps its
args, return the same task, never change a map they were given, and raise the same exceptions."""

from __future__ import annotations

import functools
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from ringtrace.client import MemoryListener, Timeline
from ringtrace.client.accelerator import speedups
from ringtrace.client.delivery.flusher import FLUSHER
from ringtrace.client.recording import drain
from ringtrace.client.recording.tracks import TASK_SWITCH
from ringtrace.wire.keyword_args import KEYWORDS
from ringtrace.wire.model import INSTANT, RECORD_FIELDS, SPAN

pytestmark = pytest.mark.skipif(speedups is None, reason="the C recorder is not built here (or RINGTRACE_PURE_PYTHON)")

Name = Callable[[list[Any], Any], Any]


def in_c(run: list[Any], task: Any) -> Any:
    assert speedups is not None
    return speedups.name_tasks(run, task, TASK_SWITCH, SPAN, INSTANT)


TWINS: list[Name] = [drain._name_tasks, in_c]


class Task:
    """What the drain asks of a task: its name."""

    def __init__(self, name: str) -> None:
        self.name = name

    def get_name(self) -> str:
        return self.name


@functools.cache
def keywords(*items: tuple[str, Any]) -> Any:
    """The args of an instant as the C recorder keeps them where they are not compact (a ``Keywords``)."""
    args = dict(items)
    tl = Timeline("keywords", [MemoryListener()])
    tl._max_buffered_record_bytes = 0  # (compact records hold flat args as bytes: a Keywords is wanted here)
    with FLUSHER.sweeping():  # the flusher thread takes nothing meanwhile
        tl.instant("k", **args)
        ((_, run),) = tl.drain().runs
    tl.close()
    assert type(run[4]) is KEYWORDS
    return run[4]


TASKS = [Task(f"request {i}") for i in range(4)]
_maps = st.dictionaries(st.sampled_from(["a", "b", "task", "route"]), st.integers(0, 9), max_size=3)
_args = st.one_of(
    st.none(),
    _maps,
    st.sampled_from([(("a", 1),), (("task", "t"), ("b", 2)), (("route", "/"),)]).map(lambda items: keywords(*items)),
    _maps.map(OrderedDict),  # a mapping of another type: left as it is
    st.just("not a map"),
)
_events = st.tuples(st.sampled_from([SPAN, INSTANT, 2, 7, 1.0]), st.text(max_size=3), _args).map(
    lambda e: [e[0], e[1], 10, 20, e[2]]
)
#: A lane's task as a switch record or the drain's start has it: its name (what the recorders keep), or a task.
_tasks = st.sampled_from([*TASKS, *(task.name for task in TASKS)])
_switches = _tasks.map(lambda task: [TASK_SWITCH, task, None, None, None])
_records = st.lists(st.one_of(_events, _switches), max_size=12)
_runs = _records.map(lambda records: [v for r in records for v in r])


def run_of(records: list[list[Any]]) -> list[Any]:
    """A run of ``records`` whose maps only it holds (each a new copy)."""
    return [dict(v) if type(v) is dict else v for r in records for v in r]


def named(name: Name, run: list[Any], task: Any) -> tuple[list[Any], Any, list[Any]]:
    """The run ``name`` leaves, the task it returns, and copies of the maps it was given as they are after it."""
    given_maps = [v for v in run if type(v) is dict]
    before = [dict(m) for m in given_maps]
    run = list(run)
    last = name(run, task)
    assert [dict(m) for m in given_maps] == before, "a map the run held was changed, not copied"
    return run, last, given_maps


@given(_runs, _tasks)
def test_the_twins_name_a_run_alike(run: list[Any], task: Task | str) -> None:
    (python_run, python_last, _), (c_run, c_last, _) = (named(twin, run, task) for twin in TWINS)
    assert c_last is python_last
    assert c_run == python_run
    assert TASK_SWITCH not in c_run
    for kept, made in zip(python_run, c_run, strict=True):  # an event that keeps its args keeps the same object
        assert (kept is made) or (type(kept) is dict and type(made) is dict)


@given(_records, _tasks)
def test_the_twins_name_a_run_alike_where_it_alone_holds_its_maps(records: list[list[Any]], task: Task | str) -> None:
    # (the C twin names such a map in place: no one else can see it change)
    python_run, c_run = run_of(records), run_of(records)
    assert in_c(c_run, task) is drain._name_tasks(python_run, task)
    assert c_run == python_run


def test_each_task_names_the_events_after_its_switch() -> None:
    first, second = TASKS[0], TASKS[1]
    given_args = {"route": "/a"}
    run = [SPAN, "GET /a", 1, 2, given_args, TASK_SWITCH, second, None, None, None, INSTANT, "i", 3, 3, None]
    run += [7, "other", 4, 4, None, SPAN, "named", 5, 6, {"task": "mine"}]
    last = in_c(run, first)
    assert last is second
    assert run == [
        *[SPAN, "GET /a", 1, 2, {"route": "/a", "task": "request 0"}],
        *[INSTANT, "i", 3, 3, {"task": "request 1"}],
        *[7, "other", 4, 4, None],  # not a span nor an instant: as it was
        *[SPAN, "named", 5, 6, {"task": "mine"}],  # named already
    ]
    assert given_args == {"route": "/a"}
    assert len(run) == 4 * RECORD_FIELDS


def test_a_task_whose_name_raises_raises_the_same_in_both() -> None:
    class Broken:
        def get_name(self) -> str:
            raise LookupError("no name")

    for twin in TWINS:
        with pytest.raises(LookupError, match="no name"):
            twin([SPAN, "s", 1, 2, None], Broken())
        run = [SPAN, "s", 1, 2, None, TASK_SWITCH, Broken(), None, None, None]
        with pytest.raises(LookupError, match="no name"):
            twin(run, TASKS[0])


def test_a_cut_record_raises_index_error_in_both() -> None:
    for twin in TWINS:
        with pytest.raises(IndexError):
            twin([SPAN, "s", 1], TASKS[0])
        with pytest.raises(IndexError):
            twin([SPAN, "s", 1, 2, None, TASK_SWITCH], TASKS[0])
    # A run that fails halfway is left as the twin leaves it: its switches still in, its events each once (the drain
    # counts what it held as dropped, the switches as none), those before the failure named.
    left = []
    for twin in TWINS:
        run = [SPAN, "a", 1, 2, None, TASK_SWITCH, TASKS[1], None, None, None, INSTANT, "b", 3, 3, None, SPAN, "c", 4]
        with pytest.raises(IndexError):
            twin(run, TASKS[0])
        left.append(run)
    assert left[0] == left[1]
    assert left[0][:5] == [SPAN, "a", 1, 2, {"task": "request 0"}]
    assert left[0][5:] == [
        TASK_SWITCH,
        TASKS[1],
        None,
        None,
        None,
        INSTANT,
        "b",
        3,
        3,
        {"task": "request 1"},
        SPAN,
        "c",
        4,
    ]


def test_a_kind_that_cannot_be_compared_raises_the_same_in_both() -> None:
    class Odd:
        def __eq__(self, other: object) -> bool:
            raise ArithmeticError("no comparing")

        __hash__ = object.__hash__

    for twin in TWINS:
        with pytest.raises(ArithmeticError, match="no comparing"):
            twin([Odd(), "s", 1, 2, None], TASKS[0])


def test_name_tasks_takes_a_list_and_five_arguments() -> None:
    assert speedups is not None
    with pytest.raises(TypeError, match="run a list"):
        speedups.name_tasks((SPAN, "s", 1, 2, None), TASKS[0], TASK_SWITCH, SPAN, INSTANT)
    with pytest.raises(TypeError, match="name_tasks"):
        speedups.name_tasks([], TASKS[0])  # type: ignore[call-arg]


def shape(value: Any) -> Any:
    """``value`` (a result or a run) as the twins can be compared on it: made afresh for each, its tasks and bare
    objects are told by their names and kinds."""
    if isinstance(value, list):
        return [shape(v) for v in value]
    if isinstance(value, dict):
        return {repr(k) if type(k) in (str, int) else type(k).__name__: shape(v) for k, v in value.items()}
    if isinstance(value, Task):
        return ("task", value.name)
    return type(value).__name__ if type(value) is object else value


#: What the hostile code of the test below reads: the run being named, and the map it took out (if it did).
HELD: dict[str, Any] = {}


class ClearsAtItsName(Task):
    def get_name(self) -> str:
        HELD["run"].clear()
        return self.name


class ChangesAsItIsLetGo(Task):
    def __init__(self, name: str, change: Callable[[list[Any]], Any]) -> None:
        super().__init__(name)
        self.change = change

    def __del__(self) -> None:
        self.change(HELD["run"])


class TakesTheMap:
    """A key of a span's args whose __eq__ takes the map out of the run (its hash is that of "task")."""

    def __hash__(self) -> int:
        return hash("task")

    def __eq__(self, other: object) -> bool:
        HELD["taken"] = HELD["run"][4]
        HELD["run"][4] = "replaced"
        return False


class ClearsAtItsHash(str):
    """A key of an instant's args (a Keywords) whose hash clears the run, the first time."""

    def __hash__(self) -> int:
        if HELD.pop("armed", False):
            HELD["run"].clear()
        return str.__hash__(self)


HOSTILE_RUNS: list[Callable[[], list[Any]]] = [
    lambda: [SPAN, "s", 1, 2, None, TASK_SWITCH, ClearsAtItsName("B"), 0, 0, None],
    lambda: [SPAN, "s", 1, 2, None, TASK_SWITCH, ClearsAtItsName("B"), 0, 0, None, INSTANT, "i", 3, 3, None],
    lambda: [TASK_SWITCH, ChangesAsItIsLetGo("A2", list.clear), 0, 0, None, TASK_SWITCH, Task("B"), 0, 0, None],
    lambda: [
        *[SPAN, "s", 1, 2, None, TASK_SWITCH, ChangesAsItIsLetGo("A2", lambda run: run.extend(["x", "y", object()]))],
        *[0, 0, None, TASK_SWITCH, Task("B"), 0, 0, None],
    ],
    lambda: [SPAN, "s", 1, 2, {TakesTheMap(): 1}],
    lambda: [INSTANT, "i", 1, 2, keywords((ClearsAtItsHash("a"), 1), ("b", 2))],
]


@pytest.mark.parametrize(
    "make",
    HOSTILE_RUNS,
    ids=["name-clears-last", "name-clears", "release-clears", "release-appends", "eq-takes-map", "hash-clears"],
)
def test_code_the_drain_runs_that_changes_the_run_leaves_it_as_the_twin_does(make: Callable[[], list[Any]]) -> None:
    # A task's name, a finalizer of a task let go of, a key's __eq__ and __hash__: Python code that can reach the run
    # while it is named. The C twin reads it again after each: no value it let go of read, none lost or left twice, and
    # a map taken out meanwhile is not changed.
    left = []
    for twin in TWINS:
        HELD.clear()
        run = HELD["run"] = make()
        HELD["armed"] = True
        try:
            result: Any = twin(run, TASKS[0])
        except Exception as error:
            result = (type(error), str(error))
        left.append((shape(result), shape(run), shape(HELD.get("taken"))))
        HELD.clear()
    assert left[0] == left[1]
