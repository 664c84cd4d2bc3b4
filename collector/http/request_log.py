"""The log of an HTTP listener's aiohttp request handlers (``RequestHandler(logger=...)``): a request aiohttp cannot
parse (a NUL in a header, a line too long, not HTTP at all) is answered 400 by aiohttp itself, before any handler or
authentication runs, and aiohttp logs each one with its traceback at ERROR, so that any peer could fill the log. Here
such a request is counted and logged as one WARNING line naming the peer and the reason, at once the first time and
then at most once a minute per reason with the count of those not logged (``log_repeats.py``). Any other error keeps
its traceback at ERROR: it is the collector's."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

from aiohttp.http_exceptions import HttpProcessingError
from ringtrace.collector.log_repeats import Repeats

__all__ = ["RequestLog"]

log = logging.getLogger("ringtrace.collector.http")

if TYPE_CHECKING:
    from logging import _ExcInfoType

#: What of the reason a line keeps: its first line (the rest quotes what the peer sent), this long at most.
_REASON_CHARS = 200


class RequestLog(logging.LoggerAdapter[logging.Logger]):
    """aiohttp's server log for one listener (``listener`` names it in each line), with malformed requests counted
    (``malformed``) and their lines rate-limited."""

    def __init__(self, listener: str) -> None:
        super().__init__(logging.getLogger("aiohttp.server"))
        self.listener = listener
        self.malformed = 0
        self._logged = Repeats()

    def exception(
        self,
        msg: object,
        *args: object,
        exc_info: _ExcInfoType = True,
        stack_info: bool = False,
        stacklevel: int = 1,
        extra: Mapping[str, object] | None = None,
        **kwargs: object,
    ) -> None:
        if not isinstance(exc_info, HttpProcessingError):
            super().exception(
                msg, *args, exc_info=exc_info, stack_info=stack_info, stacklevel=stacklevel, extra=extra, **kwargs
            )
            return
        self._refused(exc_info, args)

    def debug(
        self,
        msg: object,
        *args: object,
        exc_info: _ExcInfoType | None = None,
        stack_info: bool = False,
        stacklevel: int = 1,
        extra: Mapping[str, object] | None = None,
        **kwargs: object,
    ) -> None:
        # A connection's first request that is not HTTP at all (BadHttpMethod: TLS to the plain listener, say) aiohttp
        # logs at DEBUG: it is counted and logged as the others are.
        if not isinstance(exc_info, HttpProcessingError):
            super().debug(
                msg, *args, exc_info=exc_info, stack_info=stack_info, stacklevel=stacklevel, extra=extra, **kwargs
            )
            return
        self._refused(exc_info, args)

    def _refused(self, error: HttpProcessingError, args: tuple[object, ...]) -> None:
        self.malformed += 1
        reason = (error.message.strip().splitlines() or [type(error).__name__])[0][:_REASON_CHARS].rstrip(":")
        unlogged = self._logged.due(type(error).__name__)
        if unlogged is not None:
            peer = args[0] if args else "?"  # (aiohttp: "Error handling request from %s", request.remote)
            log.warning(
                "refusing a malformed %s request from %s: %s%s",
                self.listener,
                peer,
                reason,
                Repeats.since(unlogged, "refused so"),
            )
