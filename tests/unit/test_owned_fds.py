"""A program that closes our descriptors under us (a daemon's ``os.closerange``) and reuses their numbers gets none of
our bytes, loses none of its own, and keeps its sockets open: ``OwnedSocket`` and ``WakePair``."""

from __future__ import annotations

import os
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from ringtrace.client.accelerator import speedups
from ringtrace.client.delivery import owned_fds
from ringtrace.client.delivery.owned_fds import OwnedSocket
from ringtrace.client.delivery.streaming.descriptors import StreamerDescriptors
from ringtrace.client.delivery.streaming.dialer import ConnectFailed, Dialer
from ringtrace.client.delivery.streaming.wake_pair import WakePair
from ringtrace.client.options import StreamerOptions


def reuse_numbers(*numbers: int) -> list[socket.socket]:
    """Close ``numbers`` under their owners, as a daemon does, then make socket pairs until each number is one of
    them again (the program's sockets now); returns every socket made."""
    for number in numbers:
        os.close(number)
    made: list[socket.socket] = []
    while not set(numbers) <= {sock.fileno() for sock in made}:
        assert len(made) < 64, "the numbers closed were not given out again"
        made.extend(socket.socketpair())
    return made


@pytest.fixture
def programs_sockets() -> Iterator[list[socket.socket]]:
    made: list[socket.socket] = []
    yield made
    for sock in made:
        sock.close()


def test_a_socket_is_ours_until_its_number_is_closed_and_given_to_another(
    programs_sockets: list[socket.socket],
) -> None:
    a, b = socket.socketpair()
    owned = OwnedSocket(a)
    assert owned.holds()
    number = a.fileno()
    programs_sockets.extend(reuse_numbers(number))
    assert not owned.holds()
    owned.close()  # lets go of the number without closing the program's socket
    program = next(sock for sock in programs_sockets if sock.fileno() == number)
    assert program.fileno() >= 0 and a.fileno() == -1
    os.fstat(program.fileno())  # still open
    b.close()


def test_a_socket_still_ours_is_closed() -> None:
    a, b = socket.socketpair()
    owned = OwnedSocket(a)
    number = a.fileno()
    owned.close()
    with pytest.raises(OSError):
        os.fstat(number)
    b.close()


def test_a_number_closed_and_not_given_out_again_is_not_ours() -> None:
    a, b = socket.socketpair()
    owned = OwnedSocket(a)
    os.close(a.fileno())
    assert not owned.holds()
    owned.close()
    b.close()


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="finds the pair's descriptors in /proc/self/fd")
def test_a_wake_pair_closed_under_it_sends_nothing_into_the_programs_sockets(
    programs_sockets: list[socket.socket],
) -> None:
    before = open_numbers()
    pair = WakePair()
    numbers = open_numbers() - before
    assert len(numbers) == 2, numbers
    pair.wake()
    pair.drain()
    programs_sockets.extend(reuse_numbers(*numbers))
    assert not pair.holds()
    pair.wake()
    pair.close()
    for sock in programs_sockets:
        sock.setblocking(False)
        with pytest.raises(BlockingIOError):  # nothing came to any of them
            sock.recv(16)
        os.fstat(sock.fileno())  # and none was closed


def test_a_wake_pair_wakes_while_it_holds() -> None:
    pair = WakePair()
    assert pair.holds()
    pair.wake()
    pair.reader.settimeout(60)
    assert pair.reader.recv(16) == b"\0"
    pair.close()


def open_numbers() -> set[int]:
    """The descriptors open now (not the one the listing itself used, closed by then)."""
    return {int(name) for name in os.listdir("/proc/self/fd") if is_open(int(name))}


def is_open(number: int) -> bool:
    try:
        os.fstat(number)
    except OSError:
        return False
    return True


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="finds the pair's descriptors in /proc/self/fd")
def test_descriptors_closed_under_them_are_made_anew_whatever_numbers_they_had() -> None:
    low = socket.socket()  # a number below the pair's, for the connection to take
    before = open_numbers()
    descriptors = StreamerDescriptors()
    pair_numbers = open_numbers() - before
    number = low.fileno()
    low.close()
    connection, collector = socket.socketpair()
    assert connection.fileno() == number
    descriptors.attach(connection)
    for closed in (number, *pair_numbers):  # as os.closerange does
        os.close(closed)
    # The new pair takes the lowest numbers free: the connection's among them, registered until it is let go of.
    assert descriptors.keep() is False
    assert descriptors.sock is None and descriptors.wake_pair.holds()
    descriptors.wake()
    assert descriptors.wait(60, writable=False) is False  # woken by the new pair
    descriptors.close()
    collector.close()


def dial_in_thread(dialer: Dialer) -> tuple[threading.Thread, list[ConnectFailed]]:
    """``dialer.dial()`` on a thread of its own, and the list its ConnectFailed goes to (a connection to the close)."""
    failed: list[ConnectFailed] = []

    def dial() -> None:
        try:
            dialer.dial().close()
        except ConnectFailed as exc:
            failed.append(exc)

    dialling = threading.Thread(target=dial)
    dialling.start()
    return dialling, failed


def waits_in_poll(thread: threading.Thread) -> bool:
    """Whether ``thread`` sleeps in the kernel's ``poll`` (where a connect with a timeout waits)."""
    with open(f"/proc/self/task/{thread.native_id}/wchan") as wchan:
        return "poll" in wchan.read()


def assert_untouched(programs_sockets: list[socket.socket]) -> None:
    """None of the program's sockets was closed, and none has our bytes (each pair's other end read nothing)."""
    for sock in programs_sockets:
        os.fstat(sock.fileno())
        sock.setblocking(False)
        with pytest.raises(BlockingIOError):
            sock.recv(16)


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="finds the dial's descriptor in /proc/self")
def test_a_dial_whose_descriptor_the_program_took_while_connecting_fails_and_leaves_it(
    programs_sockets: list[socket.socket],
) -> None:
    # A queue of one, filled: the dial's connection waits (its SYN is dropped, sent again after 1 s, 3 s, ...).
    server = socket.create_server(("127.0.0.1", 0), backlog=0)
    port = server.getsockname()[1]
    filler = socket.create_connection(("127.0.0.1", port), timeout=60)
    before = open_numbers()
    dialling, failed = dial_in_thread(Dialer(f"127.0.0.1:{port}", StreamerOptions(connect_timeout_s=60)))
    deadline = time.monotonic() + 60
    while not ((dialled := open_numbers() - before) and waits_in_poll(dialling)):
        assert time.monotonic() < deadline, f"the dial did not wait on its connect within 60 s ({dialled})"
        time.sleep(0.01)
    programs_sockets.extend(reuse_numbers(*dialled))  # as a daemon's closerange does, while it connects
    # Its next SYN is refused: the connect ends, and its number now names a connected socket (the program's).
    server.close()
    filler.close()
    dialling.join(60)
    assert not dialling.is_alive()
    assert [exc.reason for exc in failed] == [
        f"cannot connect to 127.0.0.1:{port}: the program closed the connection's descriptor"
    ]
    assert_untouched(programs_sockets)


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="finds the dial's descriptor in /proc/self/fd")
def test_a_tls_dial_whose_descriptor_the_program_took_leaves_the_programs_socket_open(
    programs_sockets: list[socket.socket],
) -> None:
    server = socket.create_server(("127.0.0.1", 0))  # reads the handshake's first message, never answers it
    server.settimeout(60)
    port = server.getsockname()[1]
    before = open_numbers()
    tls = StreamerOptions(tls=ssl.create_default_context(), connect_timeout_s=60)
    dialling, failed = dial_in_thread(Dialer(f"127.0.0.1:{port}", tls))
    accepted, _ = server.accept()
    accepted.settimeout(60)
    assert accepted.recv(1), "the dial sent no handshake"  # so it waits in the handshake now
    dialled = open_numbers() - before - {accepted.fileno()}
    made = reuse_numbers(*dialled)  # as a daemon's closerange does
    # The handshake fails now, whatever the machine's load: its connection is reset, and what it reads next under its
    # number (the program's socket now) is an end of file.
    others = [made[i ^ 1] for i, sock in enumerate(made) if sock.fileno() in dialled]  # (made in pairs)
    for sock in others:
        sock.close()
    programs_sockets.extend(sock for sock in made if sock not in others)
    accepted.close()  # (unread bytes: a reset)
    server.close()
    dialling.join(60)
    assert not dialling.is_alive()
    assert len(failed) == 1 and failed[0].reason.startswith(f"TLS with 127.0.0.1:{port}"), failed
    for sock in programs_sockets:
        os.fstat(sock.fileno())  # none of the program's sockets was closed


def test_the_c_check_of_a_descriptor_answers_as_its_python_twin(tmp_path: Path) -> None:
    """``fd_identity`` (C, the interpreter lock held) and ``os.fstat``'s: a socket, a file, a pipe, a closed number,
    negative ones, numbers past any descriptor's (a C int's, a C long's), and what is not an int."""
    if speedups is None:
        pytest.skip("the C accelerator is not in use in this process")
    sock_a, sock_b = socket.socketpair()
    reader, writer = os.pipe()
    with sock_a, sock_b, open(tmp_path / "file", "wb") as file:
        closed_a, closed_b = socket.socketpair()
        closed = closed_a.detach()
        os.close(closed)
        closed_b.close()
        numbers = [sock_a.fileno(), sock_b.fileno(), file.fileno(), reader, writer, closed, -1, -(2**31), 2**31 - 1]
        numbers += [2**31, 2**63 - 1, 2**63, 2**70, -(2**70)]
        try:
            answers = [(speedups.fd_identity(number), owned_fds._fstat_identity(number)) for number in numbers]
        finally:
            os.close(reader)
            os.close(writer)
    assert all(c == python for c, python in answers), answers
    assert [c is None for c, _ in answers] == [False] * 5 + [True] * 9
    for odd in ("3", 1.5, -1.5, None):
        for twin in (speedups.fd_identity, owned_fds._fstat_identity):
            with pytest.raises(TypeError):
                twin(odd)  # type: ignore[arg-type]
