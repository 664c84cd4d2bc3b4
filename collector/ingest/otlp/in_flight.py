"""The bytes the OTLP requests being handled hold at once, within a bound: each request's body as received (its
Content-Length, or the body limit when it names none) and as it inflates, taken as it grows and given back when the
request is answered. A gzip body of 8 KB may inflate to 8 MiB, and the inflated bodies wait for their turn to be
decoded: counted by what they were sent as, they would hold many times the bound. Past it a request is refused
(``Busy``: a 503 with Retry-After), so the exporter sends it again later."""

from __future__ import annotations

__all__ = ["Busy", "BytesInFlight", "RequestBytes"]


class Busy(Exception):
    """Taking more would pass the bound of the bytes in flight: the message says how many, and the bound."""


class BytesInFlight:
    """The bytes held by the requests in flight, the most held at once since the start, and the bound."""

    def __init__(self, most: int) -> None:
        self.most = most
        self.held = 0
        self.peak = 0

    def request(self) -> RequestBytes:
        """One request's part, given back at the end of its ``with`` block."""
        return RequestBytes(self)


class RequestBytes:
    """One request's part of the bytes in flight: taken as its body is read and inflated, all given back at once."""

    __slots__ = ("_in_flight", "held")

    def __init__(self, in_flight: BytesInFlight) -> None:
        self._in_flight = in_flight
        self.held = 0

    def take(self, nbytes: int) -> None:
        """Count ``nbytes`` more held by this request.

        Raises:
            Busy: they would pass the bound (nothing is taken).
        """
        in_flight = self._in_flight
        if in_flight.held + nbytes > in_flight.most:
            raise Busy(
                f"requests holding {in_flight.held} bytes in flight (as received and inflated), {nbytes} more would "
                f"pass the most, {in_flight.most}"
            )
        in_flight.held += nbytes
        in_flight.peak = max(in_flight.peak, in_flight.held)
        self.held += nbytes

    def __enter__(self) -> RequestBytes:
        return self

    def __exit__(self, *exc: object) -> None:
        self._in_flight.held -= self.held
        self.held = 0
