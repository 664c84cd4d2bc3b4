# The C recorder (built from speedups/); see accelerator.py.
from collections.abc import Callable
from types import TracebackType
from typing import Any

from ringtrace.wire.table_frames import KindSpec

class RecorderCore:
    _max_buffered_values: int
    _task_buffers: dict[Any, Any]
    _wake_buffered_values: int
    _max_buffered_record_bytes: int
    _listening: bool
    def scope(self, label: object, /, **args: Any) -> Scope: ...
    def instant(self, name: object, /, **args: Any) -> None: ...
    def push(self, event: object, /) -> None: ...
    def marker(
        self, name: object, phase: str = "instant", /, *, ts_ns: int | None = None, stack: bool = False, **details: Any
    ) -> None: ...
    def _events_with_room(self) -> list[Any] | None: ...
    def _forget_recorders(self) -> None: ...
    def _take_unrecorded(self) -> int: ...
    def _cache_threads(self, enabled: bool, /) -> None: ...

class Scope:
    def __enter__(self) -> Scope: ...
    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool: ...

class Message:
    enabled: bool
    _sampling: Any
    @property
    def level(self) -> int: ...
    @property
    def kind(self) -> KindSpec: ...
    def __init__(self, kind: KindSpec, timeline: RecorderCore, enabled: bool, level: int) -> None: ...
    def __call__(self, *values: Any) -> None: ...

class Traced:
    def __init__(self, function: Callable[..., Any], label: str, timeline: RecorderCore) -> None: ...
    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...
    def __reduce__(self) -> str: ...

def configure(
    get_running_loop: Callable[[], object],
    span_kind: int,
    instant_kind: int,
    wake: Callable[[], object],
    set_running_loop: Callable[[object], object] | None = None,
    current_tasks: dict[object, Any] | None = None,
    /,
) -> bool: ...
def running_loop() -> object: ...
def clock_ns() -> int: ...
def clock_source() -> str: ...
def clock_offset() -> tuple[int, int]: ...
def take_runs(values: list[Any], count: int, run_values: int, /) -> list[list[Any]]: ...
def take_samples(
    threads: dict[int, Any],
    active: dict[int, Any],
    own: int,
    tasks: dict[int, str],
    now: int,
    kind: int,
    sampled_of: Callable[[int, Any], Any],
    intern: Callable[[Any], tuple[Any, ...]],
    wake: Callable[[], object],
    /,
) -> tuple[int, int]: ...
def run_passes(
    interval_ns: int,
    stopping: bytearray,
    counts: Any,
    flusher: Any,
    take_args: tuple[Any, ...],
    task_names: Callable[[], dict[int, str]],
    forget_ended: Callable[[], object],
    /,
) -> None: ...

WIRE_CONSTANTS: dict[str, int]

class RecordBuffer:
    held_bytes: int
    extra_events: int

class Segment:
    def take(self) -> tuple[bytes, int]: ...

def record_labels() -> list[str]: ...
