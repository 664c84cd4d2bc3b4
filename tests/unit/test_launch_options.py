"""Recording with no code change, its parts on their own: the option table (flags, environment twins, the docs'
table), ``ringtrace run``'s arguments (options stop at the program) and what the fleet switch reads of an
interpreter's command line."""

from __future__ import annotations

from pathlib import Path

import pytest
from ringtrace.client.integrations import INTEGRATIONS
from ringtrace.client.launch.fleet_switch import program_of
from ringtrace.client.launch.launch_options import (
    OPTIONS,
    LaunchSettings,
    options_block,
    options_markdown,
    settings_from,
)
from ringtrace.client.launch.program import Program
from ringtrace.client.launch.run_arguments import parse_run_arguments, run_help
from ringtrace.wire.errors import ConfigError

ROOT = Path(__file__).parents[2]


def test_the_docs_options_table_is_the_option_table() -> None:
    block = options_block((ROOT / "docs" / "recording-without-code-changes.md").read_text(encoding="utf-8"))
    assert block == options_markdown(), (
        "rewrite the block with ringtrace.client.launch.launch_options.with_options_markdown"
    )


def test_every_option_has_an_environment_twin_and_every_integration_a_switch() -> None:
    assert {option.variable for option in OPTIONS} == {
        "RINGTRACE_COLLECTOR",
        "RINGTRACE_PROCESS_NAME",
        "RINGTRACE_SAMPLE_HZ",
        "RINGTRACE_EXIT_TIMEOUT",
        "RINGTRACE_BATCH_INTERVAL",
        "RINGTRACE_INTEGRATIONS_OFF",
        "RINGTRACE_FUNCTIONS",
        "RINGTRACE_FUNCTIONS_INCLUDE",
        "RINGTRACE_FUNCTIONS_EXCLUDE",
        "RINGTRACE_FUNCTIONS_MIN_DURATION",
        "RINGTRACE_FUNCTIONS_MAX_DEPTH",
        "RINGTRACE_FUNCTIONS_BUILTINS",
        "RINGTRACE_FUNCTIONS_LIBRARY",
    }
    help_text = run_help()
    for integration in INTEGRATIONS:
        assert f"--no-{integration.name} " in help_text
        assert parse_run_arguments([f"--no-{integration.name}", "a.py"]).given == {"integrations_off": integration.name}


def test_a_flag_wins_over_its_variable_and_a_variable_over_the_default() -> None:
    environ = {"RINGTRACE_COLLECTOR": "env:1", "RINGTRACE_SAMPLE_HZ": "50", "RINGTRACE_PROCESS_NAME": "from-env"}
    assert settings_from({"collector": "flag:2"}, environ) == LaunchSettings("flag:2", "from-env", 50.0, frozenset())
    assert settings_from({}, {"RINGTRACE_COLLECTOR": "h:1"}) == LaunchSettings("h:1", None, 100.0, frozenset())
    assert settings_from({"sample_hz": "0"}, {"RINGTRACE_COLLECTOR": "h:1"}).sample_hz == 0
    environ = {"RINGTRACE_COLLECTOR": "h:1", "RINGTRACE_EXIT_TIMEOUT": "30"}
    assert settings_from({}, environ).exit_timeout == 30.0
    assert settings_from({"exit_timeout": "0.5"}, environ).exit_timeout == 0.5
    environ = {"RINGTRACE_COLLECTOR": "h:1", "RINGTRACE_BATCH_INTERVAL": "0.2"}
    assert settings_from({}, {"RINGTRACE_COLLECTOR": "h:1"}).batch_interval == 0.05
    assert settings_from({}, environ).batch_interval == 0.2
    assert settings_from({"batch_interval": "1e-3"}, environ).batch_interval == 0.001


def test_the_integrations_turned_off_add_up_from_the_flags_and_the_variable() -> None:
    settings = settings_from(
        {"collector": "h:1", "integrations_off": "gc"}, {"RINGTRACE_INTEGRATIONS_OFF": "logging, requests"}
    )
    assert settings.integrations_off == {"gc", "logging", "requests"}
    assert "gc" not in settings.integrations_on and "httpx" in settings.integrations_on


def test_children_get_the_settings_but_not_the_name() -> None:
    settings = LaunchSettings("h:1", "web", 25.0, frozenset({"gc", "logging"}))
    environment = settings.children_environment()
    assert environment["RINGTRACE_AUTO"] == "1"
    assert "RINGTRACE_PROCESS_NAME" not in environment
    assert settings_from({}, environment) == LaunchSettings("h:1", None, 25.0, frozenset({"gc", "logging"}))
    slower = LaunchSettings("h:1", None, 100.0, frozenset(), batch_interval=0.25, exit_timeout=7.0)
    assert settings_from({}, slower.children_environment()) == slower


@pytest.mark.parametrize(
    ("given", "environ", "said"),
    [
        ({"sample_hz": "fast"}, {}, "--sample-hz takes samples a second, 0 (off) to 1000, got 'fast'"),
        ({"sample_hz": "nan"}, {}, "--sample-hz takes samples a second, 0 (off) to 1000, got 'nan'"),
        ({"sample_hz": "1001"}, {}, "--sample-hz takes samples a second, 0 (off) to 1000, got '1001'"),
        ({"exit_timeout": "-1"}, {}, "--exit-timeout takes seconds, 0 to 3600, got '-1'"),
        ({}, {"RINGTRACE_EXIT_TIMEOUT": "soon"}, "RINGTRACE_EXIT_TIMEOUT takes seconds, 0 to 3600, got 'soon'"),
        ({"batch_interval": "0"}, {}, "--batch-interval takes seconds, 0.001 to 60, got '0'"),
        ({"batch_interval": "1e-9"}, {}, "--batch-interval takes seconds, 0.001 to 60, got '1e-9'"),
        ({"batch_interval": "61"}, {}, "--batch-interval takes seconds, 0.001 to 60, got '61'"),
        ({"batch_interval": "inf"}, {}, "--batch-interval takes seconds, 0.001 to 60, got 'inf'"),
        ({}, {"RINGTRACE_BATCH_INTERVAL": "-1"}, "RINGTRACE_BATCH_INTERVAL takes seconds, 0.001 to 60, got '-1'"),
        ({}, {"RINGTRACE_SAMPLE_HZ": "-5"}, "RINGTRACE_SAMPLE_HZ takes samples a second, 0 (off) to 1000, got '-5'"),
        ({"collector": "nowhere"}, {}, "--collector takes HOST:PORT (or several, separated by commas), got 'nowhere'"),
        ({}, {"RINGTRACE_INTEGRATIONS_OFF": "gc,nope"}, "RINGTRACE_INTEGRATIONS_OFF takes integration names"),
        ({"function_min_duration_ns": "5"}, {}, "--min-duration takes a duration: a number and a unit"),
        ({}, {"RINGTRACE_FUNCTIONS_MIN_DURATION": "fast"}, "RINGTRACE_FUNCTIONS_MIN_DURATION takes a duration"),
        ({"function_max_depth": "-1"}, {}, "--max-depth takes a number of calls, 0 (no limit) to 2147483647, got '-1'"),
        ({"function_max_depth": "9" * 20}, {}, "--max-depth takes a number of calls, 0 (no limit) to 2147483647"),
        ({"function_min_duration_ns": "9999999999999s"}, {}, "--min-duration takes a duration: a number and a unit"),
        ({}, {"RINGTRACE_FUNCTIONS": "maybe"}, "RINGTRACE_FUNCTIONS takes 1 or 0, got 'maybe'"),
        ({"function_include": ","}, {}, "--include takes module globs (app.*), separated by commas, got ','"),
    ],
)
def test_a_bad_value_names_its_flag_or_variable_and_the_value(
    given: dict[str, str], environ: dict[str, str], said: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        settings_from({"collector": "h:1", **given}, environ)
    assert str(refused.value).startswith(said)
    assert "\n" not in str(refused.value)


def test_function_tracing_flags_and_their_variables() -> None:
    given = parse_run_arguments(
        ["--functions", "--include", "app.*", "--include=lib*", "--exclude", "app.slow", "--min-duration", "250us",
         "--max-depth", "20", "--builtins", "--library", "app.py", "--functions"]
    ).given  # fmt: skip
    settings = settings_from(given, {"RINGTRACE_COLLECTOR": "h:1"})
    assert settings.functions and settings.function_builtins and settings.function_library
    assert settings.function_include == ("app.*", "lib*")
    assert settings.function_exclude == ("app.slow",)
    assert (settings.function_min_duration_ns, settings.function_max_depth) == (250_000, 20)
    assert settings_from({}, settings.children_environment()) == settings  # children trace alike
    from_environment = settings_from(
        {}, {"RINGTRACE_COLLECTOR": "h:1", "RINGTRACE_FUNCTIONS": "1", "RINGTRACE_FUNCTIONS_INCLUDE": "a*, b*"}
    )
    assert from_environment.functions and from_environment.function_include == ("a*", "b*")
    assert not settings_from({}, {"RINGTRACE_COLLECTOR": "h:1"}).functions


def test_no_collector_is_refused() -> None:
    with pytest.raises(ConfigError, match="no collector: give --collector HOST:PORT or set RINGTRACE_COLLECTOR"):
        settings_from({}, {})


@pytest.mark.parametrize(
    ("argv", "given", "program"),
    [
        (
            ["--collector", "h:1", "app.py", "--collector", "x"],
            {"collector": "h:1"},
            Program("app.py", None, ("--collector", "x")),
        ),
        (["--collector=h:1", "-m", "pkg.mod", "-m", "y"], {"collector": "h:1"}, Program(None, "pkg.mod", ("-m", "y"))),
        (["-mpkg", "a"], {}, Program(None, "pkg", ("a",))),
        (["--sample-hz", "0", "--", "-odd.py", "b"], {"sample_hz": "0"}, Program("-odd.py", None, ("b",))),
        (["--no-gc", "--no-logging", "app.py"], {"integrations_off": "gc,logging"}, Program("app.py", None, ())),
        (["--process-name", "web", "dir"], {"process_name": "web"}, Program("dir", None, ())),
    ],
)
def test_options_stop_at_the_program(argv: list[str], given: dict[str, str], program: Program) -> None:
    parsed = parse_run_arguments(argv)
    assert (parsed.given, parsed.program) == (given, program)


def test_a_program_is_named_after_its_script_or_module() -> None:
    assert Program("src/app.py", None, ()).name == "app.py"
    assert Program("tools/", None, ()).name == "tools"
    assert Program(None, "http.server", ()).name == "http.server"


@pytest.mark.parametrize(
    ("argv", "program"),
    [
        (["python", "app.py", "-m", "x"], ("script", "app.py")),
        (["python", "-u", "-W", "error", "-X", "dev", "app.py"], ("script", "app.py")),
        (["python", "-Wdefault", "-m", "pkg.mod", "a"], ("module", "pkg.mod")),
        (["python", "-mjson.tool"], ("module", "json.tool")),
        (
            ["python", "-B", "-c", "from multiprocessing.spawn import spawn_main"],
            ("command", "from multiprocessing.spawn import spawn_main"),
        ),
        (["python", "-uc", "pass"], ("command", "pass")),
        (["python", "--check-hash-based-pycs", "always", "app.py"], ("script", "app.py")),
        (["python", "--", "app.py"], ("script", "app.py")),
        (["python"], ("stdin", "")),
        (["python", "-"], ("stdin", "")),
    ],
)
def test_the_fleet_switch_reads_what_the_interpreter_runs(argv: list[str], program: tuple[str, str]) -> None:
    assert program_of(argv) == program
