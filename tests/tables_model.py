"""The typed tables (``format=parquet``) as a reader of a Chrome JSON snapshot of the same store would make them:
what the tables are checked against, column for column."""

from __future__ import annotations

import io
import json
from typing import Any

import pyarrow.parquet as pq


def parquet_rows(data: bytes) -> list[str]:
    """The rows of a table's Parquet file, each a JSON text with sorted keys (args parsed), sorted."""
    rows = pq.read_table(io.BytesIO(data)).to_pylist()
    for row in rows:
        if row.get("args") is not None:
            row["args"] = json.loads(row["args"])
    return sorted(json.dumps(row, sort_keys=True) for row in rows)


def chrome_table(doc: dict[str, Any], name: str) -> list[str]:
    """The rows table ``name`` holds, made of a Chrome JSON snapshot of the same store and query (as
    ``parquet_rows`` gives them)."""
    origin = doc["otherData"]["clock_origin_wall_ns"]
    meta = [e for e in doc["traceEvents"] if e["ph"] == "M"]
    processes = {e["pid"]: e["args"]["name"] for e in meta if e["name"] == "process_name"}
    hosts = {e["pid"]: e["args"]["labels"] for e in meta if e["name"] == "process_labels"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    rows = []
    for e in doc["traceEvents"]:
        where = {"process": processes[e["pid"]], "pid": e["pid"], "host": hosts[e["pid"]]}
        if e["ph"] == "M":
            continue
        where["track"] = threads[(e["pid"], e["tid"])]
        ts, args, category = round(e["ts"] * 1000) + origin, e.get("args"), e.get("cat")
        if name == "spans" and e["ph"] in "XB":
            dur = round(e["dur"] * 1000) if e["ph"] == "X" else None
            ids = {key: _text(args, key) for key in ("trace_id", "span_id", "parent_span_id")}
            end = None if dur is None else ts + dur
            row = {**where, "name": e["name"], "category": category, "start_ns": ts, "duration_ns": dur}
            rows.append({**row, "end_ns": end, "args": args, **ids})
        elif name == "instants" and (e["ph"] in "be" or (e["ph"] == "i" and category in (None, "incident"))):
            kind = {"b": "async_begin", "e": "async_end"}.get(e["ph"], "incident" if category else "instant")
            trace_id = _text(args, "trace_id")
            async_id = e.get("id")
            row = {**where, "name": e["name"], "kind": kind, "ts_ns": ts, "args": args, "trace_id": trace_id}
            rows.append({**row, "async_id": async_id})
        elif name == "messages" and e["ph"] == "i" and category not in (None, "incident"):
            values = {k: v for k, v in args.items() if k not in ("category", "priority")}
            row = {**where, "ts_ns": ts, "category": args["category"], "priority": args["priority"]}
            row |= {"text": e["name"], "args": values or None, "trace_id": _text(values, "trace_id")}
            rows.append(row)
        elif name == "counters" and e["ph"] == "C":
            for series, value in args.items():
                rows.append({**where, "name": e["name"], "ts_ns": ts, "series": series, "value": float(value)})
        elif name == "samples" and e["ph"] == "P":
            stack = unwound(doc.get("stackFrames", {}), str(e["sf"]) if "sf" in e else None)
            task = None if e["name"] == "sample" else e["name"]
            frames = [{"function": f, "file": file, "line": line} for f, file, line in stack]
            rows.append({**where, "ts_ns": ts, "task": task, "leaf": stack[-1][0] if stack else None, "stack": frames})
    return sorted(json.dumps(row, sort_keys=True) for row in rows)


def unwound(frames: dict[str, Any], leaf: str | None) -> list[tuple[str, str, int]]:
    stack = []
    while leaf is not None:
        entry = frames[leaf]
        file, line = entry["category"].rsplit(":", 1)
        stack.append((entry["name"], file, int(line)))
        leaf = entry.get("parent")
    return stack[::-1]


def _text(args: dict[str, Any] | None, key: str) -> str | None:
    """An id an event carries in its args: text, else none."""
    value = args.get(key) if args else None
    return value if isinstance(value, str) else None
