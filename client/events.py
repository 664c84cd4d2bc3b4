"""Typed events, as HawkTracer's event klasses: one class per kind of event, with typed fields.

    from ringtrace.client import Event, string, u8, u16

    class Packet(Event):
        size: u16
        proto: string
        retries: u8 = 0

    tl.push(Packet(size=1500, proto="udp"))

Field types: ``i8 i16 i32 i64 u8 u16 u32 u64 f32 f64 string binary boolean ptr`` from this module (``Annotated``
aliases of ``int``, ``float``, ``str``, ``bytes`` and ``bool``, so type checkers see the plain type), the plain types
themselves (``int`` is ``i64``, ``float`` is ``f64``), or another ``Event`` subclass, carried as a nested struct.

Theory of operation
-------------------
Defining a subclass registers it (``__init_subclass__``): its fields are read from its annotations, base classes'
first, and checked (a type that is not a field type raises ``TypeError`` naming the class, the field and the type); it
gets a kind id in the process's ``KINDS`` registry and a keyword-only ``__init__``, generated as ``dataclasses`` does.
Its schema (the kind's name and its fields with their type codes, after the ``id`` every event carries) travels in a
SCHEMA frame on every stream before the events that need it, and again in full on every reconnect.

``Timeline.push`` records ``(kind id, class name, now, now, event)`` and nothing more. The flusher reads the fields
(``wire_values``) and checks each value against its type: a value that does not fit (a ``u8`` given 300) drops that
event, counted as rejected, with one warning per class. It also gives the event its id, from one counter of the
process, the first time a listener takes it (the same id for every listener). An event is read on the flusher, after
``push`` returns: push a fresh one each time rather than change or push again one already pushed.
"""

from __future__ import annotations

import itertools
import logging
import math
import struct
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Final

from ringtrace.wire.frames import KindSpec
from ringtrace.wire.model import KINDS, MAX_ARG_TEXT, clean_text, display_text

__all__ = [
    "Event",
    "FieldType",
    "InvalidField",
    "binary",
    "boolean",
    "event_id",
    "f32",
    "f64",
    "i8",
    "i16",
    "i32",
    "i64",
    "next_event_id",
    "ptr",
    "string",
    "u8",
    "u16",
    "u32",
    "u64",
    "wire_values",
]

log = logging.getLogger("ringtrace.client")

#: Ids of typed events, unique within the process (``next`` of an ``itertools.count`` is atomic under the GIL).
next_event_id: Final = itertools.count(1).__next__

_F32_MAX: Final = 3.4028234663852886e38
_POINTER_BITS: Final = 8 * struct.calcsize("P")


class InvalidField(ValueError):
    """A typed event's field value does not fit its declared type."""


@dataclass(frozen=True, slots=True)
class FieldType:
    """A field type: its type code on the wire, and the check that turns a value into what is sent (or raises)."""

    code: str
    check: Callable[[Any], Any]

    def __repr__(self) -> str:
        return self.code


def _integer(code: str, low: int, high: int) -> FieldType:
    def check(value: Any) -> int:
        if not isinstance(value, int) or not low <= value <= high:
            raise InvalidField(f"{value!r:.80} is not a {code} (an int in {low}..{high})")
        return int(value)

    return FieldType(code, check)


def _f32(value: Any) -> float:
    if not isinstance(value, int | float) or (math.isfinite(value) and abs(value) > _F32_MAX):
        raise InvalidField(f"{value!r:.80} is not an f32 (a float within +-{_F32_MAX:g}, inf or nan)")
    return float(value)


def _f64(value: Any) -> float:
    if not isinstance(value, int | float):
        raise InvalidField(f"{value!r:.80} is not an f64 (a float)")
    try:
        return float(value)
    except OverflowError:
        raise InvalidField(f"{value!r:.80} is not an f64 (an int too large for a float)") from None


def _string(value: Any) -> str:
    if not isinstance(value, str):
        raise InvalidField(f"{value!r:.80} is not a string")
    if len(value) > MAX_ARG_TEXT:
        return clean_text(value[:MAX_ARG_TEXT]) + f"<ringtrace: clipped {len(value) - MAX_ARG_TEXT} characters>"
    return clean_text(value)


def _binary(value: Any) -> bytes:
    if not isinstance(value, bytes | bytearray | memoryview):
        raise InvalidField(f"{value!r:.80} is not binary (bytes, bytearray or memoryview)")
    return bytes(value[:MAX_ARG_TEXT])


def _boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise InvalidField(f"{value!r:.80} is not a boolean")
    return value


_I8 = _integer("i8", -(2**7), 2**7 - 1)
_I16 = _integer("i16", -(2**15), 2**15 - 1)
_I32 = _integer("i32", -(2**31), 2**31 - 1)
_I64 = _integer("i64", -(2**63), 2**63 - 1)
_U8 = _integer("u8", 0, 2**8 - 1)
_U16 = _integer("u16", 0, 2**16 - 1)
_U32 = _integer("u32", 0, 2**32 - 1)
_U64 = _integer("u64", 0, 2**64 - 1)
_PTR = _integer("ptr", 0, 2**_POINTER_BITS - 1)
_F32 = FieldType("f32", _f32)
_F64 = FieldType("f64", _f64)
_STRING = FieldType("str", _string)
_BINARY = FieldType("bytes", _binary)
_BOOLEAN = FieldType("bool", _boolean)

i8 = Annotated[int, _I8]
i16 = Annotated[int, _I16]
i32 = Annotated[int, _I32]
i64 = Annotated[int, _I64]
u8 = Annotated[int, _U8]
u16 = Annotated[int, _U16]
u32 = Annotated[int, _U32]
u64 = Annotated[int, _U64]
#: A pointer-sized unsigned integer (an address, an ``id()``).
ptr = Annotated[int, _PTR]
f32 = Annotated[float, _F32]
f64 = Annotated[float, _F64]
string = Annotated[str, _STRING]
binary = Annotated[bytes, _BINARY]
boolean = Annotated[bool, _BOOLEAN]

_PLAIN: Final[dict[object, FieldType]] = {int: _I64, float: _F64, str: _STRING, bytes: _BINARY, bool: _BOOLEAN}
#: Names every event has (HawkTracer's base event): a field may not take them.
_RESERVED: Final = frozenset({"id", "timestamp"})


class Event:
    """Base class of typed events; see the module docstring. Subclasses are registered when they are defined."""

    #: Set on each subclass when it is defined.
    kind: ClassVar[KindSpec]
    fields: ClassVar[tuple[str, ...]]
    _checks: ClassVar[tuple[tuple[str, Callable[[Any], Any]], ...]]
    _defaults: ClassVar[dict[str, Any]]
    _label: ClassVar[str]
    _kind_id: ClassVar[int]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        types = _field_types(cls)
        defaults: dict[str, Any] = {}
        for base in reversed(cls.__mro__[1:]):  # inherited defaults, then this class's own
            if issubclass(base, Event) and base is not Event:
                defaults.update(base._defaults)
        defaults.update((name, cls.__dict__[name]) for name in types if name in cls.__dict__)
        for name, value in defaults.items():
            try:
                types[name].check(value)
            except InvalidField as exc:
                raise TypeError(f"{cls.__qualname__}.{name}: the default {exc}") from None
        cls.fields = tuple(types)
        cls._defaults = defaults
        cls._checks = tuple((name, field.check) for name, field in types.items())
        cls._label = display_text(cls.__qualname__.rsplit("<locals>.", 1)[-1])  # a class made in a function too
        wire_fields = (("id", "u64"), *((name, field.code) for name, field in types.items()))
        cls.kind = KINDS.register(cls._label, "instant", wire_fields, _converter)
        cls._kind_id = cls.kind.id
        cls.__init__ = _make_init(cls, tuple(types), defaults)  # type: ignore[method-assign]

    def __repr__(self) -> str:
        values = ", ".join(f"{name}={getattr(self, name, '<unset>')!r}" for name in self.fields)
        return f"{type(self).__qualname__}({values})"

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(getattr(self, name, None) == getattr(other, name, None) for name in self.fields)

    __hash__ = None  # type: ignore[assignment]


def _field_types(cls: type[Event]) -> dict[str, FieldType]:
    """``cls``'s fields and their types, base classes' first; raises ``TypeError`` naming what is wrong."""
    try:
        hints = typing.get_type_hints(cls, include_extras=True)
    except Exception as exc:
        raise TypeError(f"{cls.__qualname__}: its field annotations cannot be resolved ({exc})") from None
    types: dict[str, FieldType] = {}
    for name, hint in hints.items():
        if typing.get_origin(hint) is ClassVar or name.startswith("_") or name in Event.__annotations__:
            continue
        if name in _RESERVED:
            raise TypeError(
                f"{cls.__qualname__}.{name}: the name is every event's own ({', '.join(sorted(_RESERVED))})"
            )
        types[name] = _field_type(cls, name, hint)
    return types


def _field_type(cls: type, name: str, hint: Any) -> FieldType:
    if typing.get_origin(hint) is Annotated:
        for extra in hint.__metadata__:
            if isinstance(extra, FieldType):
                return extra
    if hint in _PLAIN:
        return _PLAIN[hint]
    if isinstance(hint, type) and issubclass(hint, Event) and hint is not Event:
        if hint is cls:
            raise TypeError(f"{cls.__qualname__}.{name}: an event cannot contain itself")
        return _struct(hint)
    raise TypeError(
        f"{cls.__qualname__}.{name}: {hint!r:.100} is not a field type; use int, float, str, bytes, bool, one of "
        "ringtrace.client's i8 i16 i32 i64 u8 u16 u32 u64 f32 f64 string binary boolean ptr, or an Event subclass"
    )


def _struct(nested: type[Event]) -> FieldType:
    def check(value: Any) -> list[Any]:
        if not isinstance(value, nested):
            raise InvalidField(f"{value!r:.80} is not a {nested.__qualname__}")
        return _checked_values(value, [])

    return FieldType(f"kind:{nested.kind.id}", check)


_MISSING: Final = object()


def _make_init(cls: type, names: tuple[str, ...], defaults: dict[str, Any]) -> Callable[..., None]:
    """A keyword-only ``__init__`` that sets each field, compiled once per class (as ``dataclasses`` does)."""
    params = ", ".join(f"{name}=_default_{name}" if name in defaults else name for name in names)
    body = "".join(f"    self.{name} = {name}\n" for name in names) or "    pass\n"
    source = f"def __init__(self, *, {params}) -> None:\n{body}" if names else f"def __init__(self) -> None:\n{body}"
    namespace: dict[str, Any] = {f"_default_{name}": value for name, value in defaults.items()}
    exec(source, namespace)
    init: Callable[..., None] = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    return init


def _converter(event: Event) -> tuple[list[Any], int]:
    return wire_values(event), 0


def event_id(event: Event) -> int:
    """``event``'s id, given on first use from the process's counter and kept with it (its ``__dict__``)."""
    state = getattr(event, "__dict__", None)
    if state is None:  # a subclass with __slots__: an id per use
        return next_event_id()
    found = state.get(_ID_KEY)
    if found is None:
        found = state[_ID_KEY] = next_event_id()
    return int(found)


_ID_KEY: Final = "_ringtrace_id"


def wire_values(event: Event) -> list[Any]:
    """What an EVENTS frame carries for ``event``: its id, then each field checked against its type.

    Raises:
        InvalidField: a value does not fit its field's type (the message names the field).
    """
    if not isinstance(event, Event):
        raise InvalidField(f"a typed event must be a ringtrace.client.Event, got {type(event).__name__}")
    try:
        return _checked_values(event, [event_id(event)])
    except InvalidField as exc:
        raise InvalidField(f"{type(event).__qualname__}.{exc}") from None


def _checked_values(event: Event, values: list[Any]) -> list[Any]:
    """``values`` extended with ``event``'s checked fields; an ``InvalidField`` message starts with the field's path."""
    for name, check in event._checks:
        value = getattr(event, name, _MISSING)
        if value is _MISSING:
            raise InvalidField(f"{name} is not set")
        try:
            values.append(check(value))
        except InvalidField as exc:
            raise InvalidField(f"{name}{'.' if isinstance(value, Event) else ': '}{exc}") from None
        except Exception as exc:  # a value whose comparison or conversion raises
            raise InvalidField(f"{name}: {value!r:.80} cannot be read ({type(exc).__name__}: {exc})") from None
    return values
