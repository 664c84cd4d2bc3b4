"""The client's option table: StreamerOptions, its checks, the environment it reads and the docs say what it says."""

from __future__ import annotations

import dataclasses
import re
import ssl
from pathlib import Path
from typing import Any

import pytest
from ringtrace.client import ConfigError, Streamer, StreamerOptions, connect
from ringtrace.client.connect_options import (
    ENVIRONMENT,
    OPTIONS,
    OPTIONS_END,
    OPTIONS_START,
    options_block,
    options_markdown,
    with_options_markdown,
)
from ringtrace.wire.frame_types import MAX_MAX_FRAME_BYTES, MIN_MAX_FRAME_BYTES
from ringtrace.wire.parsing import TOKEN_FILE_VARIABLE, TOKEN_VARIABLE

DOCS = Path(__file__).resolve().parents[2] / "docs" / "client.md"


@pytest.fixture(autouse=True)
def no_token_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in ENVIRONMENT.values():
        monkeypatch.delenv(variable, raising=False)


def test_the_docs_options_table_is_the_option_table() -> None:
    block = options_block(DOCS.read_text(encoding="utf-8"))
    assert block is not None, f"docs/{DOCS.name} has no {OPTIONS_START} ... {OPTIONS_END} block"
    assert block == options_markdown(), "rewrite the block with ringtrace.client.connect_options.with_options_markdown"


def test_every_field_is_one_row_in_the_fields_order_with_its_default() -> None:
    fields = dataclasses.fields(StreamerOptions)
    assert [field.name for field in fields] == [option.name for option in OPTIONS]
    defaults = StreamerOptions()
    for option in OPTIONS:
        if option.name != "token":  # (None, read from the environment: none here)
            assert getattr(defaults, option.name) == option.default, option.name
    assert [field.name for field in fields if not field.repr] == [option.name for option in OPTIONS if option.secret]


def test_the_variables_read_are_the_rows_and_the_collector_reads_the_same() -> None:
    assert ENVIRONMENT == {"token": TOKEN_VARIABLE, "token_file": TOKEN_FILE_VARIABLE}


def test_the_token_comes_from_the_rows_variables_the_files_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENVIRONMENT["token"], "from-the-variable\n")
    assert StreamerOptions().token == "from-the-variable"
    path = tmp_path / "token"
    path.write_text("from-the-file\n")
    path.chmod(0o600)
    monkeypatch.setenv(ENVIRONMENT["token_file"], str(path))
    assert StreamerOptions().token == "from-the-file"
    assert StreamerOptions(token="given").token == "given"
    monkeypatch.setenv(ENVIRONMENT["token"], "a space")
    monkeypatch.setenv(ENVIRONMENT["token_file"], "")  # empty: not set
    with pytest.raises(ConfigError, match=f"environment variable {TOKEN_VARIABLE} may hold only"):
        StreamerOptions()


REFUSED: list[tuple[dict[str, Any], str]] = [
    ({"process_name": 3}, "option process_name must be a str or None, got int 3"),
    ({"batch_interval_s": "fast"}, "option batch_interval_s must be a number of seconds, got str 'fast'"),
    ({"batch_interval_s": True}, "option batch_interval_s must be a number of seconds, got bool True"),
    ({"batch_interval_s": 0}, "option batch_interval_s must be a finite number > 0, got 0"),
    ({"batch_interval_s": float("nan")}, "option batch_interval_s must be a finite number > 0, got nan"),
    ({"connect_timeout_s": float("inf")}, "option connect_timeout_s must be a finite number > 0, got inf"),
    ({"heartbeat_s": -5}, "option heartbeat_s must be a finite number > 0, got -5"),
    ({"exit_timeout_s": -0.1}, "option exit_timeout_s must be a finite number >= 0, got -0.1"),
    ({"max_queue_bytes": 0}, "option max_queue_bytes must be >= 1, got 0"),
    ({"max_queue_bytes": 1.5}, "option max_queue_bytes must be an int, got float 1.5"),
    (
        {"max_queue_bytes": "lots"},
        "option max_queue_bytes: size must be a number with an optional unit (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB), "
        "got 'lots'",
    ),
    ({"max_frame_bytes": "1KiB"}, f"option max_frame_bytes must be >= {MIN_MAX_FRAME_BYTES}, got 1024"),
    (
        {"max_frame_bytes": "2GiB"},
        f"option max_frame_bytes must be <= {MAX_MAX_FRAME_BYTES} (1 GiB), got {2 * MAX_MAX_FRAME_BYTES}",
    ),
    ({"max_events_per_frame": 2.0}, "option max_events_per_frame must be an int, got float 2.0"),
    ({"max_strings": 1}, "option max_strings must be >= 2, got 1"),
    (
        {"backoff_initial_s": 2.0, "backoff_max_s": 1.0},
        "option backoff_initial_s (2.0) must not exceed backoff_max_s (1.0)",
    ),
    ({"deliver_on_sigterm": 1}, "option deliver_on_sigterm must be a bool, got int 1"),
    ({"tls": "yes"}, "option tls must be a bool or an ssl.SSLContext, got str"),
    (
        {"tls": ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)},
        "option tls must be a client context (ssl.create_default_context()), got a server one",
    ),
    ({"token": ""}, "option token is empty"),
    ({"token": "abc", "token_file": "token"}, "give option token or option token_file, not both"),
    ({"token_file": 5}, "option token_file must be a path, got int"),
]


@pytest.mark.parametrize(("given", "message"), REFUSED, ids=[message[:60] for _, message in REFUSED])
def test_a_refusal_names_the_option_what_it_takes_and_the_value(given: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
        StreamerOptions(**given)
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
        connect("127.0.0.1:9", **given)  # refused before anything connects


def test_sizes_take_text_and_every_row_takes_its_default() -> None:
    options = StreamerOptions(max_queue_bytes="1MiB", max_frame_bytes="64KiB")
    assert (options.max_queue_bytes, options.max_frame_bytes) == (1 << 20, 64 << 10)
    assert StreamerOptions(**{option.name: option.default for option in OPTIONS}) == StreamerOptions()


def test_an_unknown_option_lists_the_valid_ones() -> None:
    valid = ", ".join(sorted(option.name for option in OPTIONS))
    with pytest.raises(ConfigError, match=re.escape(f"unknown option 'batch_size'; valid options: {valid}")):
        StreamerOptions.from_kwargs(batch_size=3)


def test_the_options_table_is_written_between_its_markers() -> None:
    page = f"# Client\n\nBefore.\n\n{OPTIONS_START}\n| old | table |\n{OPTIONS_END}\n\nAfter.\n"
    written = with_options_markdown(page)
    assert options_block(written) == options_markdown()
    assert written.startswith(f"# Client\n\nBefore.\n\n{OPTIONS_START}\n| Option |")
    assert written.endswith(f"{OPTIONS_END}\n\nAfter.\n")
    assert with_options_markdown(written) == written
    with pytest.raises(ValueError, match="no <!-- options:start -->"):
        with_options_markdown("no block here")


def test_a_streamer_paces_the_flusher_with_its_own_options() -> None:
    # No global is set from the options: the flusher reads the pace of the listeners it serves (flusher.Paced).
    streamer = Streamer("127.0.0.1:9", StreamerOptions(batch_interval_s=0.5, exit_timeout_s=7.0))
    try:
        assert (streamer.batch_interval_s, streamer.exit_timeout_s) == (0.5, 7.0)
    finally:
        streamer.close(0)
