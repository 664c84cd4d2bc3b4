"""Send recorded streams to a collector, which stores them as it stores a live client's (``ringtrace replay``).

Each stream (a preamble, HELLO, then session and EVENTS frames: what a trace file or one stream of a snapshot file
holds) goes over a connection of its own, as a client would send it: HELLO, then the rest once the collector's
WELCOME has come, then a FLUSH, and the connection is done when its FLUSH_ACK says everything before it is stored:
it ends with a GOODBYE, as a client that closes on purpose does (a replay is no crash, whatever the recorded process
did after).
The stream's HELLO names the process it came from, so a replayed process is that process to the collector; it
carries the collector's token if one is given. Plain blocking sockets (in TLS, if asked): this runs in a command, not
in the collector.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Final

from ringtrace.collector.ingest.hello import rewritten_hello
from ringtrace.collector.store.segments import frame_spans
from ringtrace.wire.errors import ProtocolError
from ringtrace.wire.frame_types import (
    AUTHENTICATION_FAILED,
    CHECKSUM_TYPE,
    EVENTS_HEADER,
    FRAME_HEADER,
    PREAMBLE,
    FrameType,
)
from ringtrace.wire.frames import Flush, FlushAck, Frame, Goodbye, Refused, encode
from ringtrace.wire.handshake_frames import Welcome
from ringtrace.wire.reader import CLOSED, NEED_DATA, FrameReader

__all__ = ["ReplayError", "Replayed", "replay"]

#: Frames are sent in writes of about this much.
_BATCH_BYTES: Final = 1 << 20
_FLUSH_TOKEN: Final = 1
_GOODBYE: Final = encode(Goodbye("replayed"))


class ReplayError(Exception):
    """The collector could not be reached, refused a stream, or closed the connection; the message says which."""


@dataclass
class Replayed:
    """What was sent and acknowledged."""

    streams: int = 0
    frames: int = 0
    events: int = 0
    #: Events the collector's store could not keep (it said so: its store is full under ``discard``, a process cap).
    refused: int = 0


def replay(
    streams: Iterable[bytes],
    host: str,
    port: int,
    *,
    timeout_s: float = 30.0,
    token: str | None = None,
    tls: ssl.SSLContext | None = None,
) -> Replayed:
    """Send each stream on a connection of its own and wait until the collector stored it.

    Args:
        token: the collector's token, put in each stream's HELLO.
        tls: connect with TLS, checking the collector's certificate with this context.

    Raises:
        ReplayError: see the class.
    """
    done = Replayed()
    for stream in streams:
        frames = list(_frames(stream))
        if not frames:  # a stream of nothing selected (or a snapshot file of no stream): nothing to send
            continue
        if frames[0][0] != FrameType.HELLO:
            raise ReplayError(f"stream {done.streams + 1} does not begin with a HELLO frame")
        # Recorded: the collector keeps its clock pairing as it was, however long ago (and the token, if asked).
        frames[0] = (FrameType.HELLO, rewritten_hello(frames[0][1], token=token, recorded=True))
        try:
            with (
                socket.create_connection((host, port), timeout=timeout_s) as raw,
                tls.wrap_socket(raw, server_hostname=host) if tls is not None else raw as sock,
            ):
                _send(sock, stream[: PREAMBLE.size], frames, done)
        except ssl.SSLCertVerificationError as exc:
            raise ReplayError(
                f"cannot replay to {host}:{port}: {exc} (for a collector with a private CA or a self-signed "
                "certificate: --cacert FILE)"
            ) from None
        except OSError as exc:
            raise ReplayError(f"cannot replay to {host}:{port}: {exc.strerror or exc}") from None
        done.streams += 1
    return done


def _frames(stream: bytes) -> Iterator[tuple[int, bytes]]:
    """(type, bytes) of each frame after the preamble; a file-only CHECKSUM is left out (a live peer may not send
    one)."""
    for frame_type, start, end in frame_spans(stream, PREAMBLE.size, len(stream)):
        if frame_type != CHECKSUM_TYPE:
            yield frame_type, stream[start:end]


def _send(sock: socket.socket, preamble: bytes, frames: list[tuple[int, bytes]], done: Replayed) -> None:
    reader = FrameReader("collector")
    sock.sendall(preamble + frames[0][1])
    answer = _next(sock, reader, "its WELCOME")
    if isinstance(answer, Goodbye):
        hint = " (--token-file FILE, or RINGTRACE_TOKEN)" if answer.reason == AUTHENTICATION_FAILED else ""
        raise ReplayError(f"the collector refused the stream: {answer.reason}{hint}")
    if not isinstance(answer, Welcome):
        raise ReplayError(f"the collector answered HELLO with {type(answer).__name__}, not WELCOME")
    batch: list[bytes] = []
    size = 0
    for frame_type, frame in frames[1:]:
        if len(frame) > answer.max_frame_bytes:
            raise ReplayError(
                f"a frame of {len(frame)} bytes is larger than the collector takes (max_frame_bytes="
                f"{answer.max_frame_bytes}; start it with a larger --max-frame-size)"
            )
        if frame_type == FrameType.EVENTS:
            done.events += EVENTS_HEADER.unpack_from(frame, FRAME_HEADER.size)[3]
        batch.append(frame)
        size += len(frame)
        done.frames += 1
        if size >= _BATCH_BYTES:
            sock.sendall(b"".join(batch))
            batch, size = [], 0
    sock.sendall(b"".join([*batch, encode(Flush(_FLUSH_TOKEN))]))
    while True:
        answer = _next(sock, reader, "the acknowledgement of everything sent")
        if isinstance(answer, Refused):
            done.refused += answer.events
        elif isinstance(answer, FlushAck) and answer.token == _FLUSH_TOKEN:
            sock.sendall(_GOODBYE)
            return


def _next(sock: socket.socket, reader: FrameReader, waiting_for: str) -> Frame:
    while True:
        try:
            frame = reader.next_frame()
        except ProtocolError as exc:
            http = "b'HTTP'" in str(exc)  # an HTTP server's answer where the magic should be
            hint = " (is that the collector's HTTP port? replay sends to its ingest port, --tcp)" if http else ""
            raise ReplayError(f"the collector's answer is malformed: {exc}{hint}") from None
        if frame is CLOSED:
            raise ReplayError(
                f"the collector closed the connection before {waiting_for} (its log says why; does it take TLS, "
                "--tls, or a token, --token-file?)"
            )
        if frame is not NEED_DATA:
            return frame  # type: ignore[return-value]
        data = sock.recv(65536)
        reader.receive_data(data)
