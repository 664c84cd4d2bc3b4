"""What the OTLP receivers answer: the refusals (``BadRequest``, ``Unavailable``), and how the OTLP/HTTP port writes
an answer: the response message, or a ``google.rpc.Status`` with ``Retry-After`` where the exporter may retry."""

from __future__ import annotations

from typing import Final

from aiohttp import web
from google.protobuf import json_format
from google.protobuf.message import Message

__all__ = [
    "JSON_CONTENT",
    "PROTOBUF_CONTENT",
    "RETRY_AFTER_S",
    "BadRequest",
    "Unavailable",
    "message_answer",
    "status_answer",
]

#: The content types of OTLP/HTTP bodies and answers: protobuf, and OTLP/JSON.
PROTOBUF_CONTENT: Final = "application/x-protobuf"
JSON_CONTENT: Final = "application/json"
#: Seconds after which an exporter refused for now may send again (``Retry-After``; gRPC's ``RetryInfo``).
RETRY_AFTER_S: Final = 1


class BadRequest(Exception):
    """The body is not an export request: ``status`` says which HTTP status, the message why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Unavailable(Exception):
    """The request is refused for now, and may be sent again later: 503 with ``Retry-After``; over gRPC UNAVAILABLE,
    or RESOURCE_EXHAUSTED where ``busy`` (too many requests in flight), with a RetryInfo."""

    def __init__(self, message: str, busy: bool = False) -> None:
        super().__init__(message)
        self.busy = busy


def status_answer(status: int, message: str, as_json: bool, retry: bool = False) -> web.Response:
    """An error answer: a ``google.rpc.Status`` with ``message`` (and ``Retry-After`` if the exporter may retry)."""
    code = _GRPC_CODES.get(status, 2)
    if as_json:
        response = web.json_response({"code": code, "message": message}, status=status)
    else:  # Status { int32 code = 1; string message = 2; }: two fields, written by hand
        text = message.encode()
        body = b"\x08" + _varint(code) + b"\x12" + _varint(len(text)) + text
        response = web.Response(body=body, status=status, content_type=PROTOBUF_CONTENT)
    if retry:
        response.headers["Retry-After"] = str(RETRY_AFTER_S)
    return response


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


#: The gRPC status codes of our HTTP answers (google.rpc.Code): INVALID_ARGUMENT, DEADLINE_EXCEEDED, UNAVAILABLE...
_GRPC_CODES: Final = {400: 3, 408: 4, 413: 8, 415: 3, 503: 14}


def message_answer(message: Message, as_json: bool) -> web.Response:
    if as_json:
        return web.json_response(json_format.MessageToDict(message))
    return web.Response(body=message.SerializeToString(), content_type=PROTOBUF_CONTENT)
