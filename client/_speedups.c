/* The recording hot path and the stream encoder's inner loop, in C.

Optional: when this module is not built (no compiler at install time, a platform it does not support) or is turned
off with RINGTRACE_PURE_PYTHON=1, ringtrace runs the pure-Python twins in recorder.py and encoder.py. Those define the
behaviour; the tests hold both to the same results, byte for byte on the wire.

What it does, and why it is safe to do it this way:

- RecorderCore is the base class of Timeline: scope() and instant() in C. An event is RECORD_FIELDS (5) values
  appended to the recording thread's flat buffer list, as in the Python twin. The buffer of the last thread that
  recorded is cached (keyed by PyThreadState_GetID, which is never reused within an interpreter); any other thread
  asks the Python side, Timeline._thread_events(). _forget_recorders() drops the cache whenever the Python side
  changes its state (listeners, close, fork), and a generation counter keeps an answer computed across such a change
  from being cached.
- Whether an asyncio loop runs (a task's events go to its lane) is read from the thread state dict where asyncio keeps
  it (CPython 3.11 and 3.12, as configure() checks): a thread with nothing there runs none. Where something is there,
  and on other versions, asyncio is asked.
- An event lands whole or not at all: every object it needs is allocated first (allocation may run the garbage
  collector, hence Python code, hence another thread), then the five values go into the list with no allocation and
  no Python code in between, so the flusher's drain never sees part of an event.
- A buffer holds at most the timeline's max_buffered_events: the list's own size is the count, checked as the event
  is appended, so a thread that outruns the flusher has what does not fit refused and counted (unrecorded), as the
  Python twin does, instead of growing its buffer until the flusher's next pass.
- Timestamps are CLOCK_MONOTONIC in ns, which is what time.monotonic_ns() reads on the platforms this builds on.
- instant() keeps its keyword arguments as a Keywords (the call's names tuple and values, one object), not as the
  dict the Python twin records: the packers write it as that dict's map, and Python code reads the dict through
  as_dict() (keyword_args.py). A run list take_runs() makes (while the flusher holds it: tracked() again
  for a listener that may keep it), and a message's tuple of values that hold no references, are untracked by the
  cyclic collector, which would otherwise visit them at every pass.
- take_runs() moves a buffer's first values into run lists by copying pointers (no reference count changes), and
  pack_columns() writes the four integer columns of an EVENTS payload as msgpack, as msgpack-python would.
- pack_args() writes the args column the same way for the common shapes (no arguments, a map of text keys and flat
  values, a message's flat values), exactly as the Python path would normalise and pack them, and hands every other
  event's arguments to a Python function that does what the Python path does: the bytes agree either way.
- pack_events() writes a whole EVENTS frame (headers, columns, arguments) in one pass for a run whose events all
  have those common shapes and text labels, the same bytes as pack_columns() and pack_args() behind frames.py's
  headers, and gives up (None) at the first event of another shape, for those two to pack the run. */

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

#define RECORD_FIELDS 5

/* Everything the module keeps is per module object, so per interpreter: a sub-interpreter that imports ringtrace
   configures its own module, and the main interpreter's recorder goes on with what it configured. */
typedef struct {
    PyTypeObject *recorder_core_type, *scope_type, *null_scope_type, *message_type, *traced_type, *keywords_type;
    PyObject *null_scope;       /* the NullScope of every scope() that keeps nothing: it holds no state */
    PyObject *get_running_loop; /* asyncio.events._get_running_loop; NULL until configure() */
    PyObject *str_running_loop; /* the key of the running loop in asyncio's thread state dict (see running_loop) */
    int running_loop_in_dict;   /* configure() saw asyncio keep the running loop under that key */
    PyObject *probe_kept;       /* what configure()'s probes took out of their thread's dict (see probe_loop_key) */
    PyObject *loop_free_dict;   /* the thread state dict last seen without a running loop (compared, never used)... */
    uint64_t loop_free_version; /* ...as it was then (see running_loop) */
    PyObject *wake;             /* FLUSHER.wake: a buffer is half full */
    PyObject *span_kind;        /* model.SPAN */
    PyObject *instant_kind;     /* model.INSTANT */
    PyObject *room;             /* (None,) * RECORD_FIELDS: what a buffer grows by */
    PyObject *str_thread_events, *str_task_events, *str_exception, *str_name, *str_kind_id, *str_label,
        *str_not_an_event, *str_on, *str_marker;
} ModuleState;

static struct PyModuleDef speedups_module;

/* The time in ns, or -1 with OSError set (a clock that cannot be read: the event is counted as unrecorded). */
static inline int
now_ns(int64_t *out)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    *out = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
    return 0;
}

/* now_ns() as a new int, or NULL with an exception set. */
static PyObject *
now_ns_object(void)
{
    int64_t now;
    return now_ns(&now) < 0 ? NULL : PyLong_FromLongLong(now);
}

/* Append the five values of one event to `list`, all or nothing, unless it holds `limit` values already. Steals the
   references in `values` on success and on failure alike. Returns 0, or -1: an exception set, or none when the list
   was full. No allocation that could run Python code happens here: the caller allocated everything before. */
static int
append_event(ModuleState *state, PyObject *list, PyObject *values[RECORD_FIELDS], Py_ssize_t limit)
{
    PyListObject *l = (PyListObject *)list;
    Py_ssize_t n = Py_SIZE(l);
    int i;
    if (n >= limit) goto fail;
    /* In place when the list has room and would not shrink (list_resize's own rule), else through the list's own
       growth (a memory request only: no Python code), then in place. */
    if (!(n + RECORD_FIELDS <= l->allocated && n + RECORD_FIELDS >= (l->allocated >> 1))) {
        if (PyList_SetSlice(list, n, n, state->room) < 0) goto fail;
        for (i = 0; i < RECORD_FIELDS; i++) {
            Py_DECREF(Py_None); /* the placeholders' references */
        }
    }
    for (i = 0; i < RECORD_FIELDS; i++) {
        l->ob_item[n + i] = values[i];
    }
    Py_SET_SIZE(l, n + RECORD_FIELDS);
    return 0;
fail:
    for (i = 0; i < RECORD_FIELDS; i++) {
        Py_XDECREF(values[i]);
    }
    return -1;
}

/* -- RecorderCore ---------------------------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    PyObject *module;        /* this module, whose state is `state`: held so that the state outlives the recorder */
    ModuleState *state;
    int cache_threads;       /* 0 while threading.local is not per thread state (gevent patched it) */
    uint64_t cached_thread;  /* PyThreadState_GetID of the thread whose buffer is cached; 0: none */
    PyObject *cached_events; /* that thread's buffer list, or Py_None: it keeps nothing */
    uint64_t generation;     /* bumped by _forget_recorders() */
    Py_ssize_t max_values;   /* values a buffer may hold: max_buffered_events * RECORD_FIELDS, set by the timeline */
    Py_ssize_t wake_values;  /* a buffer that held this many before an event wakes the flusher (about half full) */
    Py_ssize_t unrecorded;   /* events lost for want of memory or of room, since the last _take_unrecorded() */
    char listening;          /* the timeline has listeners (set by the Python side): else scope() and marker()
                                return at once */
} RecorderCore;

/* `events` if it is what the slow paths return, a list or None; else NULL with TypeError set (consumes it). */
static PyObject *
checked_events(PyObject *events)
{
    if (events == Py_None || PyList_CheckExact(events)) return events;
    PyErr_Format(PyExc_TypeError, "a recorder's buffer must be a list or None, not %.100s", Py_TYPE(events)->tp_name);
    Py_DECREF(events);
    return NULL;
}

/* This thread's buffer (a new reference to a list, or to None: keep nothing), or NULL with an exception set. */
static PyObject *
thread_events(RecorderCore *self)
{
    uint64_t me = PyThreadState_GetID(PyThreadState_Get());
    int attempt;
    if (me == self->cached_thread && self->cached_events != NULL) {
        return Py_NewRef(self->cached_events);
    }
    for (attempt = 0; attempt < 8; attempt++) {
        uint64_t generation = self->generation;
        PyObject *events = PyObject_CallMethodNoArgs((PyObject *)self, self->state->str_thread_events);
        if (events == NULL || !checked_events(events)) return NULL;
        if (generation == self->generation) {
            if (self->cache_threads) {
                /* The cache is whole before the old entry is released: releasing it may run Python code. */
                PyObject *old = self->cached_events;
                self->cached_events = Py_NewRef(events);
                self->cached_thread = me;
                Py_XDECREF(old);
            }
            return events;
        }
        Py_DECREF(events); /* the state changed while Python ran: ask again */
    }
    PyErr_SetString(PyExc_RuntimeError, "the timeline's listeners kept changing while a thread looked up its buffer");
    return NULL; /* counted as unrecorded by the caller */
}

/* This thread's running asyncio loop, as asyncio.events._get_running_loop() answers (a new reference; None: none),
   or NULL with an exception set. Where configure() saw asyncio keep it in the thread state dict (CPython 3.11 and
   3.12, with asyncio's C module), a thread whose dict has nothing or None under the key runs no loop, and that is
   read without calling asyncio: the call, whose own cache misses in a thread that never ran a loop, was most of what
   finding the buffer cost. Anything else there (a loop, or 3.11's holder of one) is asyncio's to interpret: it is
   asked. */
static PyObject *
running_loop(ModuleState *state)
{
    if (state->running_loop_in_dict) {
        PyObject *dict = PyThreadState_GetDict(); /* borrowed; NULL: there is none, and none could be made */
        if (dict != NULL) {
            PyObject *held;
#if PY_VERSION_HEX < 0x030C0000
            /* Before 3.12 each state of each dict has a version of its own (PEP 509): the dict last seen without a
               loop, and not changed since, is still without one, and is not searched again. */
            if (dict == state->loop_free_dict && ((PyDictObject *)dict)->ma_version_tag == state->loop_free_version) {
                return Py_NewRef(Py_None);
            }
#endif
            held = PyDict_GetItemWithError(dict, state->str_running_loop); /* borrowed */
            if (held == NULL && PyErr_Occurred()) return NULL;
            if (held == NULL || held == Py_None) {
#if PY_VERSION_HEX < 0x030C0000
                state->loop_free_dict = dict;
                state->loop_free_version = ((PyDictObject *)dict)->ma_version_tag;
#endif
                return Py_NewRef(Py_None);
            }
        }
    }
    if (state->get_running_loop == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "ringtrace.client._speedups.configure() was not called");
        return NULL;
    }
    return PyObject_CallNoArgs(state->get_running_loop);
}

/* The buffer of the running task or thread (see thread_events). */
static PyObject *
current_events(RecorderCore *self)
{
    PyObject *loop = running_loop(self->state);
    if (loop == NULL) return NULL;
    if (loop == Py_None) {
        Py_DECREF(loop);
        return thread_events(self);
    }
    Py_DECREF(loop);
    PyObject *events = PyObject_CallMethodNoArgs((PyObject *)self, self->state->str_task_events);
    return events == NULL ? NULL : checked_events(events);
}

/* The keyword arguments of a vectorcall as a dict, or None when there are none. */
static PyObject *
keyword_dict(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    Py_ssize_t i, count = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    PyObject *dict;
    if (count == 0) return Py_NewRef(Py_None);
    dict = PyDict_New();
    if (dict == NULL) return NULL;
    for (i = 0; i < count; i++) {
        if (PyDict_SetItem(dict, PyTuple_GET_ITEM(kwnames, i), args[nargs + i]) < 0) {
            Py_DECREF(dict);
            return NULL;
        }
    }
    return dict;
}

/* -- Keywords ---------------------------------------------------------------------------------------------------- */

/* An instant's keyword arguments as its call passed them: the call's names (its kwnames tuple, one object for every
   call of a call site) and their values, in one allocation. A dict would cost the recording thread its table and a
   hash insert per key, and the flusher their walk and release. The encoder packs one as the map it stands for
   (pack_keywords); Python code reads that map through as_dict() (keyword_args.py). Tracked by the cyclic collector
   only when a value may lead back to it, as a tuple of such values is. */
typedef struct {
    PyObject_VAR_HEAD
    PyObject *names;     /* NULL only once cleared by the collector */
    PyObject *values[1]; /* Py_SIZE(self) of them */
} Keywords;

/* The keyword arguments of a vectorcall (`values` are its values past the positional ones) as a Keywords, or None
   when there are none; NULL with an exception set. */
static PyObject *
keywords_new(ModuleState *state, PyObject *const *values, PyObject *names)
{
    Py_ssize_t i, count = names == NULL ? 0 : PyTuple_GET_SIZE(names);
    Keywords *self;
    int atoms = 1;
    if (count == 0) return Py_NewRef(Py_None);
    self = PyObject_GC_NewVar(Keywords, state->keywords_type, count);
    if (self == NULL) return NULL;
    self->names = Py_NewRef(names);
    for (i = 0; i < count; i++) {
        self->values[i] = Py_NewRef(values[i]);
        atoms &= !PyObject_IS_GC(values[i]);
    }
    if (!atoms) PyObject_GC_Track(self);
    return (PyObject *)self;
}

static PyObject *
keywords_as_dict(Keywords *self, PyObject *Py_UNUSED(ignored))
{
    Py_ssize_t i;
    PyObject *dict = PyDict_New();
    if (dict == NULL || self->names == NULL) return dict;
    for (i = 0; i < Py_SIZE(self); i++) {
        if (self->values[i] != NULL &&
            PyDict_SetItem(dict, PyTuple_GET_ITEM(self->names, i), self->values[i]) < 0) {
            Py_DECREF(dict);
            return NULL;
        }
    }
    return dict;
}

static PyObject *
keywords_repr(Keywords *self)
{
    PyObject *dict = keywords_as_dict(self, NULL), *repr;
    if (dict == NULL) return NULL;
    repr = PyUnicode_FromFormat("Keywords(%R)", dict);
    Py_DECREF(dict);
    return repr;
}

static int
keywords_traverse(Keywords *self, visitproc visit, void *arg)
{
    Py_ssize_t i;
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->names);
    for (i = 0; i < Py_SIZE(self); i++) Py_VISIT(self->values[i]);
    return 0;
}

static int
keywords_clear(Keywords *self)
{
    Py_ssize_t i;
    Py_CLEAR(self->names);
    for (i = 0; i < Py_SIZE(self); i++) Py_CLEAR(self->values[i]);
    return 0;
}

static void
keywords_dealloc(Keywords *self)
{
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    keywords_clear(self);
    PyObject_GC_Del(self);
    Py_DECREF(type);
}

static PyMethodDef keywords_methods[] = {
    {"as_dict", (PyCFunction)keywords_as_dict, METH_NOARGS, "The map these arguments stand for, as a new dict."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot keywords_slots[] = {
    {Py_tp_doc, "An instant's keyword arguments as the C recorder keeps them (see keyword_args.py)."},
    {Py_tp_dealloc, keywords_dealloc},
    {Py_tp_traverse, keywords_traverse},
    {Py_tp_clear, keywords_clear},
    {Py_tp_repr, keywords_repr},
    {Py_tp_methods, keywords_methods},
    {0, NULL},
};

static PyType_Spec keywords_spec = {
    .name = "ringtrace.client._speedups.Keywords",
    .basicsize = offsetof(Keywords, values),
    .itemsize = sizeof(PyObject *),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = keywords_slots,
};

/* Tracing never raises into the host: a failure to record is counted, and the error dropped (none is set when the
   buffer was full). Returns 0 then; -1 for an exception that is not an Exception (KeyboardInterrupt from a signal
   handler that ran meanwhile), left raised. */
static int
count_unrecorded(Py_ssize_t *counter)
{
    if (PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_Exception)) return -1;
        PyErr_Clear();
    }
    (*counter)++;
    return 0;
}

static PyObject *
unrecorded(RecorderCore *self)
{
    if (count_unrecorded(&self->unrecorded) < 0) return NULL;
    Py_RETURN_NONE;
}

/* Wake the flusher: a buffer is half full, and is better drained before it fills than at the flusher's next
   interval. Python code runs here: never between a buffer's lookup and the append. Returns 0, or -1 for an exception
   the program must see (a failed wake is ignored: the flusher still comes at its interval). */
static int
wake_flusher(RecorderCore *self)
{
    PyObject *result;
    if (self->state->wake == NULL) return 0;
    result = PyObject_CallNoArgs(self->state->wake);
    if (result != NULL) {
        Py_DECREF(result);
        return 0;
    }
    if (!PyErr_ExceptionMatches(PyExc_Exception)) return -1;
    PyErr_Clear();
    return 0;
}

/* An event just appended made `events` half full: wake the flusher (see wake_flusher). */
static inline int
wake_at_half(RecorderCore *self, PyObject *events)
{
    return Py_SIZE(events) == self->wake_values + RECORD_FIELDS ? wake_flusher(self) : 0;
}

/* Record a point-in-time event in the buffer of the running task or thread. Steals `kind`, `label`, `stamp` (its start
   and its end: the encoder knows an instant by that identity) and `args`. The buffer is looked up last: nothing runs
   Python code between that and the append. Returns None, or NULL for an exception the program must see. */
static PyObject *
record_instant(RecorderCore *self, PyObject *kind, PyObject *label, PyObject *stamp, PyObject *args)
{
    PyObject *values[RECORD_FIELDS] = {kind, label, NULL, stamp, args};
    PyObject *events = current_events(self);
    if (events == NULL || events == Py_None) {
        Py_DECREF(kind);
        Py_DECREF(label);
        Py_DECREF(stamp);
        Py_DECREF(args);
        if (events == NULL) return unrecorded(self);
        Py_DECREF(events);
        Py_RETURN_NONE;
    }
    values[2] = Py_NewRef(stamp);
    if (append_event(self->state, events, values, self->max_values) < 0) {
        Py_DECREF(events);
        return unrecorded(self);
    }
    if (wake_at_half(self, events) < 0) {
        Py_DECREF(events);
        return NULL;
    }
    Py_DECREF(events);
    Py_RETURN_NONE;
}

typedef struct {
    PyObject_HEAD
    PyObject *events; /* the buffer list, or NULL: keep nothing */
    PyObject *label;
    PyObject *args; /* dict or None */
    RecorderCore *core;
    int64_t start_ns;
    int entered; /* an exit without an enter records nothing */
} Scope;

static PyObject *
core_scope(RecorderCore *self, PyObject *const *args, Py_ssize_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *events, *kwargs;
    Scope *scope;
    if (nargs != 1) {
        PyErr_Format(PyExc_TypeError, "scope() takes one positional argument, the label (%zd given)", nargs);
        return NULL;
    }
    if (!self->listening) return Py_NewRef(self->state->null_scope); /* not even a look for the buffer */
    events = current_events(self);
    if (events == NULL) {
        if (count_unrecorded(&self->unrecorded) < 0) return NULL;
        return Py_NewRef(self->state->null_scope); /* keeps nothing */
    }
    if (events == Py_None) { /* nothing listens: nothing to allocate either */
        Py_DECREF(events);
        return Py_NewRef(self->state->null_scope);
    }
    kwargs = keyword_dict(args, nargs, kwnames);
    if (kwargs == NULL) {
        Py_DECREF(events);
        if (count_unrecorded(&self->unrecorded) < 0) return NULL;
        return Py_NewRef(self->state->null_scope);
    }
    scope = PyObject_GC_New(Scope, self->state->scope_type);
    if (scope == NULL) { /* no object to return: MemoryError, as any call may raise */
        Py_DECREF(events);
        Py_DECREF(kwargs);
        return NULL;
    }
    scope->events = events;
    scope->label = Py_NewRef(args[0]);
    scope->args = kwargs;
    scope->core = (RecorderCore *)Py_NewRef(self);
    scope->start_ns = 0;
    scope->entered = 0;
    PyObject_GC_Track(scope);
    return (PyObject *)scope;
}

static PyObject *
core_instant(RecorderCore *self, PyObject *const *args, Py_ssize_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *stamp, *kwargs;
    if (nargs != 1) {
        PyErr_Format(PyExc_TypeError, "instant() takes one positional argument, the name (%zd given)", nargs);
        return NULL;
    }
    stamp = now_ns_object();
    if (stamp == NULL) return unrecorded(self);
    kwargs = keywords_new(self->state, args + nargs, kwnames);
    if (kwargs == NULL) {
        Py_DECREF(stamp);
        return unrecorded(self);
    }
    return record_instant(self, Py_NewRef(self->state->instant_kind), Py_NewRef(args[0]), stamp, kwargs);
}

/* tl.marker(...): nothing while the timeline has no listener, at the cost of a C call; else Timeline._marker (in
   Python: its arguments take checking). */
static PyObject *
core_marker(RecorderCore *self, PyObject *const *args, Py_ssize_t nargsf, PyObject *kwnames)
{
    PyObject *marker, *result;
    if (!self->listening) Py_RETURN_NONE;
    marker = PyObject_GetAttr((PyObject *)self, self->state->str_marker);
    if (marker == NULL) return NULL;
    result = PyObject_Vectorcall(marker, args, PyVectorcall_NARGS(nargsf), kwnames);
    Py_DECREF(marker);
    return result;
}

/* tl.push(event): (kind id, label, now, now, event); see events.py. */
static PyObject *
core_push(RecorderCore *self, PyObject *event)
{
    PyObject *type = (PyObject *)Py_TYPE(event), *kind, *label, *stamp;
    kind = PyObject_GetAttr(type, self->state->str_kind_id);
    label = kind == NULL ? NULL : PyObject_GetAttr(type, self->state->str_label);
    if (label == NULL || !PyLong_CheckExact(kind)) {
        Py_XDECREF(kind);
        Py_XDECREF(label);
        if (PyErr_Occurred() && !PyErr_ExceptionMatches(PyExc_Exception)) return NULL;
        PyErr_Clear();
        return PyObject_CallMethodOneArg((PyObject *)self, self->state->str_not_an_event, event); /* counted, warned */
    }
    stamp = now_ns_object();
    if (stamp == NULL) {
        Py_DECREF(kind);
        Py_DECREF(label);
        return unrecorded(self);
    }
    return record_instant(self, kind, label, stamp, Py_NewRef(event)); /* its id is given on the flusher */
}

/* Timeline._events_with_room(), for the recording methods written in Python (counter, marker, ...): the buffer of the
   running task or thread if it has room for one more event; None if it keeps nothing, or is full (the event is then
   counted as unrecorded). Wakes the flusher if the event will make it half full. */
static PyObject *
core_events_with_room(RecorderCore *self, PyObject *Py_UNUSED(ignored))
{
    Py_ssize_t held;
    PyObject *events = current_events(self);
    if (events == NULL) return unrecorded(self);
    if (events == Py_None) return events;
    held = Py_SIZE(events);
    if (held >= self->max_values) {
        Py_DECREF(events);
        self->unrecorded++;
        Py_RETURN_NONE;
    }
    if (held == self->wake_values && wake_flusher(self) < 0) {
        Py_DECREF(events);
        return NULL;
    }
    return events;
}

static PyObject *
core_forget_recorders(RecorderCore *self, PyObject *Py_UNUSED(ignored))
{
    self->generation++;
    self->cached_thread = 0;
    Py_CLEAR(self->cached_events);
    Py_RETURN_NONE;
}

static PyObject *
core_cache_threads(RecorderCore *self, PyObject *flag)
{
    int enabled = PyObject_IsTrue(flag);
    if (enabled < 0) return NULL;
    self->cache_threads = enabled;
    if (!enabled) {
        PyObject *old = self->cached_events;
        self->cached_thread = 0;
        self->cached_events = NULL;
        Py_XDECREF(old);
    }
    Py_RETURN_NONE;
}

static PyObject *
core_take_unrecorded(RecorderCore *self, PyObject *Py_UNUSED(ignored))
{
    Py_ssize_t count = self->unrecorded;
    self->unrecorded = 0;
    return PyLong_FromSsize_t(count);
}

static PyObject *
core_new(PyTypeObject *type, PyObject *Py_UNUSED(args), PyObject *Py_UNUSED(kwargs))
{
    PyObject *module = PyType_GetModuleByDef(type, &speedups_module); /* borrowed: the type holds it */
    RecorderCore *self;
    if (module == NULL) return NULL;
    self = (RecorderCore *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->module = Py_NewRef(module);
    self->state = PyModule_GetState(module);
    self->max_values = PY_SSIZE_T_MAX; /* until the timeline sets its bound */
    self->wake_values = PY_SSIZE_T_MAX - RECORD_FIELDS;
    return (PyObject *)self;
}

static int
core_traverse(RecorderCore *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->module);
    Py_VISIT(self->cached_events);
    return 0;
}

/* The module (and so `state`) is kept: a finalizer that runs meanwhile may still record. */
static int
core_clear(RecorderCore *self)
{
    self->cached_thread = 0;
    Py_CLEAR(self->cached_events);
    return 0;
}

static void
core_dealloc(RecorderCore *self)
{
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    core_clear(self);
    Py_CLEAR(self->module);
    type->tp_free((PyObject *)self);
    Py_DECREF(type);
}

static PyMethodDef core_methods[] = {
    {"scope", (PyCFunction)(void (*)(void))core_scope, METH_FASTCALL | METH_KEYWORDS,
     "scope(label, /, **args)\n--\n\nA context manager recording one span named label with args, from enter to exit."},
    {"instant", (PyCFunction)(void (*)(void))core_instant, METH_FASTCALL | METH_KEYWORDS,
     "instant(name, /, **args)\n--\n\nRecord a point-in-time event named name with args."},
    {"marker", (PyCFunction)(void (*)(void))core_marker, METH_FASTCALL | METH_KEYWORDS,
     "marker(name, phase='instant', /, *, ts_ns=None, stack=False, **details)\n--\n\n"
     "Record a Gecko-style marker (see Timeline._marker); nothing at all while the timeline has no listener."},
    {"push", (PyCFunction)core_push, METH_O,
     "push(event, /)\n--\n\nRecord a typed event (ringtrace.client.Event), with the time and an id unique in the process."},
    {"_events_with_room", (PyCFunction)core_events_with_room, METH_NOARGS,
     "The running task's or thread's buffer if it has room for one more event, else None (full: counted)."},
    {"_forget_recorders", (PyCFunction)core_forget_recorders, METH_NOARGS,
     "Drop the cached buffer: the Python side changed what threads record into."},
    {"_cache_threads", (PyCFunction)core_cache_threads, METH_O,
     "Whether to cache the buffer of the last thread that recorded (not while threads share a thread state)."},
    {"_take_unrecorded", (PyCFunction)core_take_unrecorded, METH_NOARGS,
     "Events lost for want of memory or of room in their buffer since the last call."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef core_members[] = {
    {"_max_buffered_values", T_PYSSIZET, offsetof(RecorderCore, max_values), 0,
     "Values one buffer may hold (max_buffered_events * RECORD_FIELDS); what does not fit is refused and counted."},
    {"_listening", T_BOOL, offsetof(RecorderCore, listening), 0, "Whether the timeline has listeners."},
    {"_wake_buffered_values", T_PYSSIZET, offsetof(RecorderCore, wake_values), 0,
     "Values a buffer holds when the next event wakes the flusher (about half of _max_buffered_values)."},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot core_slots[] = {
    {Py_tp_doc, "The recording methods of Timeline, in C."},
    {Py_tp_new, core_new},
    {Py_tp_dealloc, core_dealloc},
    {Py_tp_traverse, core_traverse},
    {Py_tp_clear, core_clear},
    {Py_tp_methods, core_methods},
    {Py_tp_members, core_members},
    {0, NULL},
};

static PyType_Spec core_spec = {
    .name = "ringtrace.client._speedups.RecorderCore",
    .basicsize = sizeof(RecorderCore),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = core_slots,
};

/* -- Scope --------------------------------------------------------------------------------------------------------- */

static PyObject *
scope_enter(Scope *self, PyObject *Py_UNUSED(ignored))
{
    if (self->events == NULL) return Py_NewRef(self); /* cleared by the garbage collector: keeps nothing */
    self->entered = now_ns(&self->start_ns) == 0;
    if (!self->entered && count_unrecorded(&self->core->unrecorded) < 0) return NULL;
    return Py_NewRef(self);
}

/* args with "exception" set to the exception type's name, as a new dict (a new reference), or NULL. */
static PyObject *
with_exception(ModuleState *state, PyObject *args, PyObject *exc_type)
{
    PyObject *dict = args == Py_None ? PyDict_New() : PyDict_Copy(args);
    PyObject *name;
    if (dict == NULL) return NULL;
    name = PyObject_GetAttr(exc_type, state->str_name);
    if (name == NULL && PyErr_ExceptionMatches(PyExc_Exception)) {
        PyErr_Clear();
        name = PyObject_Str(exc_type);
    }
    if (name == NULL || PyDict_SetItem(dict, state->str_exception, name) < 0) {
        Py_XDECREF(name);
        Py_DECREF(dict);
        return NULL;
    }
    Py_DECREF(name);
    return dict;
}

static PyObject *
scope_exit(Scope *self, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *values[RECORD_FIELDS], *start, *end, *arguments, *events;
    ModuleState *state;
    int64_t end_ns;
    int clock;
    if (self->events == NULL || !self->entered) Py_RETURN_FALSE; /* keeps nothing: loses nothing */
    clock = now_ns(&end_ns);
    state = self->core->state;
    end = clock < 0 ? NULL : PyLong_FromLongLong(end_ns);
    start = end == NULL ? NULL : PyLong_FromLongLong(self->start_ns);
    if (start == NULL) {
        arguments = NULL;
    }
    else if (nargs > 0 && args[0] != Py_None) {
        arguments = with_exception(state, self->args, args[0]);
    }
    else {
        arguments = Py_NewRef(self->args);
    }
    if (start == NULL || end == NULL || arguments == NULL) {
        Py_XDECREF(start);
        Py_XDECREF(end);
        Py_XDECREF(arguments);
        if (count_unrecorded(&self->core->unrecorded) < 0) return NULL;
        Py_RETURN_FALSE;
    }
    events = Py_NewRef(self->events);
    values[0] = Py_NewRef(state->span_kind);
    values[1] = Py_NewRef(self->label);
    values[2] = start;
    values[3] = end;
    values[4] = arguments;
    if (append_event(state, events, values, self->core->max_values) < 0) {
        if (count_unrecorded(&self->core->unrecorded) < 0) {
            Py_DECREF(events);
            return NULL;
        }
    }
    else if (wake_at_half(self->core, events) < 0) {
        Py_DECREF(events);
        return NULL;
    }
    Py_DECREF(events);
    Py_RETURN_FALSE;
}

static int
scope_traverse(Scope *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->events);
    Py_VISIT(self->label);
    Py_VISIT(self->args);
    Py_VISIT(self->core);
    return 0;
}

static int
scope_clear(Scope *self)
{
    Py_CLEAR(self->events);
    Py_CLEAR(self->label);
    Py_CLEAR(self->args);
    Py_CLEAR(self->core);
    return 0;
}

static void
scope_dealloc(Scope *self)
{
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    scope_clear(self);
    PyObject_GC_Del(self);
    Py_DECREF(type);
}

static PyMethodDef scope_methods[] = {
    {"__enter__", (PyCFunction)scope_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)(void (*)(void))scope_exit, METH_FASTCALL, NULL},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot scope_slots[] = {
    {Py_tp_doc, "Context manager that records one complete span when it exits."},
    {Py_tp_dealloc, scope_dealloc},
    {Py_tp_traverse, scope_traverse},
    {Py_tp_clear, scope_clear},
    {Py_tp_methods, scope_methods},
    {0, NULL},
};

static PyType_Spec scope_spec = {
    .name = "ringtrace.client._speedups.Scope",
    .basicsize = sizeof(Scope),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = scope_slots,
};

/* -- NullScope ---------------------------------------------------------------------------------------------------- */

/* What scope() returns when it keeps nothing (no listener, no buffer): one shared object, whose __enter__ and __exit__
   are builtin functions bound to it once and kept in its type, not methods. A `with` statement looks both up in the
   type and calls them: a method would be bound first, a new object for each lookup, two for each `with`. */

static PyObject *
null_scope_enter(PyObject *self, PyObject *Py_UNUSED(ignored))
{
    return Py_NewRef(self);
}

static PyObject *
null_scope_exit(PyObject *Py_UNUSED(self), PyObject *const *Py_UNUSED(args), Py_ssize_t Py_UNUSED(nargs))
{
    Py_RETURN_FALSE; /* keeps nothing: loses nothing, and lets any exception go on */
}

static PyMethodDef null_scope_enter_def = {"__enter__", (PyCFunction)null_scope_enter, METH_NOARGS, NULL};
static PyMethodDef null_scope_exit_def = {"__exit__", (PyCFunction)(void (*)(void))null_scope_exit, METH_FASTCALL,
                                          NULL};

/* The instance, its type, and the type's two functions bound to the instance are a cycle: the collector's to break. */
static int
null_scope_traverse(PyObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    return 0;
}

static void
null_scope_dealloc(PyObject *self)
{
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    PyObject_GC_Del(self);
    Py_DECREF(type);
}

static PyType_Slot null_scope_slots[] = {
    {Py_tp_doc, "What scope() returns when it keeps nothing: a context manager that records nothing."},
    {Py_tp_dealloc, null_scope_dealloc},
    {Py_tp_traverse, null_scope_traverse},
    {0, NULL},
};

static PyType_Spec null_scope_spec = {
    .name = "ringtrace.client._speedups.NullScope",
    .basicsize = sizeof(PyObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = null_scope_slots,
};

/* The one NullScope, with its __enter__ and __exit__ bound to it in its type (see above); NULL on error. */
static PyObject *
new_null_scope(PyTypeObject *type)
{
    PyObject *scope = PyObject_GC_New(PyObject, type), *enter = NULL, *exit = NULL;
    if (scope == NULL) return NULL;
    PyObject_GC_Track(scope);
    if ((enter = PyCFunction_New(&null_scope_enter_def, scope)) == NULL ||
        (exit = PyCFunction_New(&null_scope_exit_def, scope)) == NULL ||
        PyDict_SetItemString(type->tp_dict, "__enter__", enter) < 0 ||
        PyDict_SetItemString(type->tp_dict, "__exit__", exit) < 0) {
        Py_XDECREF(enter);
        Py_XDECREF(exit);
        Py_DECREF(scope);
        return NULL;
    }
    PyType_Modified(type); /* the type's attribute cache */
    Py_DECREF(enter);
    Py_DECREF(exit);
    return scope;
}

/* -- Message ------------------------------------------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    RecorderCore *core;
    PyObject *kind;    /* its KindSpec */
    PyObject *kind_id; /* kind.id */
    PyObject *label;   /* kind.name: the category */
    PyObject *sampling; /* a messages.Sampling while sampling may turn it on, else None */
    PyObject *weakrefs;
    int level;
    char enabled;
} Message;

static PyObject *
message_call(Message *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *tuple, *stamp;
    if (!self->enabled) {
        PyObject *on;
        int sampled;
        PyObject *sampling = self->sampling;
        if (sampling == Py_None) Py_RETURN_NONE;
        Py_INCREF(sampling); /* another thread may replace it while on() runs */
        on = PyObject_CallMethodNoArgs(sampling, self->core->state->str_on);
        Py_DECREF(sampling);
        sampled = on == NULL ? -1 : PyObject_IsTrue(on);
        Py_XDECREF(on);
        if (sampled < 0) return unrecorded(self->core);
        if (!sampled) Py_RETURN_NONE;
    }
    /* Values are positional; named ones are kept after them rather than refused (as the Python recorder does). */
    nargs += kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    tuple = PyTuple_New(nargs);
    if (tuple != NULL) {
        Py_ssize_t i;
        int atoms = 1;
        for (i = 0; i < nargs; i++) {
            PyTuple_SET_ITEM(tuple, i, Py_NewRef(args[i]));
            atoms &= !PyObject_IS_GC(args[i]);
        }
        /* Values that hold no references (ints, floats, text: the usual ones) cannot be part of a cycle: the
           collector would untrack the tuple at its first pass, after visiting it there; untracked now, it never
           visits it. */
        if (atoms) PyObject_GC_UnTrack(tuple);
    }
    stamp = tuple == NULL ? NULL : now_ns_object();
    if (stamp == NULL) {
        Py_XDECREF(tuple);
        return unrecorded(self->core);
    }
    return record_instant(self->core, Py_NewRef(self->kind_id), Py_NewRef(self->label), stamp, tuple);
}

static PyObject *
message_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *kind, *core, *kind_id, *label, *priority_level = NULL, *module;
    int enabled;
    long level;
    Message *self;
    static char *names[] = {"kind", "timeline", "enabled", "level", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOpO", names, &kind, &core, &enabled, &priority_level)) return NULL;
    if ((module = PyType_GetModuleByDef(type, &speedups_module)) == NULL) return NULL;
    if (!PyObject_TypeCheck(core, ((ModuleState *)PyModule_GetState(module))->recorder_core_type)) {
        PyErr_SetString(PyExc_TypeError, "Message(kind, timeline, enabled, level): timeline must be a Timeline");
        return NULL;
    }
    level = PyLong_AsLong(priority_level);
    if (level == -1 && PyErr_Occurred()) return NULL;
    if (level < INT_MIN || level > INT_MAX) {
        PyErr_Format(PyExc_OverflowError, "Message(kind, timeline, enabled, level): level %ld does not fit an int",
                     level);
        return NULL;
    }
    kind_id = PyObject_GetAttrString(kind, "id");
    label = kind_id == NULL ? NULL : PyObject_GetAttrString(kind, "name");
    if (label == NULL) {
        Py_XDECREF(kind_id);
        return NULL;
    }
    self = (Message *)type->tp_alloc(type, 0);
    if (self == NULL) {
        Py_DECREF(kind_id);
        Py_DECREF(label);
        return NULL;
    }
    self->vectorcall = (vectorcallfunc)message_call;
    self->core = (RecorderCore *)Py_NewRef(core);
    self->kind = Py_NewRef(kind);
    self->kind_id = kind_id;
    self->label = label;
    self->sampling = Py_NewRef(Py_None);
    self->level = (int)level;
    self->enabled = (char)enabled;
    return (PyObject *)self;
}

static int
message_traverse(Message *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->core);
    Py_VISIT(self->kind);
    Py_VISIT(self->kind_id);
    Py_VISIT(self->label);
    Py_VISIT(self->sampling);
    return 0;
}

static int
message_clear(Message *self)
{
    Py_CLEAR(self->core);
    Py_CLEAR(self->kind);
    Py_CLEAR(self->kind_id);
    Py_CLEAR(self->label);
    Py_CLEAR(self->sampling);
    return 0;
}

static void
message_dealloc(Message *self)
{
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    if (self->weakrefs != NULL) PyObject_ClearWeakRefs((PyObject *)self);
    message_clear(self);
    type->tp_free((PyObject *)self);
    Py_DECREF(type);
}

static PyObject *
message_get_sampling(Message *self, void *Py_UNUSED(closure))
{
    return Py_NewRef(self->sampling);
}

static int
message_set_sampling(Message *self, PyObject *value, void *Py_UNUSED(closure))
{
    if (value == NULL) {
        PyErr_SetString(PyExc_AttributeError, "_sampling cannot be deleted");
        return -1;
    }
    Py_SETREF(self->sampling, Py_NewRef(value));
    return 0;
}

static PyObject *
message_repr(Message *self)
{
    return PyUnicode_FromFormat("Message(%R)", self->kind);
}

static PyMemberDef message_members[] = {
    {"enabled", T_BOOL, offsetof(Message, enabled), 0, "Whether calls record (the timeline sets it)."},
    {"level", T_INT, offsetof(Message, level), READONLY, "The rank of its priority (0: fatal)."},
    {"kind", T_OBJECT, offsetof(Message, kind), READONLY, "Its event kind."},
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(Message, vectorcall), READONLY, NULL},
    {"__weaklistoffset__", T_PYSSIZET, offsetof(Message, weakrefs), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef message_getset[] = {
    {"_sampling", (getter)message_get_sampling, (setter)message_set_sampling, "Sampling, or None.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot message_slots[] = {
    {Py_tp_doc, "A message defined with Timeline.message: call it with its values to log it (see messages.py)."},
    {Py_tp_new, message_new},
    {Py_tp_dealloc, message_dealloc},
    {Py_tp_traverse, message_traverse},
    {Py_tp_clear, message_clear},
    {Py_tp_call, PyVectorcall_Call},
    {Py_tp_members, message_members},
    {Py_tp_getset, message_getset},
    {Py_tp_repr, message_repr},
    {0, NULL},
};

static PyType_Spec message_spec = {
    .name = "ringtrace.client._speedups.Message",
    .basicsize = sizeof(Message),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = message_slots,
};

/* -- Traced -------------------------------------------------------------------------------------------------------- */

/* @traced on a plain function (traced.py): the call, and one span around it, as `with timeline.scope(label):` records
   it, without a Python frame, a Scope or the with statement's lookups. Binds as a method, as a function does. */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *function;
    PyObject *label;
    RecorderCore *core;
    PyObject *dict; /* what functools.update_wrapper copies (__name__, __doc__, __wrapped__...) */
} Traced;

/* The span of a call that began at `start_ns` and ended now, appended to `events` (NULL when `result` is: the call
   raised, and the span says with what). The raised exception, if any, is kept as it was. Returns 0, or -1 for an
   exception the program must see instead. */
static int
record_call(RecorderCore *core, PyObject *events, PyObject *label, int64_t start_ns, PyObject *result)
{
    ModuleState *state = core->state;
    PyObject *values[RECORD_FIELDS], *exc_type = NULL, *exc = NULL, *tb = NULL, *start, *end, *arguments;
    int64_t end_ns;
    int clock, failed = 0;
    if (result == NULL) PyErr_Fetch(&exc_type, &exc, &tb); /* restored below, whatever happens here */
    clock = now_ns(&end_ns);
    end = clock < 0 ? NULL : PyLong_FromLongLong(end_ns);
    start = end == NULL ? NULL : PyLong_FromLongLong(start_ns);
    arguments = start == NULL ? NULL : exc_type == NULL ? Py_NewRef(Py_None) : with_exception(state, Py_None, exc_type);
    if (start == NULL || end == NULL || arguments == NULL) {
        Py_XDECREF(start);
        Py_XDECREF(end);
        Py_XDECREF(arguments);
        failed = count_unrecorded(&core->unrecorded) < 0;
    }
    else {
        values[0] = Py_NewRef(state->span_kind);
        values[1] = Py_NewRef(label);
        values[2] = start;
        values[3] = end;
        values[4] = arguments;
        if (append_event(state, events, values, core->max_values) < 0) failed = count_unrecorded(&core->unrecorded) < 0;
        else failed = wake_at_half(core, events) < 0;
    }
    if (exc_type != NULL) {
        if (failed) { /* a KeyboardInterrupt meanwhile: it wins, the call's own exception is dropped */
            Py_DECREF(exc_type);
            Py_XDECREF(exc);
            Py_XDECREF(tb);
        }
        else {
            PyErr_Restore(exc_type, exc, tb);
        }
    }
    return failed ? -1 : 0;
}

static PyObject *
traced_call(Traced *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    RecorderCore *core = self->core;
    PyObject *events, *result;
    int64_t start_ns;
    if (!core->listening) return PyObject_Vectorcall(self->function, args, nargsf, kwnames);
    events = current_events(core);
    if (events == NULL) {
        if (count_unrecorded(&core->unrecorded) < 0) return NULL;
        return PyObject_Vectorcall(self->function, args, nargsf, kwnames);
    }
    if (events == Py_None || now_ns(&start_ns) < 0) {
        if (events != Py_None && count_unrecorded(&core->unrecorded) < 0) {
            Py_DECREF(events);
            return NULL;
        }
        Py_DECREF(events);
        return PyObject_Vectorcall(self->function, args, nargsf, kwnames);
    }
    result = PyObject_Vectorcall(self->function, args, nargsf, kwnames);
    if (record_call(core, events, self->label, start_ns, result) < 0) Py_CLEAR(result);
    Py_DECREF(events);
    return result;
}

static PyObject *
traced_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *function, *label, *core, *module;
    Traced *self;
    static char *names[] = {"function", "label", "timeline", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOO", names, &function, &label, &core)) return NULL;
    if ((module = PyType_GetModuleByDef(type, &speedups_module)) == NULL) return NULL;
    if (!PyObject_TypeCheck(core, ((ModuleState *)PyModule_GetState(module))->recorder_core_type) ||
        !PyCallable_Check(function)) {
        PyErr_SetString(PyExc_TypeError, "Traced(function, label, timeline): a callable, and a Timeline");
        return NULL;
    }
    self = (Traced *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->vectorcall = (vectorcallfunc)traced_call;
    self->function = Py_NewRef(function);
    self->label = Py_NewRef(label);
    self->core = (RecorderCore *)Py_NewRef(core);
    return (PyObject *)self;
}

/* As a function: an attribute of a class binds to the instance. */
static PyObject *
traced_get(PyObject *self, PyObject *instance, PyObject *Py_UNUSED(owner))
{
    if (instance == NULL || instance == Py_None) return Py_NewRef(self);
    return PyMethod_New(self, instance);
}

static int
traced_traverse(Traced *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->function);
    Py_VISIT(self->label);
    Py_VISIT(self->core);
    Py_VISIT(self->dict);
    return 0;
}

static int
traced_clear(Traced *self)
{
    Py_CLEAR(self->function);
    Py_CLEAR(self->label);
    Py_CLEAR(self->core);
    Py_CLEAR(self->dict);
    return 0;
}

static void
traced_dealloc(Traced *self)
{
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    traced_clear(self);
    type->tp_free((PyObject *)self);
    Py_DECREF(type);
}

static PyObject *
traced_repr(Traced *self)
{
    return PyUnicode_FromFormat("<traced %R>", self->function);
}

/* Pickled as a function is: by reference, its module and qualified name (functools.update_wrapper copied them), so that
   multiprocessing takes it (Pool.map, ProcessPoolExecutor); copy.copy and copy.deepcopy give it back, as a function. */
static PyObject *
traced_reduce(Traced *self, PyObject *Py_UNUSED(ignored))
{
    PyObject *name = PyObject_GetAttrString((PyObject *)self, "__qualname__");
    if (name == NULL && PyErr_ExceptionMatches(PyExc_AttributeError)) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "cannot pickle traced %R: it has no __qualname__ to find it by", self->function);
    }
    return name;
}

static PyMethodDef traced_methods[] = {
    {"__reduce__", (PyCFunction)traced_reduce, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef traced_members[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(Traced, vectorcall), READONLY, NULL},
    {"__dictoffset__", T_PYSSIZET, offsetof(Traced, dict), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef traced_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot traced_slots[] = {
    {Py_tp_doc, "A function under @traced: each call is one span (see traced.py)."},
    {Py_tp_new, traced_new},
    {Py_tp_dealloc, traced_dealloc},
    {Py_tp_traverse, traced_traverse},
    {Py_tp_clear, traced_clear},
    {Py_tp_call, PyVectorcall_Call},
    {Py_tp_descr_get, traced_get},
    {Py_tp_members, traced_members},
    {Py_tp_methods, traced_methods},
    {Py_tp_getset, traced_getset},
    {Py_tp_repr, traced_repr},
    {0, NULL},
};

static PyType_Spec traced_spec = {
    .name = "ringtrace.client._speedups.Traced",
    .basicsize = sizeof(Traced),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_IMMUTABLETYPE |
             Py_TPFLAGS_METHOD_DESCRIPTOR,
    .slots = traced_slots,
};

/* -- take_runs ------------------------------------------------------------------------------------------------------ */

static PyObject *
take_runs(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *list, *runs;
    PyListObject *l;
    Py_ssize_t count, run_values, nruns, i, size;
    if (nargs != 3 || !PyList_CheckExact(args[0])) {
        PyErr_SetString(PyExc_TypeError, "take_runs(list, count, run_values)");
        return NULL;
    }
    list = args[0];
    if ((count = PyLong_AsSsize_t(args[1])) == -1 && PyErr_Occurred()) return NULL;
    if ((run_values = PyLong_AsSsize_t(args[2])) == -1 && PyErr_Occurred()) return NULL;
    if (count < 0 || run_values < 1) {
        PyErr_Format(PyExc_ValueError, "take_runs: count %zd, runs of %zd", count, run_values);
        return NULL;
    }
    if (count > PyList_GET_SIZE(list)) count = PyList_GET_SIZE(list); /* taken meanwhile: see below */
    l = (PyListObject *)list;
    for (;;) {
        nruns = count / run_values + (count % run_values != 0); /* (count + run_values - 1) could overflow */
        runs = PyList_New(nruns);
        if (runs == NULL) return NULL;
        for (i = 0; i < nruns; i++) {
            Py_ssize_t start = i * run_values;
            PyObject *run = PyList_New(count - start < run_values ? count - start : run_values);
            if (run == NULL) {
                Py_DECREF(runs);
                return NULL;
            }
            /* Untracked: the cyclic collector, which runs every few hundred allocations (a recording thread's,
               mostly), would otherwise visit every value of every run the flusher holds, at each pass until the run
               is handed over. A run is made here and dropped after its hand-over to the encoders; a listener that
               may keep it gets it tracked again (tracked(), in keyword_args.with_maps), so a cycle through it is
               collected. */
            PyObject_GC_UnTrack(run);
            PyList_SET_ITEM(runs, i, run);
        }
        /* Allocating may have run Python code: a finalizer that flushed drained this very buffer. Start again with
           what is left then (recording only appends, whole events; a drain takes whole events). */
        size = Py_SIZE(l);
        if (count <= size) break;
        Py_DECREF(runs); /* the run lists hold only NULL slots */
        count = size;
    }
    if (count == 0) return runs; /* an empty buffer's ob_item may be NULL: no pointer arithmetic on it */
    /* From here on nothing allocates or runs Python code. Ownership of the values moves into the run lists. */
    for (i = 0; i < nruns; i++) {
        PyListObject *run = (PyListObject *)PyList_GET_ITEM(runs, i);
        memcpy(run->ob_item, l->ob_item + i * run_values, Py_SIZE(run) * sizeof(PyObject *));
    }
    if (size > count) memmove(l->ob_item, l->ob_item + count, (size - count) * sizeof(PyObject *));
    Py_SET_SIZE(l, size - count);
    if (l->allocated > 2 * (size - count) + 1024) {
        /* Give back what a burst made the buffer take, as list_resize would (a plain memory request, no Python). */
        Py_ssize_t keep = (size - count) + 1024;
        PyObject **items = PyMem_Realloc(l->ob_item, keep * sizeof(PyObject *));
        if (items != NULL) {
            l->ob_item = items;
            l->allocated = keep;
        }
    }
    return runs;
}

/* -- pack_columns --------------------------------------------------------------------------------------------------- */

/* msgpack as msgpack-python writes it, through a cursor `p` into a buffer the caller sized. */
#define PUT1(p, b) (*(p)++ = (unsigned char)(b))
#define PUT2(p, v) (PUT1(p, (v) >> 8), PUT1(p, (v)))
#define PUT4(p, v) (PUT2(p, (v) >> 16), PUT2(p, (v)))
#define PUT8(p, v) (PUT4(p, (v) >> 32), PUT4(p, (v)))

/* An integer in its shortest form, unsigned for values >= 0. At most 9 bytes. */
static inline unsigned char *
put_int(unsigned char *p, int64_t v)
{
    uint64_t u = (uint64_t)v;
    if (v >= 0) {
        if (v < 0x80) PUT1(p, u);
        else if (v < 0x100) { PUT1(p, 0xcc); PUT1(p, u); }
        else if (v < 0x10000) { PUT1(p, 0xcd); PUT2(p, u); }
        else if (v < 0x100000000LL) { PUT1(p, 0xce); PUT4(p, u); }
        else { PUT1(p, 0xcf); PUT8(p, u); }
    }
    else {
        if (v >= -32) PUT1(p, u);
        else if (v >= -128) { PUT1(p, 0xd0); PUT1(p, u); }
        else if (v >= -32768) { PUT1(p, 0xd1); PUT2(p, u); }
        else if (v >= -2147483648LL) { PUT1(p, 0xd2); PUT4(p, u); }
        else { PUT1(p, 0xd3); PUT8(p, u); }
    }
    return p;
}

/* An array header. At most 5 bytes. */
static inline unsigned char *
put_array_header(unsigned char *p, Py_ssize_t n)
{
    uint64_t u = (uint64_t)n;
    if (n < 16) PUT1(p, 0x90 | u);
    else if (n < 0x10000) { PUT1(p, 0xdc); PUT2(p, u); }
    else { PUT1(p, 0xdd); PUT4(p, u); }
    return p;
}

/* Event i's value in column c of `records`, re-read each time: a string-table miss runs Python code. */
static PyObject *
record_value(PyObject *records, Py_ssize_t i, int c)
{
    Py_ssize_t index = i * RECORD_FIELDS + c;
    if (index >= PyList_GET_SIZE(records)) {
        PyErr_SetString(PyExc_RuntimeError, "pack_columns: the records changed while being packed");
        return NULL;
    }
    return PyList_GET_ITEM(records, index);
}

/* The value of an int (of any int type) of at most two digits, so within 60 bits: every kind, string id and timestamp
   the encoder reads, most argument values. 1 when read, 0 for PyLong_AsLongLongAndOverflow to read. A call less for
   each such int, four an event: read as CPython up to 3.11 lays an int out (digits of PyLong_SHIFT bits, their count
   signed in ob_size); later versions, whose layout changed, through their own reader of one-digit ints. */
static inline int
small_int64(PyObject *value, int64_t *out)
{
#if PY_VERSION_HEX < 0x030C0000
    const digit *digits = ((PyLongObject *)value)->ob_digit;
    switch (Py_SIZE(value)) {
    case 0: *out = 0; return 1;
    case 1: *out = (int64_t)digits[0]; return 1;
    case -1: *out = -(int64_t)digits[0]; return 1;
    case 2: *out = (int64_t)digits[0] | ((int64_t)digits[1] << PyLong_SHIFT); return 1;
    case -2: *out = -((int64_t)digits[0] | ((int64_t)digits[1] << PyLong_SHIFT)); return 1;
    default: return 0;
    }
#else
    if (!PyUnstable_Long_IsCompact((PyLongObject *)value)) return 0;
    *out = (int64_t)PyUnstable_Long_CompactValue((PyLongObject *)value);
    return 1;
#endif
}

static int
as_int64(PyObject *value, const char *column, int64_t *out)
{
    if (!PyLong_Check(value) || PyBool_Check(value)) { /* msgpack packs a bool as true or false, not as an int */
        PyErr_Format(PyExc_TypeError, "pack_columns: %s must be an int, got %.100s", column, Py_TYPE(value)->tp_name);
        return -1;
    }
    if (small_int64(value, out)) return 0;
    /* Not PyLong_AsLongLong: it converts values past 2**30 (every timestamp) byte by byte. */
    int overflow;
    long long result = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (overflow) {
        PyErr_Format(PyExc_OverflowError, "pack_columns: %s does not fit 64 bits", column);
        return -1;
    }
    *out = result;
    return (result == -1 && PyErr_Occurred()) ? -1 : 0;
}

/* The string id of `label` in `table` (a StringTable: a dict whose __missing__ assigns ids). Returns 1 for an id the
   table holds (the next event with this label gets the same), 0 for one __missing__ gave (it counts each lookup that
   finds the table full: look again next time), -1 on error. The caller holds a reference to `label`: its __hash__,
   __eq__ and __str__ run here. */
static int
string_id(PyObject *table, PyObject *label, int64_t *out)
{
    PyObject *id = PyDict_GetItemWithError(table, label);
    int result;
    if (id != NULL) {
        Py_INCREF(id);
        result = as_int64(id, "a string id", out);
        Py_DECREF(id);
        return result < 0 ? -1 : 1;
    }
    if (PyErr_Occurred()) return -1;
    id = PyObject_GetItem(table, label);
    if (id == NULL) return -1;
    result = as_int64(id, "a string id", out);
    Py_DECREF(id);
    return result;
}

static PyObject *
pack_columns(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *records, *table, *arg_column = NULL, *head = NULL, *result = NULL;
    Py_ssize_t n, i;
    int64_t *columns = NULL, *kinds, *names, *starts, *ends, first, last;
    PyObject *last_label = NULL; /* consecutive events mostly share a label: look it up once */
    int64_t last_id = 0;
    int any_args = 0;
    unsigned char *p;
    if (nargs != 2 || !PyList_CheckExact(args[0]) || !PyDict_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "pack_columns(records: list, table: StringTable)");
        return NULL;
    }
    records = args[0];
    table = args[1];
    Py_INCREF(records);
    n = PyList_GET_SIZE(records) / RECORD_FIELDS;
    if (n == 0 || PyList_GET_SIZE(records) % RECORD_FIELDS != 0) {
        PyErr_Format(PyExc_ValueError, "pack_columns: %zd values are not whole events", PyList_GET_SIZE(records));
        goto done;
    }
    columns = PyMem_Malloc(sizeof(int64_t) * 4 * n);
    if (columns == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    kinds = columns;
    names = columns + n;
    starts = columns + 2 * n;
    ends = columns + 3 * n;
    for (i = 0; i < n; i++) {
        PyObject *value;
        if ((value = record_value(records, i, 0)) == NULL || as_int64(value, "a kind", &kinds[i]) < 0) goto done;
        if ((value = record_value(records, i, 1)) == NULL) goto done;
        if (value != last_label) {
            int held;
            Py_INCREF(value);
            held = string_id(table, value, &last_id);
            if (held < 0) {
                Py_DECREF(value);
                goto done;
            }
            Py_XSETREF(last_label, held ? value : NULL);
            if (!held) Py_DECREF(value);
        }
        names[i] = last_id;
        if ((value = record_value(records, i, 2)) == NULL || as_int64(value, "a start", &starts[i]) < 0) goto done;
        if ((value = record_value(records, i, 3)) == NULL || as_int64(value, "an end", &ends[i]) < 0) goto done;
        if ((value = record_value(records, i, 4)) == NULL) goto done;
        any_args |= value != Py_None;
    }
    first = starts[0];
    last = ends[0];
    for (i = 1; i < n; i++) {
        if (starts[i] < first) first = starts[i];
        if (ends[i] > last) last = ends[i];
    }
    for (i = 0; i < n; i++) {
        int64_t unused;
        if (__builtin_sub_overflow(ends[i], starts[i], &unused) || __builtin_sub_overflow(starts[i], first, &unused)) {
            PyErr_SetString(PyExc_OverflowError, "pack_columns: an offset or duration does not fit 64 bits");
            goto done;
        }
    }
    /* 1 + 4 columns of (5-byte header + 9 bytes per value) + the args column when it is all nil. */
    head = PyBytes_FromStringAndSize(NULL, 1 + 5 * 5 + 9 * 4 * n + n);
    if (head == NULL) goto done;
    p = (unsigned char *)PyBytes_AS_STRING(head);
    p = put_array_header(p, 5);
    p = put_array_header(p, n);
    for (i = 0; i < n; i++) p = put_int(p, kinds[i]);
    p = put_array_header(p, n);
    for (i = 0; i < n; i++) p = put_int(p, names[i]);
    p = put_array_header(p, n);
    for (i = 0; i < n; i++) p = put_int(p, starts[i] - first);
    p = put_array_header(p, n);
    for (i = 0; i < n; i++) p = put_int(p, ends[i] - starts[i]);
    if (any_args) {
        arg_column = PyList_New(n);
        if (arg_column == NULL) goto done;
        for (i = 0; i < n; i++) {
            PyObject *value = record_value(records, i, 4);
            if (value == NULL) goto done;
            PyList_SET_ITEM(arg_column, i, Py_NewRef(value));
        }
    }
    else {
        p = put_array_header(p, n);
        memset(p, 0xc0, n);
        p += n;
        arg_column = Py_NewRef(Py_None);
    }
    if (_PyBytes_Resize(&head, (char *)p - PyBytes_AS_STRING(head)) < 0) goto done;
    result = Py_BuildValue("(OLLO)", head, (long long)first, (long long)last, arg_column);
done:
    PyMem_Free(columns);
    Py_XDECREF(last_label);
    Py_XDECREF(head);
    Py_XDECREF(arg_column);
    Py_DECREF(records);
    return result;
}

/* -- pack_args ------------------------------------------------------------------------------------------------------ */

/* What encoder.py's Python path normalises instead of packing as it is (model.MAX_ARG_ITEMS, model.MAX_ARG_TEXT;
   a test holds them equal): anything past these goes to Python. */
#define MAX_ARG_ITEMS 1000
#define MAX_ARG_TEXT 65536

/* A growing buffer of msgpack bytes. */
typedef struct {
    unsigned char *data;
    Py_ssize_t size, capacity;
} Packed;

/* Room for `more` bytes past the end; -1 (MemoryError set) when there is none to be had. Never runs Python code. */
static int
packed_reserve(Packed *out, Py_ssize_t more)
{
    Py_ssize_t capacity;
    unsigned char *data;
    if (out->capacity - out->size >= more) return 0;
    if (more > PY_SSIZE_T_MAX / 2 - out->size) {
        PyErr_NoMemory();
        return -1;
    }
    capacity = 2 * (out->size + more);
    data = PyMem_Realloc(out->data, (size_t)capacity);
    if (data == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    out->data = data;
    out->capacity = capacity;
    return 0;
}

/* An unsigned integer past INT64_MAX, as msgpack-python writes it (uint 64). */
static inline unsigned char *
put_uint64(unsigned char *p, uint64_t u)
{
    PUT1(p, 0xcf);
    PUT8(p, u);
    return p;
}

/* A str or bin header for `n` bytes (`str` 1 for text): at most 5 bytes. msgpack-python writes str 8 for text since
   use_bin_type is on. */
static inline unsigned char *
put_raw_header(unsigned char *p, Py_ssize_t n, int str)
{
    uint64_t u = (uint64_t)n;
    if (str && n < 32) PUT1(p, 0xa0 | u);
    else if (n < 0x100) { PUT1(p, str ? 0xd9 : 0xc4); PUT1(p, u); }
    else if (n < 0x10000) { PUT1(p, str ? 0xda : 0xc5); PUT2(p, u); }
    else { PUT1(p, str ? 0xdb : 0xc6); PUT4(p, u); }
    return p;
}

/* A map header. At most 5 bytes. */
static inline unsigned char *
put_map_header(unsigned char *p, Py_ssize_t n)
{
    uint64_t u = (uint64_t)n;
    if (n < 16) PUT1(p, 0x80 | u);
    else if (n < 0x10000) { PUT1(p, 0xde); PUT2(p, u); }
    else { PUT1(p, 0xdf); PUT4(p, u); }
    return p;
}

/* Text as msgpack-python packs it: 1 when written; 0 when it is for Python (text UTF-8 cannot encode, a lone
   surrogate: the Python path escapes it); -1 on error. */
static int
pack_text(Packed *out, PyObject *text)
{
    Py_ssize_t size;
    const char *utf8;
    if (PyUnicode_IS_COMPACT_ASCII(text)) { /* the usual case: its bytes are its UTF-8 */
        size = PyUnicode_GET_LENGTH(text);
        utf8 = (const char *)PyUnicode_DATA(text);
    }
    else utf8 = PyUnicode_AsUTF8AndSize(text, &size); /* may allocate (not an object); runs no Python code */
    if (utf8 == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError)) return -1;
        PyErr_Clear();
        return 0;
    }
    if (packed_reserve(out, 5 + size) < 0) return -1;
    unsigned char *p = put_raw_header(out->data + out->size, size, 1);
    memcpy(p, utf8, (size_t)size);
    out->size = (p - out->data) + size;
    return 1;
}

/* A value the Python path carries as it is, packed as msgpack-python packs it: None, a bool, an int of 64 bits, a
   float, text and bytes up to MAX_ARG_TEXT, each of exactly that type (a subclass may show itself otherwise). 1 when
   written; 0 when the value is for Python; -1 on error. */
static int
pack_flat(Packed *out, PyObject *value)
{
    unsigned char *p;
    if (PyUnicode_CheckExact(value)) {
        return PyUnicode_GET_LENGTH(value) > MAX_ARG_TEXT ? 0 : pack_text(out, value);
    }
    if (packed_reserve(out, 9) < 0) return -1;
    p = out->data + out->size;
    if (value == Py_None) PUT1(p, 0xc0);
    else if (value == Py_True) PUT1(p, 0xc3);
    else if (value == Py_False) PUT1(p, 0xc2);
    else if (PyLong_CheckExact(value)) {
        int overflow = 0;
        int64_t small;
        long long v = small_int64(value, &small) ? small : PyLong_AsLongLongAndOverflow(value, &overflow);
        if (overflow == 0) {
            if (v == -1 && PyErr_Occurred()) return -1;
            p = put_int(p, v);
        }
        else if (overflow > 0) {
            unsigned long long u = PyLong_AsUnsignedLongLong(value);
            if (u == (unsigned long long)-1 && PyErr_Occurred()) { /* past 64 bits: the Python path writes text */
                if (!PyErr_ExceptionMatches(PyExc_OverflowError)) return -1;
                PyErr_Clear();
                return 0;
            }
            p = put_uint64(p, u);
        }
        else return 0;
    }
    else if (PyFloat_CheckExact(value)) {
        PUT1(p, 0xcb);
        if (PyFloat_Pack8(PyFloat_AS_DOUBLE(value), (char *)p, 0) < 0) return -1;
        p += 8;
    }
    else if (PyBytes_CheckExact(value)) {
        Py_ssize_t size = PyBytes_GET_SIZE(value);
        if (size > MAX_ARG_TEXT) return 0;
        if (packed_reserve(out, 5 + size) < 0) return -1;
        p = put_raw_header(out->data + out->size, size, 0);
        memcpy(p, PyBytes_AS_STRING(value), (size_t)size);
        p += size;
    }
    else return 0;
    out->size = p - out->data;
    return 1;
}

/* A map of text keys and flat values (see pack_flat), which the Python path packs as it is. 1 when written; 0 when
   it is for Python (nothing written); -1 on error. No Python code runs here, so the map cannot change under us. */
static int
pack_flat_map(Packed *out, PyObject *map)
{
    Py_ssize_t start = out->size, position = 0;
    PyObject *key, *value;
    if (PyDict_GET_SIZE(map) > MAX_ARG_ITEMS) return 0;
    if (packed_reserve(out, 5) < 0) return -1;
    out->size = put_map_header(out->data + out->size, PyDict_GET_SIZE(map)) - out->data;
    while (PyDict_Next(map, &position, &key, &value)) {
        int written = PyUnicode_CheckExact(key) ? pack_text(out, key) : 0;
        if (written > 0) written = pack_flat(out, value);
        if (written <= 0) {
            out->size = start;
            return written;
        }
    }
    return 1;
}

/* An instant's Keywords as pack_flat_map packs the map it stands for (its names are the map's keys, in its order). */
static int
pack_keywords(Packed *out, Keywords *keywords)
{
    Py_ssize_t start = out->size, i, n = Py_SIZE(keywords);
    if (n > MAX_ARG_ITEMS || keywords->names == NULL) return 0;
    if (packed_reserve(out, 5) < 0) return -1;
    out->size = put_map_header(out->data + out->size, n) - out->data;
    for (i = 0; i < n; i++) {
        PyObject *key = PyTuple_GET_ITEM(keywords->names, i), *value = keywords->values[i];
        int written = PyUnicode_CheckExact(key) && value != NULL ? pack_text(out, key) : 0;
        if (written > 0) written = pack_flat(out, value);
        if (written <= 0) {
            out->size = start;
            return written;
        }
    }
    return 1;
}

/* The keys of the last Keywords a run packed, packed: consecutive instants mostly come from one call site, whose
   calls all pass the same names tuple. */
#define CACHED_KEYS 8
typedef struct {
    PyObject *names;               /* the names tuple `keys` holds, a reference; NULL: none */
    Packed keys;                   /* its keys as pack_text writes them, back to back */
    Py_ssize_t ends[CACHED_KEYS];  /* where each ends in keys.data */
} KeyCache;

/* Fill `cache` with the keys of `names` when each is text pack_text writes (and there are at most CACHED_KEYS);
   else leave it empty. -1 on error. */
static int
cache_keys(KeyCache *cache, PyObject *names)
{
    Py_ssize_t i, n = PyTuple_GET_SIZE(names);
    Py_CLEAR(cache->names);
    cache->keys.size = 0;
    if (n > CACHED_KEYS) return 0;
    for (i = 0; i < n; i++) {
        PyObject *key = PyTuple_GET_ITEM(names, i);
        int written = PyUnicode_CheckExact(key) ? pack_text(&cache->keys, key) : 0;
        if (written <= 0) return written;
        cache->ends[i] = cache->keys.size;
    }
    cache->names = Py_NewRef(names);
    return 0;
}

/* pack_keywords, its keys copied from `cache`. */
static int
pack_keywords_cached(Packed *out, Keywords *keywords, KeyCache *cache)
{
    Py_ssize_t start = out->size, i, n = Py_SIZE(keywords), from = 0;
    if (keywords->names == NULL) return 0;
    if (keywords->names != cache->names && cache_keys(cache, keywords->names) < 0) return -1;
    if (keywords->names != cache->names) return pack_keywords(out, keywords);
    if (packed_reserve(out, 5) < 0) return -1;
    out->size = put_map_header(out->data + out->size, n) - out->data;
    for (i = 0; i < n; i++) {
        Py_ssize_t size = cache->ends[i] - from;
        int written = keywords->values[i] == NULL ? 0 : packed_reserve(out, size) < 0 ? -1 : 1;
        if (written > 0) {
            memcpy(out->data + out->size, cache->keys.data + from, (size_t)size);
            out->size += size;
            from = cache->ends[i];
            written = pack_flat(out, keywords->values[i]);
        }
        if (written <= 0) {
            out->size = start;
            return written;
        }
    }
    return 1;
}

/* A message's values (a tuple) when all are flat: normalise_values leaves such values as they are. As pack_flat_map. */
static int
pack_flat_values(Packed *out, PyObject *values)
{
    Py_ssize_t start = out->size, i, n = PyTuple_GET_SIZE(values);
    if (n > MAX_ARG_ITEMS) return 0;
    if (packed_reserve(out, 5) < 0) return -1;
    out->size = put_array_header(out->data + out->size, n) - out->data;
    for (i = 0; i < n; i++) {
        int written = pack_flat(out, PyTuple_GET_ITEM(values, i));
        if (written <= 0) {
            out->size = start;
            return written;
        }
    }
    return 1;
}

/* Event i's arguments, packed here when they are of the common shapes, else by pack_other(kind, args) (Python: the
   bytes, or None for an event it leaves out). 1 when written, 0 for an event left out, -1 on error. */
static int
pack_event_args(Packed *out, PyObject *kind, PyObject *args, PyObject *converters, PyObject *values_converter,
                PyObject *pack_other, PyTypeObject *keywords_type)
{
    PyObject *packed, *call[2] = {kind, args};
    int written = 0;
    if (args == Py_None) {
        if (packed_reserve(out, 1) < 0) return -1;
        out->data[out->size++] = 0xc0;
        return 1;
    }
    if (PyDict_CheckExact(args)) written = pack_flat_map(out, args);
    else if (Py_IS_TYPE(args, keywords_type)) written = pack_keywords(out, (Keywords *)args);
    else if (PyTuple_CheckExact(args)) {
        /* Only for the kinds whose values normalise_values converts (messages): compared, never dereferenced. */
        PyObject *converter = PyDict_GetItemWithError(converters, kind);
        if (converter == NULL && PyErr_Occurred()) return -1;
        if (converter == values_converter) written = pack_flat_values(out, args);
    }
    if (written != 0) return written;
    packed = PyObject_Vectorcall(pack_other, call, 2, NULL);
    if (packed == NULL) return -1;
    if (packed == Py_None) written = 0;
    else if (!PyBytes_CheckExact(packed)) {
        PyErr_Format(PyExc_TypeError, "pack_args: pack_other returned %.100s, not bytes", Py_TYPE(packed)->tp_name);
        written = -1;
    }
    else if (packed_reserve(out, PyBytes_GET_SIZE(packed)) < 0) written = -1;
    else {
        memcpy(out->data + out->size, PyBytes_AS_STRING(packed), (size_t)PyBytes_GET_SIZE(packed));
        out->size += PyBytes_GET_SIZE(packed);
        written = 1;
    }
    Py_DECREF(packed);
    return written;
}

/* Whether any of the n events of `records` has arguments. */
static int
any_args(PyObject *records, Py_ssize_t n)
{
    Py_ssize_t i;
    for (i = 0; i < n; i++) {
        if (PyList_GET_ITEM(records, i * RECORD_FIELDS + 4) != Py_None) return 1;
    }
    return 0;
}

static PyObject *
pack_args(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *records, *converters, *values_converter, *pack_other, *rejected = NULL, *column = NULL;
    PyObject *result = NULL;
    Packed out = {NULL, 0, 0};
    Py_ssize_t n, i;
    int with_args = 0; /* an event kept has arguments */
    if (nargs != 4 || !PyList_CheckExact(args[0]) || !PyDict_Check(args[1]) || !PyCallable_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, "pack_args(records: list, converters: dict, values_converter, pack_other)");
        return NULL;
    }
    records = args[0];
    converters = args[1];
    values_converter = args[2];
    pack_other = args[3];
    Py_INCREF(records);
    n = PyList_GET_SIZE(records) / RECORD_FIELDS;
    if (PyList_GET_SIZE(records) % RECORD_FIELDS != 0 || n > 0xFFFFFFFFLL) {
        PyErr_Format(PyExc_ValueError, "pack_args: %zd values are not whole events of one run", PyList_GET_SIZE(records));
        goto done;
    }
    if ((rejected = PyList_New(0)) == NULL) goto done;
    if (!any_args(records, n)) { /* spans and instants without arguments: the usual case */
        result = PyTuple_Pack(2, Py_None, rejected);
        goto done;
    }
    /* 5 bytes kept in front for the array header, written last (the events left out are not known before). */
    if (packed_reserve(&out, 5 + 16 * n) < 0) goto done;
    out.size = 5;
    for (i = 0; i < n; i++) {
        PyObject *kind, *event_args;
        int written;
        if ((i + 1) * RECORD_FIELDS > PyList_GET_SIZE(records)) { /* pack_other ran Python code that took some */
            PyErr_SetString(PyExc_RuntimeError, "pack_args: the records changed while being packed");
            goto done;
        }
        /* Held while pack_other runs: it may run any Python code. */
        kind = Py_NewRef(PyList_GET_ITEM(records, i * RECORD_FIELDS));
        event_args = Py_NewRef(PyList_GET_ITEM(records, i * RECORD_FIELDS + 4));
        written = pack_event_args(&out, kind, event_args, converters, values_converter, pack_other,
                                  ((ModuleState *)PyModule_GetState(module))->keywords_type);
        with_args |= written > 0 && event_args != Py_None;
        Py_DECREF(kind);
        Py_DECREF(event_args);
        if (written < 0) goto done;
        if (written == 0) {
            PyObject *index = PyLong_FromSsize_t(i);
            if (index == NULL || PyList_Append(rejected, index) < 0) {
                Py_XDECREF(index);
                goto done;
            }
            Py_DECREF(index);
        }
    }
    if (with_args) {
        unsigned char header[5];
        Py_ssize_t header_size = put_array_header(header, n - PyList_GET_SIZE(rejected)) - header;
        memcpy(out.data + 5 - header_size, header, (size_t)header_size);
        column = PyBytes_FromStringAndSize((char *)out.data + 5 - header_size, out.size - 5 + header_size);
        if (column == NULL) goto done;
    }
    else column = Py_NewRef(Py_None);
    result = PyTuple_Pack(2, column, rejected);
done:
    PyMem_Free(out.data);
    Py_XDECREF(column);
    Py_XDECREF(rejected);
    Py_DECREF(records);
    return result;
}

/* -- pack_events ---------------------------------------------------------------------------------------------------- */

/* A whole EVENTS frame in one pass for a run of the common shapes: what pack_columns and pack_args write, behind the
   frame's headers (wire/frames.py FRAME_HEADER "<IB" and EVENTS_HEADER "<HHIIQQ"), in one buffer made once. The
   flusher spends on each event about what the recording call did, so copies and calls per run count here. */
#define FRAME_HEADER_SIZE 5
#define EVENTS_HEADER_SIZE 28
#define FRAME_TYPE_EVENTS 6

/* Bytes put_int writes for v. */
static inline Py_ssize_t
int_size(int64_t v)
{
    if (v >= 0) return v < 0x80 ? 1 : v < 0x100 ? 2 : v < 0x10000 ? 3 : v < 0x100000000LL ? 5 : 9;
    return v >= -32 ? 1 : v >= -128 ? 2 : v >= -32768 ? 3 : v >= -2147483648LL ? 5 : 9;
}

/* Bytes put_array_header writes for n. */
static inline Py_ssize_t
array_header_size(Py_ssize_t n)
{
    return n < 16 ? 1 : n < 0x10000 ? 3 : 5;
}

/* v in `size` bytes, little-endian. */
static inline unsigned char *
put_le(unsigned char *p, uint64_t v, int size)
{
    int i;
    for (i = 0; i < size; i++) PUT1(p, v >> (8 * i));
    return p;
}

/* One event's arguments when they have a common shape (see pack_event_args): 1 when written, 0 when they have another
   shape (nothing written), -1 on error. Runs no Python code. `last_kind` (a reference) and `last_values` cache whether
   the last kind seen takes a message's values. */
static int
pack_common_args(Packed *out, PyObject *kind, PyObject *args, PyObject *converters, PyObject *values_converter,
                 PyTypeObject *keywords_type, KeyCache *key_cache, PyObject **last_kind, int *last_values)
{
    if (args == Py_None) {
        if (packed_reserve(out, 1) < 0) return -1;
        out->data[out->size++] = 0xc0;
        return 1;
    }
    if (Py_IS_TYPE(args, keywords_type)) return pack_keywords_cached(out, (Keywords *)args, key_cache);
    if (PyDict_CheckExact(args)) return pack_flat_map(out, args);
    if (!PyTuple_CheckExact(args)) return 0;
    if (kind != *last_kind) {
        /* The kind is an int: its hash and comparison run no Python code. Compared, never dereferenced. */
        PyObject *converter = PyDict_GetItemWithError(converters, kind);
        if (converter == NULL && PyErr_Occurred()) return -1;
        Py_XSETREF(*last_kind, Py_NewRef(kind));
        *last_values = converter != NULL && converter == values_converter;
    }
    return *last_values ? pack_flat_values(out, args) : 0;
}

static PyObject *
pack_events(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *records, *table, *converters, *values_converter, *result = NULL;
    PyObject *last_label = NULL, *last_kind = NULL; /* consecutive events mostly share both */
    ModuleState *state = PyModule_GetState(module);
    KeyCache key_cache = {NULL, {NULL, 0, 0}, {0}};
    int64_t *columns = NULL, *kinds, *names, *starts, *ends, first, last, last_id = 0;
    long long track_id, max_frame_bytes;
    Packed packed = {NULL, 0, 0};
    Py_ssize_t n, i, head_size, body_size;
    int last_values = 0;
    unsigned char *p;
    if (nargs != 6 || !PyList_CheckExact(args[0]) || !PyDict_Check(args[1]) || !PyDict_Check(args[2]) ||
        !PyLong_Check(args[4]) || !PyLong_Check(args[5])) {
        PyErr_SetString(PyExc_TypeError, "pack_events(records: list, table: StringTable, converters: dict, "
                                         "values_converter, track_id: int, max_frame_bytes: int)");
        return NULL;
    }
    records = args[0];
    table = args[1];
    converters = args[2];
    values_converter = args[3];
    if ((track_id = PyLong_AsLongLong(args[4])) == -1 && PyErr_Occurred()) return NULL;
    if ((max_frame_bytes = PyLong_AsLongLong(args[5])) == -1 && PyErr_Occurred()) return NULL;
    if (track_id < 0 || track_id > 0xFFFFFFFFLL) {
        PyErr_Format(PyExc_ValueError, "pack_events: track id %lld does not fit 32 bits", track_id);
        return NULL;
    }
    Py_INCREF(records);
    n = PyList_GET_SIZE(records) / RECORD_FIELDS;
    if (n == 0 || PyList_GET_SIZE(records) % RECORD_FIELDS != 0 || n > 0xFFFFFFFFLL) {
        PyErr_Format(PyExc_ValueError, "pack_events: %zd values are not whole events of one frame",
                     PyList_GET_SIZE(records));
        goto done;
    }
    columns = PyMem_Malloc(sizeof(int64_t) * 4 * n);
    if (columns == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    kinds = columns;
    names = columns + n;
    starts = columns + 2 * n;
    ends = columns + 3 * n;
    if (packed_reserve(&packed, 16 * n) < 0) goto done;
    for (i = 0; i < n; i++) {
        PyObject *value, *event_args, *end;
        int written;
        if ((value = record_value(records, i, 0)) == NULL || as_int64(value, "a kind", &kinds[i]) < 0) goto done;
        if ((event_args = record_value(records, i, 4)) == NULL) goto done;
        /* The arguments first, as pack_args before pack_columns: an event of another shape leaves the run to them
           before its label takes an id. */
        written = pack_common_args(&packed, value, event_args, converters, values_converter, state->keywords_type,
                                   &key_cache, &last_kind, &last_values);
        if (written < 0) goto done;
        if (written == 0) {
            result = Py_NewRef(Py_None);
            goto done;
        }
        if ((value = record_value(records, i, 1)) == NULL) goto done;
        if (value != last_label) {
            int held;
            if (!PyUnicode_CheckExact(value)) { /* its __hash__ and __eq__ may run any code: theirs to look up */
                result = Py_NewRef(Py_None);
                goto done;
            }
            Py_INCREF(value);
            held = string_id(table, value, &last_id); /* a miss runs the table's __missing__ */
            if (held < 0) {
                Py_DECREF(value);
                goto done;
            }
            Py_XSETREF(last_label, held ? value : NULL);
            if (!held) Py_DECREF(value);
        }
        names[i] = last_id;
        if ((value = record_value(records, i, 2)) == NULL || as_int64(value, "a start", &starts[i]) < 0) goto done;
        end = record_value(records, i, 3);
        if (end == value) ends[i] = starts[i]; /* an instant: its start, read once */
        else if (end == NULL || as_int64(end, "an end", &ends[i]) < 0) goto done;
    }
    first = starts[0];
    last = ends[0];
    for (i = 1; i < n; i++) {
        if (starts[i] < first) first = starts[i];
        if (ends[i] > last) last = ends[i];
    }
    if (first < 0 || last < 0) { /* the header's timestamps are unsigned */
        PyErr_SetString(PyExc_OverflowError, "pack_events: a timestamp before 0");
        goto done;
    }
    head_size = 1 + 4 * array_header_size(n) + array_header_size(n);
    for (i = 0; i < n; i++) {
        int64_t offset, duration;
        if (__builtin_sub_overflow(ends[i], starts[i], &duration) || __builtin_sub_overflow(starts[i], first, &offset)) {
            PyErr_SetString(PyExc_OverflowError, "pack_events: an offset or duration does not fit 64 bits");
            goto done;
        }
        head_size += int_size(kinds[i]) + int_size(names[i]) + int_size(offset) + int_size(duration);
    }
    body_size = EVENTS_HEADER_SIZE + head_size + packed.size;
    if (FRAME_HEADER_SIZE + body_size > max_frame_bytes || body_size > 0xFFFFFFFFLL) {
        PyErr_Format(PyExc_ValueError, "pack_events: a frame of %zd bytes is past %lld", FRAME_HEADER_SIZE + body_size,
                     max_frame_bytes);
        goto done;
    }
    result = PyBytes_FromStringAndSize(NULL, FRAME_HEADER_SIZE + body_size);
    if (result == NULL) goto done;
    p = (unsigned char *)PyBytes_AS_STRING(result);
    p = put_le(p, (uint64_t)body_size, 4);
    PUT1(p, FRAME_TYPE_EVENTS);
    p = put_le(p, EVENTS_HEADER_SIZE, 2);
    p = put_le(p, 0, 2); /* flags */
    p = put_le(p, (uint64_t)track_id, 4);
    p = put_le(p, (uint64_t)n, 4);
    p = put_le(p, (uint64_t)first, 8);
    p = put_le(p, (uint64_t)last, 8);
    p = put_array_header(p, 5);
    p = put_array_header(p, n);
    for (i = 0; i < n; i++) p = put_int(p, kinds[i]);
    p = put_array_header(p, n);
    for (i = 0; i < n; i++) p = put_int(p, names[i]);
    p = put_array_header(p, n);
    for (i = 0; i < n; i++) p = put_int(p, starts[i] - first);
    p = put_array_header(p, n);
    for (i = 0; i < n; i++) p = put_int(p, ends[i] - starts[i]);
    p = put_array_header(p, n);
    memcpy(p, packed.data, (size_t)packed.size);
    assert(p + packed.size == (unsigned char *)PyBytes_AS_STRING(result) + PyBytes_GET_SIZE(result));
done:
    PyMem_Free(columns);
    PyMem_Free(packed.data);
    PyMem_Free(key_cache.keys.data);
    Py_XDECREF(key_cache.names);
    Py_XDECREF(last_label);
    Py_XDECREF(last_kind);
    Py_DECREF(records);
    return result;
}

/* -- module --------------------------------------------------------------------------------------------------------- */

/* Set `loop` as this thread's running loop with asyncio's `set_loop`, then check that asyncio answers it and that the
   thread state dict holds, under the key, something other than None exactly when it is not None (running_loop()
   then asks asyncio), and something the set put there: not what the key held before (3.11 leaves a holder there
   once a loop ran, which a setter that does not write the dict would leave as it was). 1 or 0, or -1 with an
   exception set. */
static int
loop_reads_back(ModuleState *state, PyObject *dict, PyObject *set_loop, PyObject *loop)
{
    PyObject *result, *before, *held, *answer;
    int agrees = -1;
    before = PyDict_GetItemWithError(dict, state->str_running_loop);
    if (before == NULL && PyErr_Occurred()) return -1;
    Py_XINCREF(before); /* alive until compared: a new object cannot take its address meanwhile */
    if ((result = PyObject_CallOneArg(set_loop, loop)) == NULL) goto done;
    Py_DECREF(result);
    held = PyDict_GetItemWithError(dict, state->str_running_loop); /* borrowed: compared, never used */
    if (held == NULL && PyErr_Occurred()) goto done;
    if ((answer = PyObject_CallNoArgs(state->get_running_loop)) == NULL) goto done;
    agrees = answer == loop && (loop == Py_None || (held != NULL && held != Py_None && held != before));
    Py_DECREF(answer);
done:
    Py_XDECREF(before);
    return agrees;
}

/* The key was not in the probing thread's dict before the probe: take it out again, and check that asyncio still
   answers None. What it held is kept alive in probe_kept, as asyncio may cache a borrowed pointer to it (3.11 caches
   the last holder it set). 1 or 0, or -1 with an exception set. */
static int
take_key_out(ModuleState *state, PyObject *dict)
{
    PyObject *held = PyDict_GetItemWithError(dict, state->str_running_loop), *answer; /* borrowed */
    int none;
    if (held == NULL) return PyErr_Occurred() ? -1 : 1;
    if (PyList_Append(state->probe_kept, held) < 0 || PyDict_DelItem(dict, state->str_running_loop) < 0) return -1;
    if ((answer = PyObject_CallNoArgs(state->get_running_loop)) == NULL) return -1;
    none = answer == Py_None;
    Py_DECREF(answer);
    return none;
}

/* Whether asyncio keeps this thread's running loop in the thread state dict as running_loop() reads it: seen by
   setting a loop of the probe's own with asyncio's `set_loop` (asyncio.events._set_running_loop), then none, and
   reading both back. Where asyncio keeps it anywhere else (3.13 keeps it in the thread state itself, asyncio without
   its C module in a thread-local object), the key stays empty and the answer is no. The calling thread is left as
   found: its running loop set back, and the key taken out again if it was not there. Returns 1 or 0, or -1 with an
   exception set that is not an Exception (any other makes the answer no). */
static int
probe_loop_key(ModuleState *state, PyObject *set_loop)
{
    PyObject *dict, *before, *mine, *held, *result, *type = NULL, *value = NULL, *tb = NULL;
    int had, said_none, found;
#if PY_VERSION_HEX < 0x030C0000
    /* Before 3.12 asyncio caches the running loop for all interpreters at once, by a thread id that each interpreter
       counts on its own: a probe in a sub-interpreter would show its loop to a thread of the main one. */
    if (PyInterpreterState_Get() != PyInterpreterState_Main()) return 0;
#endif
    if (set_loop == Py_None || (dict = PyThreadState_GetDict()) == NULL) return 0;
    held = PyDict_GetItemWithError(dict, state->str_running_loop); /* borrowed: compared, never used */
    if (held == NULL && PyErr_Occurred()) goto failed;
    had = held != NULL;
    said_none = held == NULL || held == Py_None;
    if ((before = PyObject_CallNoArgs(state->get_running_loop)) == NULL) goto failed;
    mine = PyObject_CallNoArgs((PyObject *)&PyBaseObject_Type);
    found = mine == NULL ? -1 : loop_reads_back(state, dict, set_loop, mine);
    if (found == 1) found = loop_reads_back(state, dict, set_loop, Py_None);
    if (found == 1 && said_none && before != Py_None) found = 0; /* asyncio saw a loop the key did not show */
    Py_XDECREF(mine);
    PyErr_Fetch(&type, &value, &tb);
    result = PyObject_CallOneArg(set_loop, before); /* back as it was, whatever the probe found */
    Py_DECREF(before);
    if (result == NULL) found = -1;
    else {
        Py_DECREF(result);
        if (found == 1 && !had) found = take_key_out(state, dict);
    }
    if (type != NULL) { /* the first error is the one to report */
        PyErr_Clear();
        PyErr_Restore(type, value, tb);
    }
    if (found >= 0) return found;
failed:
    if (!PyErr_ExceptionMatches(PyExc_Exception)) return -1;
    PyErr_Clear();
    return 0;
}

/* tracked(list): `list`, tracked by the cyclic collector again (take_runs() makes its run lists untracked, for the
   flusher's time with them): for a listener that may keep it, where a cycle could go through it. */
static PyObject *
tracked(PyObject *Py_UNUSED(module), PyObject *list)
{
    if (!PyList_CheckExact(list)) {
        PyErr_Format(PyExc_TypeError, "tracked() takes a list, not %.100s", Py_TYPE(list)->tp_name);
        return NULL;
    }
    if (!PyObject_GC_IsTracked(list)) PyObject_GC_Track(list);
    return Py_NewRef(list);
}

/* configure(get_running_loop, span_kind, instant_kind, wake[, set_running_loop]): returns whether current_events()
   reads the running loop from the thread state (see running_loop); without set_running_loop (or with None) it asks
   get_running_loop on every event. */
static PyObject *
configure(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    ModuleState *state = PyModule_GetState(module);
    int found;
    if (nargs != 4 && nargs != 5) {
        PyErr_SetString(PyExc_TypeError,
                        "configure(get_running_loop, span_kind, instant_kind, wake[, set_running_loop])");
        return NULL;
    }
    state->running_loop_in_dict = 0; /* until the probe says so */
    state->loop_free_dict = NULL;
    Py_XSETREF(state->get_running_loop, Py_NewRef(args[0]));
    Py_XSETREF(state->span_kind, Py_NewRef(args[1]));
    Py_XSETREF(state->instant_kind, Py_NewRef(args[2]));
    Py_XSETREF(state->wake, Py_NewRef(args[3]));
    found = nargs == 5 ? probe_loop_key(state, args[4]) : 0;
    if (found < 0) return NULL;
    state->running_loop_in_dict = found;
    return PyBool_FromLong(found);
}

/* The running loop as the recorder finds it, for the tests to hold it to asyncio's answer. */
static PyObject *
module_running_loop(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    return running_loop(PyModule_GetState(module));
}

static PyMethodDef module_methods[] = {
    {"configure", (PyCFunction)(void (*)(void))configure, METH_FASTCALL,
     "configure(get_running_loop, span_kind, instant_kind, wake[, set_running_loop]): what the recorder needs from "
     "the Python side; returns whether the running loop is read from the thread state, without a call."},
    {"running_loop", module_running_loop, METH_NOARGS,
     "running_loop(): this thread's running asyncio loop (or None), as the recorder finds it."},
    {"tracked", tracked, METH_O, "tracked(list): the list, tracked by the cyclic collector again."},
    {"take_runs", (PyCFunction)(void (*)(void))take_runs, METH_FASTCALL,
     "take_runs(list, count, run_values): the first count values of list in runs, removed from it."},
    {"pack_columns", (PyCFunction)(void (*)(void))pack_columns, METH_FASTCALL,
     "pack_columns(records, table) -> (head, first_ns, last_ns, args): an EVENTS payload's integer columns."},
    {"pack_args", (PyCFunction)(void (*)(void))pack_args, METH_FASTCALL,
     "pack_args(records, converters, values_converter, pack_other) -> (args column or None, events left out)."},
    {"pack_events", (PyCFunction)(void (*)(void))pack_events, METH_FASTCALL,
     "pack_events(records, table, converters, values_converter, track_id, max_frame_bytes) -> an EVENTS frame, or "
     "None for a run with arguments or labels of other shapes."},
    {NULL, NULL, 0, NULL},
};

static int
module_traverse(PyObject *module, visitproc visit, void *arg)
{
    ModuleState *state = PyModule_GetState(module);
    Py_VISIT(state->recorder_core_type);
    Py_VISIT(state->scope_type);
    Py_VISIT(state->null_scope_type);
    Py_VISIT(state->message_type);
    Py_VISIT(state->traced_type);
    Py_VISIT(state->keywords_type);
    Py_VISIT(state->null_scope);
    Py_VISIT(state->get_running_loop);
    Py_VISIT(state->probe_kept);
    Py_VISIT(state->wake);
    Py_VISIT(state->span_kind);
    Py_VISIT(state->instant_kind);
    return 0;
}

static int
module_clear(PyObject *module)
{
    ModuleState *state = PyModule_GetState(module);
    Py_CLEAR(state->recorder_core_type);
    Py_CLEAR(state->null_scope);
    Py_CLEAR(state->scope_type);
    Py_CLEAR(state->null_scope_type);
    Py_CLEAR(state->message_type);
    Py_CLEAR(state->traced_type);
    Py_CLEAR(state->keywords_type);
    Py_CLEAR(state->get_running_loop);
    Py_CLEAR(state->str_running_loop);
    Py_CLEAR(state->probe_kept);
    Py_CLEAR(state->wake);
    Py_CLEAR(state->span_kind);
    Py_CLEAR(state->instant_kind);
    Py_CLEAR(state->room);
    Py_CLEAR(state->str_thread_events);
    Py_CLEAR(state->str_task_events);
    Py_CLEAR(state->str_exception);
    Py_CLEAR(state->str_name);
    Py_CLEAR(state->str_kind_id);
    Py_CLEAR(state->str_label);
    Py_CLEAR(state->str_not_an_event);
    Py_CLEAR(state->str_on);
    Py_CLEAR(state->str_marker);
    return 0;
}

static void
module_free(void *module)
{
    module_clear((PyObject *)module);
}

/* A type of this module, made from its spec and added to the module; NULL on error. */
static PyTypeObject *
add_type(PyObject *module, PyType_Spec *spec, PyObject *base)
{
    PyObject *type = PyType_FromModuleAndSpec(module, spec, base);
    if (type == NULL) return NULL;
    if (PyModule_AddType(module, (PyTypeObject *)type) < 0) {
        Py_DECREF(type);
        return NULL;
    }
    return (PyTypeObject *)type;
}

static int
module_exec(PyObject *module)
{
    ModuleState *state = PyModule_GetState(module);
    if ((state->recorder_core_type = add_type(module, &core_spec, NULL)) == NULL ||
        (state->scope_type = add_type(module, &scope_spec, NULL)) == NULL ||
        (state->null_scope_type = add_type(module, &null_scope_spec, NULL)) == NULL ||
        (state->message_type = add_type(module, &message_spec, NULL)) == NULL ||
        (state->traced_type = add_type(module, &traced_spec, NULL)) == NULL ||
        (state->keywords_type = add_type(module, &keywords_spec, NULL)) == NULL) {
        return -1;
    }
    state->room = PyTuple_Pack(RECORD_FIELDS, Py_None, Py_None, Py_None, Py_None, Py_None);
    if ((state->null_scope = new_null_scope(state->null_scope_type)) == NULL) return -1;
    state->str_thread_events = PyUnicode_InternFromString("_thread_events");
    state->str_task_events = PyUnicode_InternFromString("_task_events");
    state->str_exception = PyUnicode_InternFromString("exception");
    state->str_name = PyUnicode_InternFromString("__name__");
    state->str_kind_id = PyUnicode_InternFromString("_kind_id");
    state->str_label = PyUnicode_InternFromString("_label");
    state->str_not_an_event = PyUnicode_InternFromString("_not_an_event");
    state->str_on = PyUnicode_InternFromString("on");
    state->str_marker = PyUnicode_InternFromString("_marker");
    state->str_running_loop = PyUnicode_InternFromString("__asyncio_running_event_loop__");
    state->probe_kept = PyList_New(0);
    if (!state->str_running_loop || !state->probe_kept) return -1;
    if (!state->room || !state->str_thread_events || !state->str_task_events || !state->str_exception ||
        !state->str_name || !state->str_kind_id || !state->str_label || !state->str_not_an_event || !state->str_on ||
        !state->str_marker) {
        return -1;
    }
    /* What pack_args leaves to Python, for the tests to hold against model.py's limits. */
    if (PyModule_AddIntConstant(module, "MAX_ARG_ITEMS", MAX_ARG_ITEMS) < 0 ||
        PyModule_AddIntConstant(module, "MAX_ARG_TEXT", MAX_ARG_TEXT) < 0) {
        return -1;
    }
    return 0;
}

/* Multi-phase initialisation: each interpreter that imports the module runs module_exec() for a module (and types)
   of its own. The recorder relies on the GIL (it does not build where there is none), but not on sharing it. */
static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, module_exec},
#if PY_VERSION_HEX >= 0x030C0000
    {Py_mod_multiple_interpreters, Py_MOD_PER_INTERPRETER_GIL_SUPPORTED},
#endif
#if PY_VERSION_HEX >= 0x030D0000
    {Py_mod_gil, Py_MOD_GIL_USED},
#endif
    {0, NULL},
};

static struct PyModuleDef speedups_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "ringtrace.client._speedups",
    .m_doc = "The recording hot path and the stream encoder's inner loop, in C (see recorder.py and encoder.py).",
    .m_size = sizeof(ModuleState),
    .m_methods = module_methods,
    .m_slots = module_slots,
    .m_traverse = module_traverse,
    .m_clear = module_clear,
    .m_free = module_free,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    return PyModuleDef_Init(&speedups_module);
}
