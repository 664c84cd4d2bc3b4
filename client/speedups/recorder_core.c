/* RecorderCore, the base class of Timeline: scope(), instant(), push() and marker() in C, and what the Python side
   asks of the recording state (a buffer with room, the count of events lost, the cache of the last thread's buffer). */

#include "speedups.h"

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

/* A Scope recording `label` with the args `given` (a dict or None, kept as it is) or else those of a vectorcall (`args`
   past `nargs`, named by `kwnames`), or the NullScope when it keeps nothing; NULL with an exception set (MemoryError)
   only when no object can be returned. */
static PyObject *
new_scope(RecorderCore *self, PyObject *label, PyObject *given, PyObject *const *args, Py_ssize_t nargs,
          PyObject *kwnames)
{
    PyObject *events, *kwargs;
    Scope *scope;
    events = current_events(self);
    if (events == NULL) {
        if (count_unrecorded(&self->unrecorded) < 0) return NULL;
        return Py_NewRef(self->state->null_scope); /* keeps nothing */
    }
    if (events == Py_None) { /* nothing listens: nothing to allocate either */
        Py_DECREF(events);
        return Py_NewRef(self->state->null_scope);
    }
    kwargs = given != NULL ? Py_NewRef(given) : keyword_dict(args, nargs, kwnames);
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
    scope->label = Py_NewRef(label);
    scope->args = kwargs;
    scope->core = (RecorderCore *)Py_NewRef(self);
    scope->start_ns = 0;
    scope->entered = 0;
    PyObject_GC_Track(scope);
    return (PyObject *)scope;
}

static PyObject *
core_scope(RecorderCore *self, PyObject *const *args, Py_ssize_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs != 1) {
        PyErr_Format(PyExc_TypeError, "scope() takes one positional argument, the label (%zd given)", nargs);
        return NULL;
    }
    if (!self->listening) return Py_NewRef(self->state->null_scope); /* not even a look for the buffer */
    return new_scope(self, args[0], NULL, args, nargs, kwnames);
}

/* tl._scope_of(label, args): scope(label, **args) with args given as a dict the scope keeps, not copied (its caller
   made it for the scope: a trace-aware scope's plain one, trace_context.py); None or an empty dict for no args. */
static PyObject *
core_scope_of(RecorderCore *self, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *kwargs;
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "_scope_of() takes two positional arguments, the label and the args (%zd given)",
                     nargs);
        return NULL;
    }
    kwargs = args[1];
    if (!PyDict_CheckExact(kwargs) && kwargs != Py_None) {
        PyErr_Format(PyExc_TypeError, "_scope_of() takes its args as a dict or None, got %s", Py_TYPE(kwargs)->tp_name);
        return NULL;
    }
    if (!self->listening) return Py_NewRef(self->state->null_scope); /* not even a look for the buffer */
    if (kwargs != Py_None && PyDict_GET_SIZE(kwargs) == 0) kwargs = Py_None; /* as scope() keeps no args */
    return new_scope(self, args[0], kwargs, NULL, 0, NULL);
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
    if (self->listening && self->max_record_bytes > 0) { /* compact where it has the shape (records.c) */
        int recorded = record_compact_instant(self, args[0], args + nargs, kwnames);
        if (recorded < 0) return NULL;
        if (recorded) Py_RETURN_NONE;
    }
    stamp = now_ns_object(self->state);
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
    stamp = now_ns_object(self->state);
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
    held = buffered_values(self->state, events);
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
    self->lanes_thread = 0;
    Py_CLEAR(self->lanes);
    Py_CLEAR(self->cached_events);
    Py_CLEAR(self->cached_records);
    Py_RETURN_NONE;
}

static PyObject *
core_cache_threads(RecorderCore *self, PyObject *flag)
{
    int enabled = PyObject_IsTrue(flag);
    if (enabled < 0) return NULL;
    self->cache_threads = enabled;
    if (!enabled) {
        PyObject *old = self->cached_events, *old_records = (PyObject *)self->cached_records;
        self->cached_thread = 0;
        self->cached_events = NULL;
        self->cached_records = NULL;
        Py_XDECREF(old);
        Py_XDECREF(old_records);
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
    self->max_record_bytes = 0; /* none until the timeline sets its bound */
    return (PyObject *)self;
}

static int
core_traverse(RecorderCore *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->module);
    Py_VISIT(self->cached_events);
    Py_VISIT(self->task_buffers);
    Py_VISIT(self->last_label);
    Py_VISIT(self->lanes);
    Py_VISIT(self->task_switch);
    return 0;
}

/* The module (and so `state`) is kept: a finalizer that runs meanwhile may still record. */
static int
core_clear(RecorderCore *self)
{
    self->cached_thread = 0;
    Py_CLEAR(self->cached_events);
    Py_CLEAR(self->cached_records);
    Py_CLEAR(self->spare);
    Py_CLEAR(self->last_label);
    Py_CLEAR(self->task_buffers);
    self->lanes_thread = 0;
    Py_CLEAR(self->lanes);
    Py_CLEAR(self->task_switch);
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
    {"_scope_of", (PyCFunction)(void (*)(void))core_scope_of, METH_FASTCALL,
     "_scope_of(label, args, /)\n--\n\nscope(label, **args), args given as a dict the scope keeps (not copied)."},
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
    {"_hint_lanes", (PyCFunction)(void (*)(void))core_hint_lanes, METH_FASTCALL,
     "_hint_lanes(lanes, task_switch, first_fit, /)\n--\n\nThe running thread's lanes (lanes.ThreadLanes.lanes), the "
     "first free of which its next new task may take in C (first_lane.c); None: none."},
    {"_take_unrecorded", (PyCFunction)core_take_unrecorded, METH_NOARGS,
     "Events lost for want of memory or of room in their buffer since the last call."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef core_members[] = {
    {"_max_buffered_values", T_PYSSIZET, offsetof(RecorderCore, max_values), 0,
     "Values one buffer may hold (max_buffered_events * RECORD_FIELDS); what does not fit is refused and counted."},
    {"_listening", T_BOOL, offsetof(RecorderCore, listening), 0, "Whether the timeline has listeners."},
    {"_task_buffers", T_OBJECT, offsetof(RecorderCore, task_buffers), 0,
     "Each recording asyncio task's track buffer (a dict, read without the lock): where a task that has one records."},
    {"_max_buffered_record_bytes", T_PYSSIZET, offsetof(RecorderCore, max_record_bytes), 0,
     "Bytes of compact records one thread may hold (0: none recorded compactly); what does not fit is refused and "
     "counted."},
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

PyType_Spec core_spec = {
    .name = "ringtrace.client._speedups.RecorderCore",
    .basicsize = sizeof(RecorderCore),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = core_slots,
};
