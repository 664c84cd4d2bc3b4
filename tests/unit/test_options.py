"""The option table: the configuration, the command line, the environment and the docs all say what it says."""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path

import pytest
from ringtrace.collector.command.main import build_parser as build_command_parser
from ringtrace.collector.service.config import CollectorConfig
from ringtrace.collector.service.machine_memory import memory_bytes
from ringtrace.collector.service.option_docs import (
    FLAGS_END,
    FLAGS_START,
    flags_block,
    flags_markdown,
    with_flags_markdown,
)
from ringtrace.collector.service.option_environment import ENVIRONMENT
from ringtrace.collector.service.option_fields import check_setting
from ringtrace.collector.service.option_row import Option
from ringtrace.collector.service.option_table import OPTIONS
from ringtrace.collector.service.serve import build_parser, config_from_args, environment_args
from ringtrace.wire.errors import ConfigError

DOCS = Path(__file__).resolve().parents[2] / "docs" / "collector.md"
RANGED = [option for option in OPTIONS if option.range is not None]
FLAGGED = [option for option in OPTIONS if option.flag is not None]


def test_the_docs_flag_table_is_the_option_table() -> None:
    if not DOCS.exists():
        pytest.skip(f"no {DOCS.name} in docs/")
    block = flags_block(DOCS.read_text(encoding="utf-8"))
    assert block is not None, f"docs/{DOCS.name} has no {FLAGS_START} ... {FLAGS_END} block"
    assert block == flags_markdown(), (
        "rewrite the block with ringtrace.collector.service.option_docs.with_flags_markdown"
    )


def test_every_configuration_field_is_one_row() -> None:
    fields = [field.name for field in dataclasses.fields(CollectorConfig)]
    set_by_rows = [name for option in OPTIONS for name in option.sets]
    assert sorted(set_by_rows) == sorted(fields)


def test_no_flag_and_no_variable_is_declared_twice() -> None:
    flags = [option.flag for option in FLAGGED]
    assert len(set(flags)) == len(flags)
    assert len(set(ENVIRONMENT.values())) == len(ENVIRONMENT)


def test_the_command_line_with_no_flags_makes_the_default_configuration() -> None:
    assert config_from_args(build_parser().parse_args([]), {}) == CollectorConfig()


def test_the_environment_sets_what_the_flag_sets() -> None:
    argv = ["--capacity", "64MB", "--policy", "discard", "--tcp", "127.0.0.1:9", "--max-tracks", "7"]
    environ = {ENVIRONMENT[flag]: value for flag, value in zip(argv[::2], argv[1::2], strict=True)}
    from_flags = config_from_args(build_parser().parse_args(argv), {})
    from_environment = config_from_args(build_parser().parse_args(environment_args(environ)), {})
    assert from_flags == from_environment
    assert (from_flags.capacity_bytes, from_flags.policy, from_flags.tcp_port, from_flags.max_tracks) == (
        64_000_000,
        "discard",
        9,
        7,
    )


@pytest.mark.parametrize("option", RANGED, ids=lambda option: option.name)
def test_a_value_at_its_bounds_is_taken(option: Option) -> None:
    assert option.range is not None
    for bound in option.range:
        check_setting(option.name, bound)


@pytest.mark.parametrize("option", RANGED, ids=lambda option: option.name)
def test_a_value_past_its_bounds_is_refused_naming_the_setting_its_flag_and_the_value(option: Option) -> None:
    assert option.range is not None
    low, high = option.range
    named = f"{option.name} ({option.flag})" if option.flag else option.name
    for value in (low - 1, high + 1, math.nan):
        with pytest.raises(ConfigError, match=re.escape(f"{named} must be between {low} and {high}, got {value}")):
            check_setting(option.name, value)


def test_a_choice_the_table_does_not_list_is_refused_naming_the_flag() -> None:
    with pytest.raises(ConfigError, match=re.escape("fsync (--fsync) must be never, interval, flush, always")):
        CollectorConfig(fsync="sometimes")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=re.escape("policy (--policy) must be ring, discard, got 'keep'")):
        CollectorConfig(policy="keep")  # type: ignore[arg-type]


def test_a_choice_and_a_switchs_variable_take_any_case() -> None:
    argv = ["--policy", "Discard", "--fsync", "NEVER", "--log-level", "debug"]
    config = config_from_args(build_parser().parse_args(argv), {})
    assert (config.policy, config.fsync) == ("discard", "never")
    switch = ENVIRONMENT["--insecure-open"]
    assert environment_args({switch: "On"}) == ["--insecure-open"]
    assert environment_args({switch: "OFF"}) == []
    with pytest.raises(SystemExit):
        environment_args({switch: "maybe"})


def test_help_shows_each_flag_with_its_default() -> None:
    text = " ".join(build_parser().format_help().split())
    for option in FLAGGED:
        assert option.flag in text
        if option.default is not None and not option.switch:
            assert f"(default {option.shown_default})" in text or f"default {option.shown_default}" in text
    assert "(default 256MiB)" in text and "(default 127.0.0.1:7700)" in text
    assert "(default: the whole capacity)" in text


def test_the_flag_table_has_a_line_for_each_flag_with_its_variable_and_default() -> None:
    lines = flags_markdown().splitlines()
    assert lines[0] == "| Flag | Environment | Default | Meaning |"
    rows = lines[2:]
    assert len(rows) == len(FLAGGED)
    for option, row in zip(FLAGGED, rows, strict=True):
        assert row.startswith(f"| `{option.flag}")
        assert f"`{option.environment}`" in row
    assert "| `--capacity SIZE` | `RINGTRACE_CAPACITY` | 256MiB | memory for stored events" in flags_markdown()


def test_the_flag_table_is_written_between_the_markers_and_nothing_else_changes() -> None:
    page = f"# Collector\n\nBefore.\n\n{FLAGS_START}\n| old | table |\n{FLAGS_END}\n\nAfter.\n"
    written = with_flags_markdown(page)
    assert flags_block(written) == flags_markdown()
    assert written.startswith(f"# Collector\n\nBefore.\n\n{FLAGS_START}\n| Flag |")
    assert written.endswith(f"|\n{FLAGS_END}\n\nAfter.\n")
    assert with_flags_markdown(written) == written
    with pytest.raises(ValueError, match="flags:start"):
        with_flags_markdown("no block here")


def test_jetstream_options_are_read_and_checked_naming_the_flag() -> None:
    args = build_parser().parse_args(["--jetstream", "n1:4222,tls://n2:4222", "--jetstream-replicas", "1"])
    config = config_from_args(args, {})
    assert config.jetstream == ("nats://n1:4222", "tls://n2:4222") and config.jetstream_replicas == 1
    with pytest.raises(SystemExit):  # argparse's usage error, saying why
        build_parser().parse_args(["--jetstream", "http://n1:4222"])
    with pytest.raises(ConfigError, match="--jetstream-stream"):
        CollectorConfig(jetstream=("nats://n1:4222",), jetstream_stream="ring.trace")
    with pytest.raises(ConfigError, match="--jetstream and --data-dir"):
        CollectorConfig(jetstream=("nats://n1:4222",), data_dir="data")
    with pytest.raises(ConfigError, match="jetstream_replicas"):
        CollectorConfig(jetstream=("nats://n1:4222",), jetstream_replicas=7)
    with pytest.raises(ConfigError, match="--jetstream-tls-cert and --jetstream-tls-key"):
        CollectorConfig(jetstream=("nats://n1:4222",), jetstream_tls_cert="cert.pem")
    assert environment_args({"RINGTRACE_JETSTREAM": "nats://n1:4222"}) == ["--jetstream", "nats://n1:4222"]


def test_a_flags_refusal_names_the_flag_once(capsys: pytest.CaptureFixture[str]) -> None:
    # argparse names the flag ("argument --jetstream:"); a parser's message that names it too is not said twice
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--jetstream", "ftp://n1:4222"])
    (error,) = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert error.count("--jetstream") == 1 and "'ftp://n1:4222' is not a nats:// or tls:// URL" in error, error


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--jetstream-replicas", "1"], "--jetstream-replicas"),
        (["--jetstream-stream", "other"], "--jetstream-stream"),
        (["--jetstream-storage", "memory"], "--jetstream-storage"),
        (["--jetstream-buffer", "1MiB"], "--jetstream-buffer"),
    ],
)
def test_a_jetstream_option_without_jetstream_is_refused_naming_it(flags: list[str], named: str) -> None:
    # (it would do nothing: the store is in memory or in --data-dir)
    with pytest.raises(ConfigError, match=f"{named} needs --jetstream"):
        config_from_args(build_parser().parse_args(flags), {})
    config_from_args(build_parser().parse_args([*flags, "--jetstream", "n1:4222"]), {})  # with it: taken


def test_a_flag_is_taken_only_as_written_never_as_the_start_of_another(capsys: pytest.CaptureFixture[str]) -> None:
    # argparse would read "--token X" as --token-file X (a secret taken for a path), and "--otlp-max 5" as whichever
    # flag began so; the environment's flags would then be added too, not seeing that the command line gave them
    for flags in (["--token", "s3cret"], ["--process-cap", "1MiB"]):
        with pytest.raises(SystemExit):
            build_parser().parse_args(flags)
        assert "unrecognized arguments" in capsys.readouterr().err
    for command in (["snapshot", "-o", "t.json", "--token", "s3cret", "URL"], ["sources", "--proc", "api", "URL"]):
        with pytest.raises(SystemExit):
            build_command_parser().parse_args(command)
        assert "unrecognized arguments" in capsys.readouterr().err


def test_the_memory_a_collector_can_have_is_the_least_of_the_machines_and_its_control_groups(tmp_path: Path) -> None:
    physical = memory_bytes(tmp_path)  # (no /proc/self/cgroup there: the machine's alone)
    assert physical is not None and physical > 2**20
    (tmp_path / "proc" / "self").mkdir(parents=True)
    (tmp_path / "proc" / "self" / "cgroup").write_text("4:cpu,memory:/outer/inner\n1:cpu:/\n0::/unified/group\n")

    def limit(path: str, value: int | str) -> None:
        place = tmp_path / "sys" / "fs" / "cgroup" / path
        place.parent.mkdir(parents=True, exist_ok=True)
        place.write_text(f"{value}\n")

    limit("unified/group/memory.max", "max")  # (cgroup v2, no limit)
    limit("memory/outer/inner/memory.limit_in_bytes", 2**63 - 4096)  # (v1's "no limit")
    assert memory_bytes(tmp_path) == physical
    limit("unified/memory.max", 2**21)  # a parent's limit holds its children
    assert memory_bytes(tmp_path) == 2**21
    limit("memory/outer/memory.limit_in_bytes", 2**20)
    assert memory_bytes(tmp_path) == 2**20
    # A capacity (and the incidents' quarter beside it) past what the machine has is refused for the in-memory store,
    # not for a data dir.
    with pytest.raises(ConfigError, match="more than the memory this collector can have"):
        CollectorConfig(capacity_bytes=physical // 5 * 4 + 2**20)
    assert CollectorConfig(capacity_bytes=physical + 1, data_dir=str(tmp_path)).capacity_bytes == physical + 1
