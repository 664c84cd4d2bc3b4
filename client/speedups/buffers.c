/* The recording thread's side of a buffer: finding the running task's or thread's, appending an event whole, counting
   what could not be recorded, waking the flusher. */

#include "speedups.h"

/* now_ns() as a new int, or NULL with an exception set. */
PyObject *
now_ns_object(ModuleState *state)
{
    int64_t now;
    return now_ns(state, &now) < 0 ? NULL : PyLong_FromLongLong(now);
}

/* Append the five values of one event to `list`, all or nothing, unless it holds `limit` values already (its segments'
   records counted: buffered_values). Steals the references in `values` on success and on failure alike. Returns 0, or
   -1: an exception set, or none when the list was full. No allocation that could run Python code happens here: the
   caller allocated everything before. */
int
append_event(ModuleState *state, PyObject *list, PyObject *values[RECORD_FIELDS], Py_ssize_t limit)
{
    PyListObject *l = (PyListObject *)list;
    Py_ssize_t n = Py_SIZE(l);
    int i;
    if (buffered_values(state, list) >= limit) goto fail;
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
        if (generation == self->generation && self->cache_threads && self->state->str_thread_records != NULL) {
            /* The thread's account of compact records, asked for in the same state (see records.c). */
            PyObject *records = PyObject_CallMethodNoArgs((PyObject *)self, self->state->str_thread_records);
            if (records == NULL) {
                Py_DECREF(events);
                return NULL;
            }
            if (generation == self->generation) {
                /* The cache is whole before the old entries are released: releasing them may run Python code. */
                PyObject *old = self->cached_events, *old_records = (PyObject *)self->cached_records;
                self->cached_events = Py_NewRef(events);
                self->cached_records =
                    Py_IS_TYPE(records, self->state->record_buffer_type) ? (RecordBuffer *)Py_NewRef(records) : NULL;
                self->cached_thread = me;
                Py_DECREF(records);
                Py_XDECREF(old);
                Py_XDECREF(old_records);
                return events;
            }
            Py_DECREF(records);
        }
        else if (generation == self->generation) {
            return events;
        }
        Py_DECREF(events); /* the state changed while Python ran: ask again */
    }
    PyErr_SetString(PyExc_RuntimeError, "the timeline's listeners kept changing while a thread looked up its buffer");
    return NULL; /* counted as unrecorded by the caller */
}

/* The buffer of the task `loop` runs (a new reference), as Recorder._task_events finds it: asyncio's table of running
   tasks, then the timeline's of buffers; for a task with none yet, Recorder._lane_events; with no task running, the
   thread's. NULL with an exception set. No Python code runs between the lookups (a task hashes by identity), so
   borrowed references do, up to the call. */
static PyObject *
task_events(RecorderCore *self, PyObject *loop)
{
    PyObject *tasks = self->state->current_tasks, *buffers = self->task_buffers, *task, *buffer, *events;
    if (tasks == NULL || buffers == NULL || !PyDict_CheckExact(buffers)) {
        events = PyObject_CallMethodNoArgs((PyObject *)self, self->state->str_task_events);
        return events == NULL ? NULL : checked_events(events);
    }
    if ((task = PyDict_GetItemWithError(tasks, loop)) == NULL) { /* (borrowed) */
        return PyErr_Occurred() ? NULL : thread_events(self);
    }
    if ((buffer = PyDict_GetItemWithError(buffers, task)) != NULL) { /* (borrowed) */
        events = PyObject_GetAttr(buffer, self->state->str_events);
    }
    else if (PyErr_Occurred()) {
        return NULL;
    }
    else {
        Py_INCREF(task); /* (asyncio's table may let it go while Python code runs) */
        events = first_lane_events(self, task, loop);
        if (events == NULL && !PyErr_Occurred()) { /* not the case first_lane.c takes: the Python path */
            events = PyObject_CallMethodOneArg((PyObject *)self, self->state->str_lane_events, task);
        }
        Py_DECREF(task);
    }
    return events == NULL ? NULL : checked_events(events);
}

/* The buffer of the running task or thread (see thread_events). */
PyObject *
current_events(RecorderCore *self)
{
    PyObject *events, *loop = running_loop(self->state);
    if (loop == NULL) return NULL;
    if (loop == Py_None) {
        Py_DECREF(loop);
        return thread_events(self);
    }
    events = task_events(self, loop);
    Py_DECREF(loop);
    return events;
}

/* Tracing never raises into the host: a failure to record is counted, and the error dropped (none is set when the
   buffer was full). Returns 0 then; -1 for an exception that is not an Exception (KeyboardInterrupt from a signal
   handler that ran meanwhile), left raised. */
int
count_unrecorded(Py_ssize_t *counter)
{
    if (PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_Exception)) return -1;
        PyErr_Clear();
    }
    (*counter)++;
    return 0;
}

PyObject *
unrecorded(RecorderCore *self)
{
    if (count_unrecorded(&self->unrecorded) < 0) return NULL;
    Py_RETURN_NONE;
}

/* Wake the flusher: a buffer is half full, and is better drained before it fills than at the flusher's next
   interval. Python code runs here: never between a buffer's lookup and the append. Returns 0, or -1 for an exception
   the program must see (a failed wake is ignored: the flusher still comes at its interval). */
int
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

/* Record a point-in-time event in the buffer of the running task or thread. Steals `kind`, `label`, `stamp` (its start
   and its end: the encoder knows an instant by that identity) and `args`. The buffer is looked up last: nothing runs
   Python code between that and the append. Returns None, or NULL for an exception the program must see. */
PyObject *
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
