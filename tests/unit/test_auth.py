"""The token and TLS settings, checked before anything is bound: tokens, token files, the refusal to listen beyond
loopback without a token, HELLO's token field, and what never shows a token."""

from __future__ import annotations

import logging
import re
import ssl
from pathlib import Path

import msgpack
import pytest
from ringtrace.client import StreamerOptions
from ringtrace.collector.auth import Authenticator, is_loopback, server_tls_context
from ringtrace.collector.ingest.hello import rewritten_hello
from ringtrace.collector.service.app import CollectorConfig
from ringtrace.collector.service.serve import build_parser, config_from_args, environment_args
from ringtrace.wire.decoder import SessionDecoder
from ringtrace.wire.errors import BadPreamble, ConfigError, LimitExceeded, MalformedFrame
from ringtrace.wire.frames import FRAME_HEADER, FrameType, Hello, encode, preamble
from ringtrace.wire.parsing import check_token, environment_token, read_token_file
from ringtrace.wire.reader import FrameReader

TOKEN = "rt-unit-0123456789abcdef0123456789"


def hello(token: str = "") -> Hello:
    return Hello(7, "host", "proc", "instance", "", 1, 2, "test", token=token)


# -- HELLO's token ---------------------------------------------------------------------------------------------------


def test_hello_carries_a_token_only_when_it_has_one_and_never_shows_it() -> None:
    with_token = encode(hello(TOKEN))
    assert msgpack.unpackb(with_token[FRAME_HEADER.size :])["token"] == TOKEN
    assert "token" not in msgpack.unpackb(encode(hello())[FRAME_HEADER.size :])  # an older collector sees no change
    assert TOKEN not in repr(hello(TOKEN))
    reader = FrameReader("client")
    reader.receive_data(preamble() + with_token + encode(hello()))
    assert [frame.token for frame in reader if isinstance(frame, Hello)] == [TOKEN, ""]


def test_a_token_that_is_not_text_is_malformed_without_its_value() -> None:
    body = msgpack.packb({**msgpack.unpackb(encode(hello())[FRAME_HEADER.size :]), "token": 12345})
    with pytest.raises(MalformedFrame, match="field 'token' must be str, got int"):
        Hello.decode_body(body)


def test_rewritten_hello_sets_or_removes_it_and_keeps_every_other_field() -> None:
    fields = {**msgpack.unpackb(encode(hello())[FRAME_HEADER.size :]), "from_the_future": [1, 2]}
    body = msgpack.packb(fields)
    frame = FRAME_HEADER.pack(len(body), FrameType.HELLO) + body
    given = rewritten_hello(frame, token=TOKEN)
    assert msgpack.unpackb(given[FRAME_HEADER.size :]) == {**fields, "token": TOKEN}
    assert msgpack.unpackb(rewritten_hello(given, token="")[FRAME_HEADER.size :]) == fields
    assert Hello.decode_body(given[FRAME_HEADER.size :]).token == TOKEN


def test_a_session_refuses_a_token_longer_than_a_hello_text_naming_its_length_only() -> None:
    long = "t" * 257
    session = SessionDecoder()
    session.receive_data(preamble() + encode(hello(long)))
    with pytest.raises(LimitExceeded) as refused:
        session.next_frame()
    assert "field 'token' length: 257 exceeds max_string_chars=256" in str(refused.value)
    assert long not in str(refused.value)


@pytest.mark.parametrize("record", [b"\x16\x03\x01\x02\x00", b"\x15\x03\x03\x00\x02"])
def test_tls_where_the_magic_should_be_is_named(record: bytes) -> None:
    reader = FrameReader("collector")
    reader.receive_data(record)
    with pytest.raises(BadPreamble, match="the peer speaks TLS"):
        reader.next_frame()


# -- tokens ------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("token", "says"),
    [
        ("", "is empty"),
        ("x" * 257, "at most 256 characters long, got 257"),
        ("secret token", "character 7 is a space"),
        ("secret\n", "character 7 is a newline"),
        ("sécret", "character 2 is not printable ASCII"),
        (b"secret", "must be a str, got bytes"),
    ],
)
def test_a_bad_token_is_refused_naming_what_is_wrong_not_the_token(token: object, says: str) -> None:
    with pytest.raises(ConfigError, match=says) as refused:
        check_token(token, "option token")
    assert "secret" not in str(refused.value) and "sécret" not in str(refused.value)


def test_streamer_options_take_the_token_from_the_environment_and_never_show_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RINGTRACE_TOKEN", TOKEN + "\n")  # as a secret mounted from a file often ends
    options = StreamerOptions()
    assert options.token == TOKEN
    assert TOKEN not in repr(options) and "token" not in repr(options)
    assert StreamerOptions(token="another-token-0123456789").token == "another-token-0123456789"  # given wins
    monkeypatch.setenv("RINGTRACE_TOKEN", "two words")
    with pytest.raises(ConfigError, match="environment variable RINGTRACE_TOKEN may hold only") as refused:
        StreamerOptions()
    assert "two words" not in str(refused.value)
    monkeypatch.setenv("RINGTRACE_TOKEN", "")
    assert StreamerOptions().token is None and environment_token() is None


def test_a_client_takes_the_token_as_a_file_holds_it_like_the_collector(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The docs' ``openssl rand -hex 32 > token``: read whole, it ends with a newline, which both sides ignore."""
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    path.chmod(0o600)
    assert StreamerOptions(token=path.read_text()).token == TOKEN
    assert StreamerOptions(token=TOKEN + "\r\n").token == TOKEN
    assert StreamerOptions(token_file=path).token == TOKEN == read_token_file(str(path))
    assert StreamerOptions(token_file=str(path)).token == TOKEN
    with pytest.raises(
        ConfigError, match=f"option token may hold only printable ASCII .* character {len(TOKEN) + 1} is a newline"
    ):
        StreamerOptions(token=TOKEN + "\n\n")
    with pytest.raises(ConfigError, match="not both"):
        StreamerOptions(token=TOKEN, token_file=path)
    with pytest.raises(ConfigError, match=f"option token_file: cannot read the token file {tmp_path / 'none'}"):
        StreamerOptions(token_file=tmp_path / "none")
    monkeypatch.setenv("RINGTRACE_TOKEN", "from-the-variable")
    monkeypatch.setenv("RINGTRACE_TOKEN_FILE", str(path))
    assert StreamerOptions().token == TOKEN  # a file wins, as for the collector
    assert StreamerOptions(token="given-wins").token == "given-wins"
    monkeypatch.setenv("RINGTRACE_TOKEN_FILE", str(tmp_path / "none"))
    with pytest.raises(ConfigError, match="environment variable RINGTRACE_TOKEN_FILE: cannot read"):
        StreamerOptions()


def test_streamer_options_take_tls_as_a_bool_or_a_client_context() -> None:
    context = ssl.create_default_context()
    assert StreamerOptions(tls=context).tls is context
    with pytest.raises(ConfigError, match=re.escape("option tls must be a bool or an ssl.SSLContext, got str")):
        StreamerOptions(tls="yes")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="a client context"):
        StreamerOptions(tls=ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER))


def test_the_authenticator_compares_and_says_only_missing_or_wrong() -> None:
    auth = Authenticator(TOKEN)
    assert auth.required
    assert auth.refusal(TOKEN) is None
    assert auth.refusal(None) == auth.refusal("") == "missing"
    assert auth.refusal(TOKEN[:-1]) == auth.refusal(TOKEN + "x") == auth.refusal("sécret\udcff") == "wrong"
    assert Authenticator(None).refusal(None) is None and not Authenticator(None).required


def test_refusals_of_one_peer_are_logged_once_then_counted(caplog: pytest.LogCaptureFixture) -> None:
    auth = Authenticator(TOKEN)
    with caplog.at_level(logging.WARNING, logger="ringtrace.collector.auth"):
        for port in range(5000, 5010):
            auth.log_refusal("connection", f"10.0.0.1:{port}", "wrong")
        auth.log_refusal("connection", "10.0.0.1:5010", "missing")
        auth.log_refusal("HTTP GET /snapshot", "10.0.0.1:5011", "wrong")
        auth.log_refusal("connection", "10.0.0.2:5000", "wrong")
    lines = [record.getMessage() for record in caplog.records]
    assert lines == [
        "refusing connection from 10.0.0.1:5000: authentication failed (wrong token)",
        "refusing connection from 10.0.0.1:5010: authentication failed (missing token)",
        "refusing HTTP GET /snapshot from 10.0.0.1:5011: authentication failed (wrong token)",
        "refusing connection from 10.0.0.2:5000: authentication failed (wrong token)",
    ]


def test_a_short_token_is_taken_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="ringtrace.collector.auth"):
        Authenticator("short")
    (record,) = caplog.records
    assert "only 5 characters long" in record.getMessage() and "short" not in record.getMessage()


# -- token files -------------------------------------------------------------------------------------------------------


def test_a_token_file_loses_one_trailing_newline(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    path.chmod(0o600)
    with caplog.at_level(logging.WARNING):
        assert read_token_file(str(path)) == TOKEN
    assert caplog.text == ""
    path.write_text(TOKEN + "\r\n")
    assert read_token_file(str(path)) == TOKEN
    path.write_text(TOKEN + "\n\n")
    with pytest.raises(ConfigError, match="is a newline"):
        read_token_file(str(path))


def test_a_token_file_others_may_read_is_taken_with_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "token"
    path.write_text(TOKEN)
    path.chmod(0o644)
    with caplog.at_level(logging.WARNING):
        assert read_token_file(str(path)) == TOKEN
    assert f"the token file {path} may be read or written by group or others (mode 0644): chmod 600" in caplog.text
    assert TOKEN not in caplog.text


@pytest.mark.parametrize(
    ("content", "says"),
    [(None, "cannot read the token file"), ("", "is empty"), ("\n", "is empty"), ("sécret", "more than printable")],
)
def test_a_token_file_that_gives_no_token_is_refused(tmp_path: Path, content: str | None, says: str) -> None:
    path = tmp_path / "token"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ConfigError, match=says) as refused:
        read_token_file(str(path))
    assert str(path) in str(refused.value) and "--token-file" in str(refused.value)


def test_a_directory_is_no_token_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read the token file"):
        read_token_file(str(tmp_path))


# -- listening beyond loopback ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("host", ["127.0.0.1", "127.4.5.6", "::1", "localhost", "LOCALHOST"])
def test_loopback_addresses(host: str) -> None:
    assert is_loopback(host)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "192.168.0.7", "collector.example.com", "fe80::1"])
def test_addresses_beyond_loopback(host: str) -> None:
    assert not is_loopback(host)


@pytest.mark.parametrize(
    ("tcp_host", "http_host", "named"),
    [
        ("0.0.0.0", "127.0.0.1", "--tcp 0.0.0.0"),
        ("127.0.0.1", "::", "--http ::"),
        ("10.1.2.3", "collector.example.com", "--tcp 10.1.2.3 and --http collector.example.com"),
    ],
)
def test_listening_beyond_loopback_without_a_token_is_refused_before_anything_binds(
    tcp_host: str, http_host: str, named: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        CollectorConfig(tcp_host=tcp_host, http_host=http_host)
    message = str(refused.value)
    assert f"refusing to listen on {named} without a token" in message
    for what_to_do in ("--token-file", "RINGTRACE_TOKEN", "--tls-cert", "--insecure-open"):
        assert what_to_do in message
    CollectorConfig(tcp_host=tcp_host, http_host=http_host, token=TOKEN)  # a token: taken
    CollectorConfig(tcp_host=tcp_host, http_host=http_host, insecure_open=True)  # said on purpose: taken


def test_the_command_line_refuses_the_same_and_takes_insecure_open_from_flag_or_environment() -> None:
    parser = build_parser()
    with pytest.raises(ConfigError, match=re.escape("refusing to listen on --tcp 0.0.0.0")):
        config_from_args(parser.parse_args(["--tcp", "0.0.0.0:7700"]), {})
    config = config_from_args(parser.parse_args(["--tcp", "0.0.0.0:7700", "--insecure-open"]), {})
    assert config.insecure_open and config.token is None
    from_environment = environment_args({"RINGTRACE_INSECURE_OPEN": "1", "RINGTRACE_TCP": "0.0.0.0:7700"})
    assert config_from_args(parser.parse_args(from_environment), {}).insecure_open
    assert environment_args({"RINGTRACE_INSECURE_OPEN": "0"}) == []
    config = config_from_args(parser.parse_args(["--http", "[::]:7701"]), {"RINGTRACE_TOKEN": TOKEN})
    assert config.token == TOKEN and TOKEN not in repr(config)


def test_a_token_file_wins_over_the_token_variable(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("from-the-file-0123456789")
    path.chmod(0o600)
    args = build_parser().parse_args(environment_args({"RINGTRACE_TOKEN_FILE": str(path)}))
    assert config_from_args(args, {"RINGTRACE_TOKEN": TOKEN}).token == "from-the-file-0123456789"


def test_a_bad_switch_variable_is_refused_naming_it(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        environment_args({"RINGTRACE_INSECURE_OPEN": "maybe"})
    assert exited.value.code == 2
    assert "environment variable RINGTRACE_INSECURE_OPEN='maybe'" in capsys.readouterr().err


# -- TLS settings ------------------------------------------------------------------------------------------------------


def test_tls_needs_both_the_certificate_and_its_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--tls-cert and --tls-key go together"):
        CollectorConfig(tls_cert="cert.pem")
    with pytest.raises(ConfigError, match="--tls-cert and --tls-key go together"):
        CollectorConfig(tls_key="key.pem")
    missing = str(tmp_path / "missing.pem")
    with pytest.raises(ConfigError, match=re.escape(f"--tls-cert {missing} --tls-key {missing}: cannot load")):
        server_tls_context(missing, missing)
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    with pytest.raises(ConfigError, match="cannot load the certificate and its key"):
        server_tls_context(str(garbage), str(garbage))


@pytest.mark.parametrize("option", ["otlp_http", "otlp_grpc"])
def test_an_otlp_listener_beyond_loopback_needs_a_token_as_the_others_do(option: str) -> None:
    flag = "--" + option.replace("_", "-")
    with pytest.raises(ConfigError, match=re.escape(f"refusing to listen on {flag} 0.0.0.0 without a token")):
        CollectorConfig(**{option: ("0.0.0.0", 4317)})
    CollectorConfig(**{option: ("0.0.0.0", 4317)}, token=TOKEN)
