"""The collector's command line: sizes, addresses, and refusals that say what is wrong."""

from __future__ import annotations

import re

import pytest
from ringtrace.collector.service.serve import (
    ENVIRONMENT,
    build_parser,
    environment_args,
    main,
    parse_listen_address,
    parse_size,
)
from ringtrace.wire.errors import ConfigError
from ringtrace.wire.parsing import parse_addresses, parse_duration_ns


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1048576", 1_048_576),
        ("64MB", 64_000_000),
        ("64mb", 64_000_000),
        ("1GiB", 2**30),
        ("512 KiB", 512 * 1024),
        ("1.5MiB", 3 * 2**19),
        ("10B", 10),
    ],
)
def test_sizes_take_plain_bytes_and_si_or_iec_units(text: str, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "MB", "64 MBs", "-1", "1e6", "64 megabytes"])
def test_a_size_that_is_not_one_is_refused_with_the_forms_it_takes(text: str) -> None:
    with pytest.raises(ConfigError, match="KiB"):
        parse_size(text)


@pytest.mark.parametrize("text", ["99999999TiB", "9223372036854775808", "9" * 400, "9" * 5000, "8388608TiB"])
def test_a_size_past_64_bits_is_refused_naming_the_limit(text: str) -> None:
    with pytest.raises(ConfigError, match=r"size must be at most 9223372036854775807 bytes \(8 EiB"):
        parse_size(text)
    assert parse_size("9223372036854775807") == 2**63 - 1


@pytest.mark.parametrize("text", ["99999999999999h", "9223372037s", "9" * 400 + ".5s", "9" * 5000 + "ns"])
def test_a_duration_past_64_bits_of_ns_is_refused_naming_the_limit(text: str) -> None:
    with pytest.raises(ConfigError, match=r"a duration is at most 9223372036 s \(2\*\*63 - 1 ns"):
        parse_duration_ns(text)
    assert parse_duration_ns("9223372036854775807ns") == 2**63 - 1


@pytest.mark.parametrize("text", ["-5ms", "-0.5s", "-1h"])
def test_a_negative_duration_is_refused_as_negative(text: str) -> None:
    with pytest.raises(ConfigError, match=f"a duration must not be negative, got '{text}'"):
        parse_duration_ns(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("127.0.0.1:0", ("127.0.0.1", 0)), ("0.0.0.0:7700", ("0.0.0.0", 7700)), ("[::1]:80", ("::1", 80))],
)
def test_addresses(text: str, expected: tuple[str, int]) -> None:
    assert parse_listen_address(text) == expected


@pytest.mark.parametrize("text", ["7700", "host:", ":7700", "host:65536", "host:port"])
def test_bad_addresses_are_refused(text: str) -> None:
    with pytest.raises(ConfigError, match="HOST:PORT"):
        parse_listen_address(text)


def test_a_client_takes_several_collectors_separated_by_commas_and_names_a_bad_one() -> None:
    assert parse_addresses("c1:7700,c2:7701,[::1]:7702") == [("c1", 7700), ("c2", 7701), ("::1", 7702)]
    assert parse_addresses("c1:7700") == [("c1", 7700)]
    with pytest.raises(ConfigError, match="'c2'"):
        parse_addresses("c1:7700,c2")
    with pytest.raises(ConfigError, match="none empty"):
        parse_addresses("c1:7700,,c2:7700")
    with pytest.raises(ConfigError, match="HOST:PORT"):  # (spaces, as in one address)
        parse_addresses("c1:7700, c2:7700")


def test_every_flag_has_an_environment_variable() -> None:
    usage = build_parser().format_usage()
    flags = set(re.findall(r"\[(--[a-z-]+)", usage)) - {"--help", "--version"}
    assert flags == set(ENVIRONMENT)
    assert ENVIRONMENT["--max-frame-size"] == "RINGTRACE_MAX_FRAME_SIZE"


def test_the_environment_sets_flags_and_the_command_line_wins() -> None:
    environ = {
        "RINGTRACE_CAPACITY": "64MB",
        "RINGTRACE_POLICY": "discard",
        "RINGTRACE_TCP": "127.0.0.1:9",
        "RINGTRACE_HTTP": "",  # empty: unset
        "RINGTRACE_MAX_TRACKS": "not even checked: the command line gives it",
    }
    argv = ["--capacity", "32MB", "--max-tracks=7"]
    args = build_parser().parse_args([*environment_args(environ, argv), *argv])
    assert (args.capacity, args.policy, args.tcp, args.max_tracks) == (32_000_000, "discard", ("127.0.0.1", 9), 7)


def test_the_handshake_timeout_is_a_flag_and_a_variable_of_ten_seconds_by_default() -> None:
    parser = build_parser()
    assert parser.parse_args([]).handshake_timeout == 10.0
    assert parser.parse_args(["--handshake-timeout", "0.5"]).handshake_timeout == 0.5
    assert parser.parse_args(environment_args({"RINGTRACE_HANDSHAKE_TIMEOUT": "2"})).handshake_timeout == 2.0


def test_a_handshake_timeout_out_of_range_is_refused_naming_the_flag(caplog: pytest.LogCaptureFixture) -> None:
    assert main(["--handshake-timeout", "0"]) == 2
    assert "handshake_timeout_s (--handshake-timeout) must be between" in caplog.text


@pytest.mark.parametrize(
    ("name", "value"), [("RINGTRACE_CAPACITY", "lots"), ("RINGTRACE_POLICY", "keep"), ("RINGTRACE_MAX_TRACKS", "x")]
)
def test_a_bad_environment_value_is_refused_naming_the_variable(
    name: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        environment_args({name: value})
    assert exited.value.code == 2
    assert f"environment variable {name}={value!r}" in capsys.readouterr().err


def test_a_value_the_configuration_refuses_names_the_variable_that_set_it(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("RINGTRACE_FORGET_AFTER", "-1")
    assert main([]) == 2
    assert "(set by RINGTRACE_FORGET_AFTER)" in caplog.text


def test_the_log_level_is_taken_in_any_case_from_the_flag_and_the_environment() -> None:
    assert build_parser().parse_args(["--log-level", "debug"]).log_level == "DEBUG"
    assert environment_args({"RINGTRACE_LOG_LEVEL": "warning"}) == ["--log-level", "warning"]
    assert build_parser().parse_args(environment_args({"RINGTRACE_LOG_LEVEL": "warning"})).log_level == "WARNING"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--log-level", "loud"])


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--capacty", "1GB"], "unrecognized arguments: --capacty 1GB (did you mean --capacity? see"),
        (["--port", "abc"], "unrecognized arguments: --port abc (see"),
        (["--capacity", "1XB"], "argument --capacity: size must be"),
        (["--max-connections", "abc"], "argument --max-connections: invalid int value: 'abc'"),
    ],
)
def test_a_bad_flag_is_refused_in_two_lines_naming_it_and_its_value(
    argv: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # argparse's own printed the usage of every flag first (three dozen lines), the error last.
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    usage, error = capsys.readouterr().err.splitlines()
    assert usage == "usage: ringtrace-collector [options]"
    assert error.startswith("ringtrace-collector: error: ") and named in error
    assert error.endswith("see ringtrace-collector --help)") and argv[1] in error
