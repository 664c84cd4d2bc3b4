/* A new asyncio task's lane, taken in C in the case a server meets on every request: the task before it on its thread
   is done, and the thread's first lane is free for it.

   A task's first event takes a lane of its thread (tracks.py, lanes.py): in Python, about 2 us, each time. aiohttp
   serves each request in a task of its own, one after another on a keep-alive connection: the lane each takes is the
   thread's first, whose task (the request before) is done. Here that case is taken as Tracks._take_lane and Lane.take
   take it, with the same result: the slow path would look at the first lane first, find its task done, and give it
   the next task, its buffer noting the switch (a TASK_SWITCH record). Anything else (another lane, a buffer without
   room, a task still running there, tasks remembered for traced calls, the timeline's lock held elsewhere) is left to
   the Python path, and so is the first lane's first task: the Python side hints the lane (_hint_lane) once it took it.

   Everything is read afresh under the timeline's lock, taken without waiting (held elsewhere: the Python path waits
   for it): the hint is only which lane to look at. It is let go of as the recorders are reset, and as a drain forgets
   a thread's buffer; not as it forgets a task's, which a server's requests leave at every drain. */

#include "speedups.h"

/* Whether `object.name` is `expected` (1), is not (0), or could not be read (-1, an exception set). */
static int
attribute_is(PyObject *object, PyObject *name, PyObject *expected)
{
    PyObject *value = PyObject_GetAttr(object, name);
    if (value == NULL) return -1;
    Py_DECREF(value); /* (compared by identity only: the owner still holds it) */
    return value == expected;
}

/* The lane's buffer list, taken for `task` (a new reference), when the case above holds, with the values it held
   before the switch in `*held`; else NULL, with no exception set when the case does not hold (what could not be read
   here, the Python path reads again, and counts). Under the lock. */
static PyObject *
take_first_lane(RecorderCore *self, PyObject *lane, PyObject *task, PyObject *loop, Py_ssize_t *held_values)
{
    ModuleState *state = self->state;
    PyObject **names = state->lane_names, *tracks, *held = NULL, *buffer = NULL, *had, *events = NULL, *done;
    PyObject *values[RECORD_FIELDS];
    int holds;
    if ((tracks = PyObject_GetAttr((PyObject *)self, names[LANE_TRACKS])) == NULL) goto not_taken;
    holds = attribute_is(tracks, names[LANE_TAKING], Py_False); /* (a collection recording while it takes one) */
    Py_DECREF(tracks);
    if (holds <= 0) goto not_taken;
    if ((held = PyObject_GetAttr(lane, names[LANE_TASK])) == NULL) goto not_taken;
    if (held == Py_None || held == task || Py_TYPE(held) != Py_TYPE(task)) goto not_taken;
    if ((done = PyObject_CallMethodNoArgs(held, names[LANE_DONE])) == NULL) goto not_taken;
    Py_DECREF(done);
    if (done != Py_True) goto not_taken;
    if ((holds = attribute_is(lane, names[LANE_LOOP], loop)) <= 0) goto not_taken;
    if ((had = PyObject_GetAttr(lane, names[LANE_HAD])) == NULL) goto not_taken;
    holds = attribute_is(had, state->str_on, Py_False); /* (remembered for traced calls: Lane.take does more) */
    Py_DECREF(had);
    if (holds <= 0) goto not_taken;
    if ((buffer = PyObject_GetAttr(lane, names[LANE_BUFFER])) == NULL || buffer == Py_None) goto not_taken;
    if ((holds = attribute_is(buffer, names[LANE_OWNER], held)) <= 0) goto not_taken;
    if ((events = PyObject_GetAttr(buffer, state->str_events)) == NULL || !PyList_CheckExact(events)) goto not_taken;
    *held_values = PyList_GET_SIZE(events);
    if (*held_values + 2 * RECORD_FIELDS > self->max_values) goto not_taken; /* (a new buffer: the Python path's) */
    /* Tracks._take_lane and Lane.take, for this case: the done task records no more; the switch, then the task. */
    if (PyDict_DelItem(self->task_buffers, held) < 0) {
        if (!PyErr_ExceptionMatches(PyExc_KeyError)) goto failed;
        PyErr_Clear();
    }
    values[0] = Py_NewRef(self->task_switch);
    values[1] = Py_NewRef(task);
    values[2] = PyLong_FromLong(0);
    values[3] = PyLong_FromLong(0);
    values[4] = Py_NewRef(Py_None);
    if (append_event(state, events, values, PY_SSIZE_T_MAX) < 0) goto failed;
    if (PyObject_SetAttr(buffer, names[LANE_OWNER], task) < 0 || PyObject_SetAttr(lane, names[LANE_TASK], task) < 0 ||
        PyDict_SetItem(self->task_buffers, task, buffer) < 0) {
        goto failed;
    }
    Py_DECREF(buffer);
    Py_DECREF(held); /* (last: its release may run Python code, the lane whole by then) */
    return events;
not_taken:
    if (PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_Exception)) goto failed;
        PyErr_Clear();
    }
failed:
    Py_XDECREF(events);
    Py_XDECREF(buffer);
    Py_XDECREF(held);
    return NULL;
}

/* The buffer list of the lane `task` (running on `loop`, with no buffer yet) takes here (a new reference), when the
   case above holds; NULL with no exception set when it does not (the Python path takes the task), or with one. */
PyObject *
first_lane_events(RecorderCore *self, PyObject *task, PyObject *loop)
{
    PyObject **names = self->state->lane_names, *lane = self->lane, *lock, *got, *events, *released;
    PyObject *type, *value, *traceback;
    Py_ssize_t held = -1;
    /* (Not where threads share a thread state, gevent's greenlets: the id would not tell this thread's lane.) */
    if (lane == NULL || !self->cache_threads || self->lane_thread != PyThreadState_GetID(PyThreadState_Get()) ||
        self->task_switch == NULL || self->task_buffers == NULL || !PyDict_CheckExact(self->task_buffers)) {
        return NULL;
    }
    Py_INCREF(lane); /* (held from here: Python code the lock runs may replace the hint and let it go) */
    if ((lock = PyObject_GetAttr((PyObject *)self, names[LANE_LOCK])) == NULL) {
        Py_DECREF(lane);
        goto not_taken;
    }
    got = PyObject_CallMethodOneArg(lock, names[LANE_ACQUIRE], Py_False); /* (without waiting: a lock held elsewhere
                                                                              is the Python path's to wait for) */
    if (got != Py_True) {
        Py_XDECREF(got);
        Py_DECREF(lock);
        Py_DECREF(lane);
        goto not_taken;
    }
    Py_DECREF(got);
    events = take_first_lane(self, lane, task, loop, &held);
    Py_DECREF(lane);
    PyErr_Fetch(&type, &value, &traceback); /* (released whatever happened) */
    released = PyObject_CallMethodNoArgs(lock, names[LANE_RELEASE]);
    Py_DECREF(lock);
    if (released == NULL) {
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(traceback);
        Py_XDECREF(events);
        return NULL;
    }
    Py_DECREF(released);
    PyErr_Restore(type, value, traceback);
    if (events != NULL && held == self->wake_values && wake_flusher(self) < 0) { /* (as the switch's event would) */
        Py_DECREF(events);
        return NULL;
    }
    return events;
not_taken:
    if (PyErr_Occurred() && PyErr_ExceptionMatches(PyExc_Exception)) PyErr_Clear();
    return NULL;
}

/* Timeline._hint_lane(lane, task_switch): the running thread's first lane (see above), or None for none. */
PyObject *
core_hint_lane(RecorderCore *self, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *old_lane = self->lane, *old_switch = self->task_switch;
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "_hint_lane() takes two positional arguments, the lane and TASK_SWITCH (%zd given)",
                     nargs);
        return NULL;
    }
    self->lane = args[0] == Py_None ? NULL : Py_NewRef(args[0]);
    self->lane_thread = args[0] == Py_None ? 0 : PyThreadState_GetID(PyThreadState_Get());
    self->task_switch = Py_NewRef(args[1]);
    Py_XDECREF(old_lane);
    Py_XDECREF(old_switch);
    Py_RETURN_NONE;
}
