"""Clock domains: which monotonic-to-wall offset places each process's events.

A client's events carry its monotonic clock; its HELLO pairs one reading of it with one of its wall clock. All
processes of one boot share the monotonic clock (a boot id names it, containers included), so they share one pairing
and their events line up to the nanosecond, whatever the jitter of their own two readings. Who sets that pairing is
the question: no process may move another's events by more than the other could tell by itself.

- A process on the collector's own boot is placed by the collector's own pairing (it reads both clocks itself;
  after a restart, the one its stored processes had), so long as its monotonic reading is one the collector's clock
  could have given (not ahead of it when the HELLO arrived, nor more than ``MAX_CLOCK_SKEW_NS`` behind). What it
  says of its wall clock does not matter.
- A process of another boot is measured when its HELLO arrives: its reading was taken after its connection was set
  up and before its HELLO arrived, so its delivery took at most the time from accepting the connection to the HELLO,
  plus the connection's round trip (the kernel measures it in the TCP handshake). That is its tolerance, at least
  ``MIN_CLOCK_TOLERANCE_NS`` and at most ``MAX_CLOCK_TOLERANCE_NS``. Its own pairing is the one it claims when its
  wall clock then agreed with the collector's to within its tolerance, else the collector's wall clock at arrival
  against its monotonic reading (logged).
- It takes the pairing of its boot nearest its own, if one is within its own tolerance, else it keeps its own
  (the boot has one more pairing) and that is logged, naming it, its boot, the difference and whose pairing it
  differs from. So a process that lies, first or not, moves no other by more than that other's tolerance. A pairing
  measured is late by its HELLO's delivery: it is taken only by processes that were measured too, and a process
  whose claim was believed only takes another's that was believed.
- A pairing, once a process's events are placed by it, never changes: a new process never moves stored events. A
  HELLO read back (a segment at a restart, a file) keeps the pairing stored with it (the one that was applied; the
  processes of its boot that come after may take it), and a recorded stream sent again (``Hello.recorded``) the one
  it was recorded with unless its boot has one within ``MIN_CLOCK_TOLERANCE_NS``. A process with no boot id keeps
  its own.
"""

from __future__ import annotations

import logging
import socket
import struct
import sys
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from ringtrace.wire.frames import Hello

__all__ = ["Arrival", "ClockDomains", "own_boot_id"]

log = logging.getLogger("ringtrace.collector.clocks")

#: How far from its own pairing a process takes its boot's, however quick its HELLO: two honest processes' own
#: readings of their two clocks may be that far apart (a thread switch between them).
MIN_CLOCK_TOLERANCE_NS: Final = 10 * 10**6
#: Nor by more than this, however slow its HELLO (a stalled HELLO would otherwise excuse any pairing).
MAX_CLOCK_TOLERANCE_NS: Final = 10**9
#: A HELLO naming the collector's boot delivered longer than this after its monotonic reading is not on its clock.
MAX_CLOCK_SKEW_NS: Final = 60 * 10**9
#: Pairings remembered per boot: a boot whose processes disagree more than this is not worth the memory.
MAX_PAIRINGS_PER_BOOT: Final = 16
#: Boots remembered, the least recently joined forgotten first: peers may name any number of them.
MAX_BOOTS: Final = 10_000
#: ``struct tcp_info`` (Linux): ``tcpi_rtt``, in microseconds, after 8 one-byte fields and 15 four-byte ones.
_TCP_INFO_RTT: Final = struct.Struct("=I")
_TCP_INFO_RTT_OFFSET: Final = 68


def own_boot_id() -> str:
    """This host's boot id (Linux), as clients send it; empty where there is none."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def tcp_round_trip_ns(sock: Any) -> int:
    """A TCP connection's round trip as the kernel measured it (first in its handshake); 0 where it is not told."""
    if sys.platform != "linux":  # other systems' TCP_INFO, where there is one, is laid out otherwise
        return 0
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _TCP_INFO_RTT_OFFSET + _TCP_INFO_RTT.size)
    except (AttributeError, OSError, TypeError):  # not Linux, not TCP (a Unix socket), no socket at all
        return 0
    if len(info) < _TCP_INFO_RTT_OFFSET + _TCP_INFO_RTT.size:
        return 0
    return int(_TCP_INFO_RTT.unpack_from(info, _TCP_INFO_RTT_OFFSET)[0]) * 1000


@dataclass(frozen=True, slots=True)
class Arrival:
    """A live HELLO's arrival: the collector's clocks then, and how long its delivery may have taken at most."""

    wall_ns: int
    monotonic_ns: int
    delivery_ns: int

    @classmethod
    def now(cls, accepted_ns: int, sock: Any = None) -> Arrival:
        """Read when a HELLO arrives on a connection accepted at ``accepted_ns`` (``time.monotonic_ns()``)."""
        monotonic_ns = time.monotonic_ns()
        wall_ns = time.time_ns()
        return cls(wall_ns, monotonic_ns, max(monotonic_ns - accepted_ns, 0) + tcp_round_trip_ns(sock))

    @property
    def tolerance_ns(self) -> int:
        return min(max(self.delivery_ns, MIN_CLOCK_TOLERANCE_NS), MAX_CLOCK_TOLERANCE_NS)


#: How a pairing was had: as a process claimed it, measured by the collector, or read back (either, once).
_CLAIMED: Final = "claimed"
_MEASURED: Final = "measured"
_STORED: Final = "stored"


@dataclass(frozen=True, slots=True)
class _Pairing:
    offset_ns: int
    how: str
    #: Whose pairing it is, for the log.
    first: str

    def takes(self, how: str) -> bool:
        """Whether a process whose own pairing was had ``how`` may take this one: a pairing measured is late by its
        HELLO's delivery, so it would move processes that claim theirs by that much (and what claimed its own and
        was believed places no process that was measured by it)."""
        return self.how == how or _STORED in (self.how, how)


class ClockDomains:
    """The pairings each boot's processes are placed by (see the module docstring)."""

    def __init__(self, own_boot: str = "") -> None:
        self.own_boot = own_boot
        self._own_offset_ns: int | None = None
        self._boots: OrderedDict[str, list[_Pairing]] = OrderedDict()

    @property
    def own_offset_ns(self) -> int:
        """The collector's own pairing, read when first needed (once what a data dir held is known): the one stored
        processes of its boot had if it is within ``MIN_CLOCK_TOLERANCE_NS`` (a restart), so that they line up to
        the nanosecond with those that come after; else its wall clock against two monotonic readings around it."""
        if self._own_offset_ns is None:
            before = time.monotonic_ns()
            wall = time.time_ns()
            offset_ns = wall - (before + time.monotonic_ns()) // 2
            stored = self._nearest(self.own_boot, offset_ns, _STORED, MIN_CLOCK_TOLERANCE_NS, only=_STORED)
            self._own_offset_ns = offset_ns if stored is None else stored.offset_ns
            self._remember(self.own_boot, _Pairing(self._own_offset_ns, _CLAIMED, "the collector's own clocks"))
        return self._own_offset_ns

    def offset(self, hello: Hello, arrival: Arrival | None, who: str) -> int:
        """The offset that places the events of the process that said ``hello`` (``arrival``: None for a HELLO read
        back from a segment or a file) and that ``who`` names in the log."""
        claimed = hello.wall_ns - hello.monotonic_ns
        if arrival is None:
            if self._nearest(hello.boot_id, claimed, _STORED, MIN_CLOCK_TOLERANCE_NS) is None:
                self._remember(hello.boot_id, _Pairing(claimed, _STORED, who))
            return claimed
        if hello.boot_id and hello.boot_id == self.own_boot:
            own_ns = self.own_offset_ns  # (decided before any other process of its boot is compared with it)
            if not hello.recorded and 0 <= arrival.monotonic_ns - hello.monotonic_ns <= MAX_CLOCK_SKEW_NS:
                return own_ns  # a reading the collector's own monotonic clock could have given: the same clock
        if hello.recorded:
            own, how, tolerance = claimed, _CLAIMED, MIN_CLOCK_TOLERANCE_NS
        else:
            (own, how), tolerance = self._measured(hello, arrival, who), arrival.tolerance_ns
        return self._join(hello.boot_id, _Pairing(own, how, who), tolerance)

    def _measured(self, hello: Hello, arrival: Arrival, who: str) -> tuple[int, str]:
        """The process's own pairing: the one it claims if its wall clock agreed with the collector's when the HELLO
        arrived, to within the delivery it may have taken; else the collector's wall clock then."""
        skew_ns = hello.wall_ns - arrival.wall_ns
        if abs(skew_ns) <= arrival.tolerance_ns:
            return hello.wall_ns - hello.monotonic_ns, _CLAIMED
        measured = arrival.wall_ns - hello.monotonic_ns
        if self._nearest(hello.boot_id, measured, _MEASURED, arrival.tolerance_ns, only=_MEASURED) is not None:
            return measured, _MEASURED  # its boot's clock was found off before: said then, once for all its processes
        log.warning(
            "%s: its wall clock is %.3f s off the collector's when its HELLO arrived (more than the %.3f s its "
            "delivery may have taken): its events are placed by the collector's clock",
            who, skew_ns / 1e9, arrival.tolerance_ns / 1e9,
        )  # fmt: skip
        return measured, _MEASURED

    def _nearest(
        self, boot: str, offset_ns: int, how: str, tolerance_ns: int | None = None, only: str | None = None
    ) -> _Pairing | None:
        """The pairing of ``boot`` nearest ``offset_ns`` that a pairing had ``how`` may take (within
        ``tolerance_ns``, if given; only those had ``only``, if given)."""
        pairings = [p for p in self._boots.get(boot, ()) if p.takes(how) and only in (None, p.how)]
        nearest = min(pairings, key=lambda pairing: abs(pairing.offset_ns - offset_ns), default=None)
        if nearest is None or (tolerance_ns is not None and abs(nearest.offset_ns - offset_ns) > tolerance_ns):
            return None
        return nearest

    def _join(self, boot: str, own: _Pairing, tolerance_ns: int) -> int:
        """The pairing of ``boot`` nearest ``own`` if within ``tolerance_ns``, else ``own``'s (logged when the boot
        had another that far)."""
        if not boot:
            return own.offset_ns
        taken = self._nearest(boot, own.offset_ns, own.how, tolerance_ns)
        if taken is not None:
            self._boots.move_to_end(boot)
            return taken.offset_ns
        other = self._nearest(boot, own.offset_ns, _STORED)
        if other is not None and abs(other.offset_ns - own.offset_ns) > tolerance_ns:
            log.warning(
                "%s: its clock pairing is %+.3f s from that of %s, of the same boot %r (more than the %.3f s it may "
                "be off by): it keeps its own pairing",
                own.first, (own.offset_ns - other.offset_ns) / 1e9, other.first, boot[:100], tolerance_ns / 1e9,
            )  # fmt: skip
        self._remember(boot, own)
        return own.offset_ns

    def _remember(self, boot: str, pairing: _Pairing) -> None:
        if not boot:
            return
        pairings = self._boots.setdefault(boot, [])
        self._boots.move_to_end(boot)
        if len(self._boots) > MAX_BOOTS:
            self._boots.popitem(last=False)
        if len(pairings) < MAX_PAIRINGS_PER_BOOT:
            pairings.append(pairing)
