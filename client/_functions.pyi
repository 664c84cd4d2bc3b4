"""The function tracer in C (client/functions/tracer/): the twin of
``ringtrace.client.functions.python_tracer.PythonTracer``, which defines what it records."""

from collections.abc import Callable
from types import CodeType
from typing import Final

from ringtrace.wire.stack_frames import CodeLocation

#: Per thread, the most bytes of records held between drains unless told otherwise (174,762 calls).
DEFAULT_BUFFER_BYTES: Final[int]
#: The size of one call record (``ringtrace.wire.call_records.RECORD.size``).
RECORD_SIZE: Final[int]

class Tracer:
    def __init__(
        self,
        decide: Callable[[CodeType, str], bool],
        locations: list[CodeLocation],
        *,
        min_duration_ns: int = 0,
        max_depth: int = 0,
        builtins: bool = False,
        buffer_bytes: int = ...,
        wake: Callable[[], object] | None = None,
    ) -> None: ...
    def start(self) -> None: ...
    def stop(self) -> None: ...
    def drain(self) -> list[tuple[int, bytes]]: ...
    @property
    def dropped(self) -> int: ...
    @property
    def recorded(self) -> int: ...
    @property
    def running(self) -> bool: ...
