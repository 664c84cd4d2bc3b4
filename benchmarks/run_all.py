"""Run every benchmark, one fresh interpreter each, and print their tables: ``python benchmarks/run_all.py``.

Each benchmark runs in its own subprocess (ringtrace's connect() is process-wide, and one benchmark's heap must not
weigh on the next). ``--quick`` passes ``--quick`` on for a smoke test; ``--only NAME`` runs a subset.
Exits non-zero if any benchmark failed or timed out (a missed performance target is reported, not a failure).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCHMARKS = {
    "span": ("bench_span.py", 600),
    "model": ("bench_model.py", 600),
    "scope_floor": ("bench_scope_floor.py", 600),
    "client_memory": ("bench_client_memory.py", 600),
    "e2e": ("bench_e2e.py", 900),
    "args": ("bench_args.py", 900),
    "latency": ("bench_latency.py", 600),
    "reconnect": ("bench_reconnect.py", 300),
    "ingest": ("bench_ingest.py", 1200),
    "jetstream": ("bench_jetstream.py", 900),
    "ingest_cpu": ("bench_ingest_cpu.py", 600),
    "idle": ("bench_idle.py", 300),
    "export_json": ("bench_export_json.py", 300),
    "snapshot": ("bench_snapshot.py", 900),
    "query": ("bench_query.py", 900),
    "stream": ("bench_stream.py", 300),
    "convert": ("bench_convert.py", 600),
    "registry": ("bench_registry.py", 300),
    "fleet_switch": ("bench_fleet_switch.py", 600),
    "exit_wait": ("bench_exit_wait.py", 300),
    "clock": ("bench_clock.py", 300),
    "tables": ("bench_tables.py", 300),
    "table_memory": ("bench_table_memory.py", 300),
    "otlp": ("bench_otlp.py", 600),
    "flows": ("bench_flows.py", 600),
    "trace_scope": ("bench_trace_scope.py", 300),
    "logging": ("bench_logging.py", 600),
    "http_integrations": ("bench_http_integrations.py", 600),
    "trace_filter": ("bench_trace_filter.py", 600),
    "rule_match": ("bench_rule_match.py", 300),
    "incidents": ("bench_incidents.py", 900),
    "search": ("bench_search.py", 1500),
    "incident_objects": ("bench_incident_objects.py", 300),
    "web_view": ("bench_web_view.py", 900),
    "flame_graph": ("bench_flame_graph.py", 300),
    "call_packing": ("bench_call_packing.py", 300),
    "functions": ("bench_functions.py", 600),
    "function_delivery": ("bench_function_delivery.py", 900),
    "always_on": ("bench_always_on.py", 1500),
    "gc_integration": ("bench_gc_integration.py", 900),
    "lane_drain": ("bench_lane_drain.py", 300),
    "server_span_twins": ("bench_server_span_twins.py", 300),
    "collections": ("bench_collections.py", 900),
}


def run(cmd: list[str], timeout_s: float) -> int | str:
    """Run one benchmark in its own process group. On timeout: SIGINT it (its finally blocks stop its collector),
    then SIGKILL whatever is left in that group (Linux keeps a group's id from reuse while any member lives)."""
    child = subprocess.Popen(cmd, start_new_session=True)
    try:
        return child.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        print(f"timed out after {timeout_s}s; interrupting", flush=True)
        child.send_signal(signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(timeout=30)
        return "timeout"
    except BaseException:  # Ctrl-C here: pass it on, then clean up below
        child.send_signal(signal.SIGINT)
        raise
    finally:
        if child.returncode is None or child.returncode != 0:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(child.pid, signal.SIGKILL)
        child.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small N, few rounds: a smoke test")
    parser.add_argument("--only", action="append", choices=sorted(BENCHMARKS), help="run only these (repeatable)")
    args = parser.parse_args()

    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs; benchmarks: {', '.join(BENCHMARKS)}", flush=True)
    failed = []
    for name, (script, timeout_s) in BENCHMARKS.items():
        if args.only and name not in args.only:
            continue
        cmd = [sys.executable, str(HERE / script), *(["--quick"] if args.quick else [])]
        print(f"\n=== {script} ===", flush=True)
        started = time.perf_counter()
        code = run(cmd, timeout_s)
        print(f"--- {script}: exit {code}, {time.perf_counter() - started:.1f}s", flush=True)
        if code != 0:
            failed.append(script)
    if failed:
        print(f"\nFAILED: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
