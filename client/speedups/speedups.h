/* The recording hot path, in C (ringtrace.client._speedups): what the files of this extension share.

Optional: when this module is not built (no compiler at install time, a platform it does not support) or is turned
off with RINGTRACE_PURE_PYTHON=1, ringtrace runs the pure-Python recorder (recorder.py). That defines the behaviour; the
tests hold both to the same results.

What it does, and why it is safe to do it this way:

- RecorderCore is the base class of Timeline: scope() and instant() in C. An event is RECORD_FIELDS (5) values
  appended to the recording thread's flat buffer list, as in the Python twin. The buffer of the last thread that
  recorded is cached (keyed by PyThreadState_GetID, which is never reused within an interpreter); any other thread
  asks the Python side, Timeline._thread_events(). _forget_recorders() drops the cache whenever the Python side
  changes its state (listeners, close, fork), and a generation counter keeps an answer computed across such a change
  from being cached.
- Whether an asyncio loop runs (a task's events go to its lane) is read where asyncio keeps it, as configure()
  checks: the thread state dict (CPython 3.11 and 3.12: a thread with nothing there runs none; where something is
  there, asyncio is asked), or the thread state itself (3.13). On other versions asyncio is asked.
- An event lands whole or not at all: every object it needs is allocated first (allocation may run the garbage
  collector, hence Python code, hence another thread), then the five values go into the list with no allocation and
  no Python code in between, so the flusher's drain never sees part of an event.
- A buffer holds at most the timeline's max_buffered_events: the list's own size is the count, checked as the event
  is appended, so a thread that outruns the flusher has what does not fit refused and counted (unrecorded), as the
  Python twin does, instead of growing its buffer until the flusher's next pass.
- Timestamps are CLOCK_MONOTONIC in ns, which is what time.monotonic_ns() reads on the platforms this builds on;
  where the kernel's clocksource is the TSC, they are the TSC turned into those ns as it is read (recorder_clock.c).
- instant() keeps its keyword arguments as a Keywords (the call's names tuple and values, one object), not as the
  dict the Python twin records: the packers write it as that dict's map, and Python code reads the dict through
  as_dict() (keyword_args.py). A run list take_runs() makes (while the flusher holds it: tracked() again
  for a listener that may keep it), and a message's tuple of values that hold no references, are untracked by the
  cyclic collector, which would otherwise visit them at every pass.
- take_runs() moves a buffer's first values into run lists by copying pointers (no reference count changes).
- The packers, and the Keywords type, are the wire package's (ringtrace.wire._packer, wire/packer/): this module
  takes Keywords from there at its import.

The files, one job each: recorder_clock.c (the clock), buffers.c (a buffer's recording side), first_lane.c (a new
task's lane taken in C), span_begin.c (a span of a trace begun), server_span.c (a span of a trace opened
and closed, a request's server span), running_loop.c (the running asyncio loop,
configure()), recorder_core.c, scope.c, message.c and traced.c (the types), runs.c (the flusher's side of a buffer),
records.c (compact records), samples.c (the sampler's pass over the threads), module.c (the module). */

#ifndef RINGTRACE_SPEEDUPS_H
#define RINGTRACE_SPEEDUPS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#if defined(_WIN32) || defined(__APPLE__) || defined(__hpux)
#error "time.monotonic_ns() is not CLOCK_MONOTONIC here; ringtrace uses its pure-Python recorder"
#endif
#ifdef Py_GIL_DISABLED
#error "the recorder relies on the GIL; ringtrace uses its pure-Python recorder on free-threaded builds"
#endif

#include "wire_constants.h"
#include "keywords.h"
#include "tsc_clock.h"

/* The names first_lane.c reads on the Python side's objects, interned once (module.c). */
typedef enum {
    LANE_LOCK,        /* the timeline's _lock */
    LANE_TRACKS,      /* ...its _tracks */
    LANE_TAKING,      /* Tracks.taking_lane */
    LANE_TASK,        /* Lane.task */
    LANE_BUFFER,      /* Lane.buffer */
    LANE_LOOP,        /* Lane.loop */
    LANE_HAD,         /* Lane.had (and Had.on: str_on) */
    LANE_OWNER,       /* TrackBuffer.owner */
    LANE_DONE,        /* Task.done */
    LANE_ACQUIRE,     /* the lock's acquire... */
    LANE_RELEASE,     /* ...and release */
    LANE_NAMES
} LaneName;

/* The properties of aiohttp's a server span reads (server_span.c: read_as_aiohttp): a request's path and match_info,
   the match info's route, a response's status. */
typedef enum { READ_PATH, READ_MATCH_INFO, READ_ROUTE, READ_STATUS, AIOHTTP_READS } AiohttpRead;

/* The recorder's clock (recorder_clock.c): CLOCK_MONOTONIC ns, read from the TSC where use_tsc is set, by the line
   through the last anchor at the rate measured between two earlier ones. */
typedef struct {
    int64_t anchor_ticks, anchor_ns; /* the last anchor: read again once `refresh_ticks` ticks past it */
    uint64_t refresh_ticks;
    uint64_t ns_per_tick_q32;        /* ns per tick, times 2^32; since < refresh_ticks keeps the product in 64 bits */
    int64_t last_ns;                 /* the latest time handed out: none after it is earlier */
    TscAnchor rate_from;             /* where the next measure of the rate starts */
    int64_t calibrate_at_ns;         /* the monotonic clock's reading at which the first rate is measured; 0: done */
    int use_tsc;
} RecorderClock;

/* Everything the module keeps is per module object, so per interpreter: a sub-interpreter that imports ringtrace
   configures its own module, and the main interpreter's recorder goes on with what it configured. */
typedef struct {
    PyTypeObject *recorder_core_type, *scope_type, *null_scope_type, *message_type, *traced_type;
    PyTypeObject *keywords_type; /* ringtrace.wire._packer.Keywords, taken from there at import */
    PyTypeObject *record_buffer_type, *segment_type; /* records.c */
    PyObject *labels;    /* records.c: the table of labels compact records index (a list, append only)... */
    PyObject *label_ids; /* ...and each label's index there (a dict) */
    PyObject *null_scope;       /* the NullScope of every scope() that keeps nothing: it holds no state */
    PyObject *get_running_loop; /* asyncio.events._get_running_loop; NULL until configure() */
    PyObject *str_running_loop; /* the key of the running loop in asyncio's thread state dict (see running_loop) */
    int running_loop_in_dict;   /* configure() saw asyncio keep the running loop under that key */
    int running_loop_in_slot;   /* 3.13: configure() saw asyncio keep it in the thread state (see running_loop) */
    PyObject *probe_kept;       /* what configure()'s probes took out of their thread's dict (see probe_loop_key) */
    PyObject *loop_holder_type; /* 3.11: the type of asyncio's holder of the running loop, read here (running_loop) */
    PyObject *loop_free_dict;   /* the thread state dict last seen without a running loop (compared, never used)... */
    uint64_t loop_free_version; /* ...as it was then (see running_loop) */
    PyObject *wake;             /* FLUSHER.wake: a buffer is half full */
    PyObject *current_tasks;    /* asyncio's running task of each loop (asyncio.tasks._current_tasks), or NULL */
    PyObject *c_task_type, *c_task_get_name; /* first_lane.c: _asyncio.Task and its get_name (no Python code runs) */
    PyObject *str_events;       /* "events": a track buffer's list */
    PyObject *str_lane_events;  /* "_lane_events": the slow path of a task with no buffer yet */
    PyObject *span_kind;        /* model.SPAN */
    PyObject *instant_kind;     /* model.INSTANT */
    PyObject *room;             /* (None,) * RECORD_FIELDS: what a buffer grows by */
    PyObject *str_thread_events, *str_task_events, *str_exception, *str_name, *str_kind_id, *str_label,
        *str_not_an_event, *str_on, *str_marker, *str_thread_records;
    /* samples.c: a SampledThread's attributes, a source's recording and a sink's extend; "" (no running task) */
    PyObject *str_thread, *str_track, *str_clock, *str_cpu, *str_stack, *str_recording, *str_extend, *empty_name,
        *str_intern_walk;
    /* runs.c, first_lane.c: a task's get_name; the args' "task", as_dict; "_asyncio" (is_c_task) */
    PyObject *str_get_name, *str_task, *str_as_dict, *str_c_asyncio;
    PyObject *lane_names[LANE_NAMES]; /* first_lane.c: the attribute and method names it reads (see LaneName) */
    /* span_begin.c, from configure_spans(): traceparent.SpanContext, trace_context._Active and _ACTIVE, Python's
       random.getrandbits; the args' keys, and 64 and 192 (the bits a child's draw takes, and a new trace's) */
    PyObject *span_context_type, *active_type, *active_var, *random_bits;
    PyObject *str_trace_id, *str_span_id, *str_parent_span_id, *str_kind, *int_64, *int_192, *int_sampled;
    /* server_span.c, from configure_open_span(): sys.modules and OpenTelemetry's module's name (in the program: the
       Python twin opens the span), trace_context's _ENDED_ELSEWHERE's dict, the kinds whose headers are read and
       written, and the Python side's extract, _current_span, inject, _ended_elsewhere and open_span */
    PyObject *modules, *otel_name, *ended_entries, *incoming, *outgoing, *extract, *current_span, *inject,
        *ended_elsewhere, *open_span_twin, *serving_twin;
    /* ...from configure_server_spans(): aiohttp_server's new_label and error_text */
    PyObject *new_label, *error_text;
    /* ...the names it reads and writes, "server", 500 */
    PyObject *str_path, *str_headers, *str_method, *str_response, *str_route, *str_traceparent, *str_match_info,
        *str_status, *str_error, *str_get, *str_enter, *str_exit, *str_scope_label, *str_traceback, *str_server,
        *int_500;
    /* ...from configure_aiohttp_reads(): aiohttp's own properties of those names (see AiohttpRead), and the
       attribute each one's getter returns; whether the first read through each found the same (1), another value
       (-1: read through the property from then on), or is still to come (0) */
    PyObject *aiohttp_property[AIOHTTP_READS], *aiohttp_attribute[AIOHTTP_READS];
    signed char aiohttp_read_same[AIOHTTP_READS];
    RecorderClock clock; /* per interpreter, as the GIL that guards it is */
} ModuleState;

/* The module's definition: a type finds its module (and so the state) by it. */
extern struct PyModuleDef speedups_module;

/* recorder_clock.c, the clock's slow paths: the anchor read again, the first rate measured (each returns the
   monotonic clock's ns as read); and its start, at the module's. */
#pragma GCC visibility push(hidden)
int64_t recorder_clock_reanchor(RecorderClock *clock);
int64_t recorder_clock_calibrate(RecorderClock *clock, int64_t now);
void recorder_clock_start(RecorderClock *clock);
#pragma GCC visibility pop

/* The time in ns, or -1 with OSError set (a clock that cannot be read: the event is counted as unrecorded). Never
   earlier than a time it returned before (in this interpreter: the GIL orders the reads), so that an end is never
   before its start, whichever anchor each was read by. */
static inline int
now_ns(ModuleState *state, int64_t *out)
{
    RecorderClock *clock = &state->clock;
    int64_t ns;
#if RT_TSC
    if (clock->use_tsc) {
        uint64_t since = (uint64_t)__rdtsc() - (uint64_t)clock->anchor_ticks; /* before the anchor: huge */
        ns = since < clock->refresh_ticks
                 ? clock->anchor_ns + (int64_t)((since * clock->ns_per_tick_q32) >> 32)
                 : recorder_clock_reanchor(clock);
    }
    else
#endif
    {
        ns = tsc_clock_monotonic_ns();
        if (ns < 0) {
            PyErr_SetFromErrno(PyExc_OSError);
            return -1;
        }
#if RT_TSC
        if (clock->calibrate_at_ns != 0 && ns >= clock->calibrate_at_ns) ns = recorder_clock_calibrate(clock, ns);
#endif
    }
    if (ns < clock->last_ns) ns = clock->last_ns;
    clock->last_ns = ns;
    *out = ns;
    return 0;
}

/* A thread's account of its compact records (records.c), one per track buffer (tracks.py). */
typedef struct {
    PyObject_HEAD
    Py_ssize_t held_bytes;   /* bytes allocated by this thread's segments not taken yet */
    Py_ssize_t extra_events; /* events its segments in the list hold past the one event's place each takes there (their
                                records less one each): what the list's bound counts beside the list's own events */
} RecordBuffer;

/* Compact records in one piece of a thread's buffer list, where it takes one event's place (records.c). */
typedef struct {
    PyObject_HEAD
    RecordBuffer *owner; /* the thread's, once placed in its list; NULL while spare */
    unsigned char *data;
    Py_ssize_t size, capacity, count;
    int taken; /* out of the list: never written again, and no longer held by the owner */
} Segment;

/* The recording state of one Timeline (its C base class). */
typedef struct {
    PyObject_HEAD
    PyObject *module;        /* this module, whose state is `state`: held so that the state outlives the recorder */
    ModuleState *state;
    int cache_threads;       /* 0 while threading.local is not per thread state (gevent patched it) */
    uint64_t cached_thread;  /* PyThreadState_GetID of the thread whose buffer is cached; 0: none */
    PyObject *cached_events; /* that thread's buffer list, or Py_None: it keeps nothing */
    RecordBuffer *cached_records; /* that thread's account of compact records, or NULL: it records none */
    PyObject *spare;         /* a segment made before a lookup, for the next compact instant that needs one (records.c) */
    PyObject *last_label;    /* the label of the last compact instant... */
    Py_ssize_t last_label_index; /* ...and its index in the table of labels */
    Py_ssize_t max_record_bytes; /* bytes of compact records a thread may hold, set by the timeline */
    uint64_t generation;     /* bumped by _forget_recorders() */
    Py_ssize_t max_values;   /* values a buffer may hold: max_buffered_events * RECORD_FIELDS, set by the timeline */
    Py_ssize_t wake_values;  /* a buffer that held this many before an event wakes the flusher (about half full) */
    Py_ssize_t unrecorded;   /* events lost for want of memory or of room, since the last _take_unrecorded() */
    PyObject *task_buffers;  /* each recording task's track buffer (Tracks.task_buffers, set by the Python side) */
    uint64_t lanes_thread;   /* PyThreadState_GetID of the thread whose lanes are hinted; 0: none (first_lane.c) */
    PyObject *lanes;         /* those lanes (lanes.ThreadLanes.lanes, a list), or NULL */
    PyObject *task_switch;   /* tracks.TASK_SWITCH, given with the hint */
    Py_ssize_t first_fit;    /* lanes.FIRST_FIT, given with the hint: the lanes looked at in order */
    char listening;          /* the timeline has listeners (set by the Python side): else scope() and marker()
                                return at once */
} RecorderCore;

/* What scope() returns while something listens: one span from enter to exit. */
typedef struct {
    PyObject_HEAD
    PyObject *events; /* the buffer list, or NULL: keep nothing */
    PyObject *label;
    PyObject *args; /* dict or None */
    RecorderCore *core;
    int64_t start_ns;
    int entered; /* an exit without an enter records nothing */
} Scope;

/* Shared across the files; hidden: the extension's own, bound within it, never to a same-named symbol elsewhere. */
#pragma GCC visibility push(hidden)

/* The types' specs, made into types by module_exec (module.c). */
extern PyType_Spec core_spec, scope_spec, null_scope_spec, message_spec, traced_spec, record_buffer_spec, segment_spec;

/* records.c */
int record_compact_instant(RecorderCore *self, PyObject *label, PyObject *const *values, PyObject *names);
int record_compact_message(RecorderCore *self, long kind, PyObject *label, PyObject *const *values, Py_ssize_t n);
void segment_taken(PyObject *segment);

/* buffers.c */
PyObject *now_ns_object(ModuleState *state);
int append_event(ModuleState *state, PyObject *list, PyObject *values[RECORD_FIELDS], Py_ssize_t limit);
PyObject *current_events(RecorderCore *self);
int count_unrecorded(Py_ssize_t *counter);
PyObject *unrecorded(RecorderCore *self);
int wake_flusher(RecorderCore *self);
PyObject *record_instant(RecorderCore *self, PyObject *kind, PyObject *label, PyObject *stamp, PyObject *args);

/* first_lane.c */
PyObject *first_lane_events(RecorderCore *self, PyObject *task, PyObject *loop);
PyObject *core_hint_lanes(RecorderCore *self, PyObject *const *args, Py_ssize_t nargs);

/* recorder_clock.c */
PyObject *module_clock_ns(PyObject *module, PyObject *Py_UNUSED(ignored));
PyObject *module_clock_source(PyObject *module, PyObject *Py_UNUSED(ignored));
PyObject *module_clock_offset(PyObject *module, PyObject *Py_UNUSED(ignored));

/* running_loop.c */
PyObject *running_loop(ModuleState *state);
PyObject *configure(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
PyObject *module_running_loop(PyObject *module, PyObject *Py_UNUSED(ignored));

/* span_begin.c */
PyObject *configure_spans(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
PyObject *begin_span(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
int is_serving(ModuleState *state);
PyObject *begin_span_of(ModuleState *state, PyObject *parent, PyObject *given, PyObject *kind, PyObject *otel_span,
                        int owned);

/* server_span.c */
PyObject *configure_open_span(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
PyObject *configure_server_spans(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
PyObject *configure_aiohttp_reads(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
PyObject *open_span(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
PyObject *close_span(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
PyObject *begin_server_span(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
PyObject *end_server_span(PyObject *module, PyObject *const *args, Py_ssize_t nargs);

/* scope.c (a Scope's __enter__ and __exit__, called as they are by the server spans: server_span.c) */
PyObject *with_exception(ModuleState *state, PyObject *args, PyObject *exc_type);
PyObject *scope_enter(Scope *self, PyObject *ignored);
PyObject *scope_exit(Scope *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *new_null_scope(PyTypeObject *type);

/* runs.c */
PyObject *take_runs(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
PyObject *name_tasks(PyObject *module, PyObject *const *args, Py_ssize_t nargs);

/* samples.c */
PyObject *take_samples(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
/* stack_walk.c: a thread's stack as (key, codes) tuples (1; 0: no Python frame; -1: an exception set), its thread
   state by ident (NULL: none), and walk_stack(ident) for the tests. */
int walk_thread(PyThreadState *tstate, PyObject **key, PyObject **codes);
PyThreadState *thread_state_of(PyInterpreterState *interp, unsigned long ident);
PyObject *walk_stack(PyObject *module, PyObject *arg);
PyObject *run_passes(PyObject *module, PyObject *const *args, Py_ssize_t nargs);

#pragma GCC visibility pop

/* The values a buffer list holds as its bound counts them: its own, and RECORD_FIELDS more for each event its segments
   hold past their place (RecordBuffer.extra_events). A thread's segments are the first events of its list (records.c:
   one is placed only in an empty list or after another), so the first value says whether it holds any, and whose
   account counts them: no sum over the list. */
static inline Py_ssize_t
buffered_values(ModuleState *state, PyObject *events)
{
    Py_ssize_t n = Py_SIZE(events);
    if (n > 0) {
        PyObject *first = ((PyListObject *)events)->ob_item[0];
        if (Py_IS_TYPE(first, state->segment_type) && ((Segment *)first)->owner != NULL) {
            n += ((Segment *)first)->owner->extra_events * RECORD_FIELDS;
        }
    }
    return n;
}

/* An event just appended made `events` half full: wake the flusher (see wake_flusher). */
static inline int
wake_at_half(RecorderCore *self, PyObject *events)
{
    return buffered_values(self->state, events) == self->wake_values + RECORD_FIELDS ? wake_flusher(self) : 0;
}

#endif
