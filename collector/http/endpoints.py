"""The endpoints of the HTTP API (``api.py``), as ``GET /`` lists them.

GET /                               the endpoints, as JSON; in a browser (an HTML Accept), the web view (``page.py``)
GET /ui/{file}                      the web view's static files
GET /timeline[?filters]             the selected events as compact columnar JSON, for the web view
                                    (``export/timeline_columns.py``); gzip if accepted
HEAD /timeline[?filters]            the same headers, no work
GET /flamegraph[?filters]           the selected samples' stacks merged into one tree, for the web view's flame graph
                                    (``export/flame_graph.py``); gzip if accepted
GET /snapshot[?filters]             what is stored, in a format of ``export/formats.py`` (Chrome trace event JSON
                                    unless format= says another; format=parquet: one typed table, table=); ``query.py``
                                    says what it may select; gzip if accepted
HEAD /snapshot[?filters]            the same headers, no work
GET /spans[?filters&min_duration&max_duration&has_error&arg.KEY=VALUE&incident&sort&limit]
                                    the slowest (or newest) spans selected, as JSON (``search_api.py``); incident=ID:
                                    of that saved incident's snapshot, not the live store
GET /aggregates[?filters&by&...]    span durations per name and/or process (count, total, mean, p50, p90, p99,
                                    max), instants and messages by priority, as JSON (incident=ID: as /spans)
GET /sources[?pid&shown_pid&process&host]
                                    every process, thread and source, connected or not: what is held, rates, losses
GET /stats                          collector totals
GET /metrics                        Prometheus text format
POST /priority?priority=P[&timeline=T][&pid&shown_pid&process&host]
                                    set connected processes' message priority (SET_PRIORITY)
POST /clear[?pid&shown_pid&process&host]
                                    remove what is stored (of the processes selected), counted as cleared
POST /pop[?pid&shown_pid&process&host]
                                    what is stored as Chrome JSON, and removed (Gecko's PopMarkers)
GET /stream[?filters&grace]         a live tail: events stored from now on, as Server-Sent Events
GET /healthz                        liveness and a few gauges, as JSON
GET /readyz                         readiness: 200 while the store takes events, else 503 with the reason
GET /incidents[?rule&status&since&until&limit]
                                    pending, saved and failed incidents' records, newest first (``incidents_api.py``)
GET /incidents/{id}[?format&filters] a saved incident's snapshot, in a snapshot format or the web view's columns
                                    (``timeline``), of what the filters of /snapshot select; gzip if accepted;
                                    409 and Retry-After while it is pending; format=record: its record
HEAD /incidents/{id}[?format&filters] the same headers, no work
DELETE /incidents/{id}              remove an incident
POST /incidents?reason=R[&scope&before&after&pid&shown_pid&process&host&trace_id]
                                    take an incident now (``incident_post.py``), its args a JSON object in the body:
                                    202 with its id
"""

from __future__ import annotations

from typing import Final

from ringtrace.collector.export.formats import format_help

__all__ = ["ENDPOINTS"]

#: What ``GET /`` lists.
ENDPOINTS: Final[list[dict[str, str]]] = [
    {"method": "GET", "path": "/snapshot", "does": f"the store in a format: {format_help()}; filters; table (parquet)"},
    {"method": "HEAD", "path": "/snapshot", "does": "checks a snapshot query; no work"},
    {
        "method": "GET",
        "path": "/spans",
        "does": (
            "the slowest (sort=start: newest) spans; filters, min/max_duration, has_error, arg.KEY, sort, limit; "
            "incident=ID: a saved incident's"
        ),
    },
    {
        "method": "GET",
        "path": "/aggregates",
        "does": (
            "span durations by=name|process|name,process: count, total, p50, p90, p99, max; instants, messages; "
            "incident=ID: a saved incident's"
        ),
    },
    {"method": "GET", "path": "/timeline", "does": "the selected events as compact columns, for the web view; filters"},
    {"method": "HEAD", "path": "/timeline", "does": "checks a timeline query; no work"},
    {
        "method": "GET",
        "path": "/flamegraph",
        "does": "the selected samples' stacks as one tree, for the web view; filters (limit: samples)",
    },
    {"method": "GET", "path": "/sources", "does": "every process, thread and source: held, rates, losses"},
    {"method": "GET", "path": "/stats", "does": "collector totals"},
    {"method": "GET", "path": "/metrics", "does": "Prometheus text format"},
    {
        "method": "POST",
        "path": "/priority",
        "does": "set message priority: priority=P [timeline, pid, shown_pid, process, host]",
    },
    {"method": "POST", "path": "/clear", "does": "remove what is stored [pid, shown_pid, process, host]"},
    {"method": "POST", "path": "/pop", "does": "what is held as Chrome JSON, removed; open markers wait [pid, ...]"},
    {"method": "GET", "path": "/stream", "does": "a live tail as Server-Sent Events; filters, grace (past until)"},
    {"method": "GET", "path": "/healthz", "does": "liveness and gauges"},
    {"method": "GET", "path": "/readyz", "does": "readiness: 503 with the reason while the store takes no events"},
    {
        "method": "GET",
        "path": "/incidents",
        "does": "pending, saved and failed incidents, newest first [rule, status, since, until, limit]",
    },
    {
        "method": "GET",
        "path": "/incidents/{id}",
        "does": "an incident's snapshot: formats of /snapshot, timeline; filters; format=record: its record",
    },
    {"method": "DELETE", "path": "/incidents/{id}", "does": "remove an incident"},
    {
        "method": "POST",
        "path": "/incidents",
        "does": (
            "take an incident now: reason [scope, before, after, pid, shown_pid, process, host, trace_id]; "
            "body: args (JSON)"
        ),
    },
]
