/* A new asyncio task's lane, taken in C in the case a server meets on every request: the first free lane of its
   thread is one whose task (the request before) is done.

   A task's first event takes a lane of its thread (tracks.py, lanes.py): in Python, about 2 us, each time. aiohttp
   serves each request in a task of its own, one after another on a keep-alive connection: the lane each takes is the
   first whose task is done (the first lane, or the second where a long-lived task, the client's or one that logs,
   holds the first). Here that case is taken as ThreadLanes.free_lane, Tracks._take_lane and Lane.take take it, with
   the same result: the lanes looked at in order, the first whose task is done given the next task, its buffer noting
   the switch (a TASK_SWITCH record). Anything else (a free lane with no task, a lane past the first FIRST_FIT, a
   buffer without room, a lane of another loop, tasks remembered for traced calls, the timeline's lock held elsewhere)
   is left to the Python path, and so is a thread's first task: the Python side hints the thread's lanes
   (_hint_lanes) once a task took one of them.

   Everything is read afresh under the timeline's lock, taken without waiting (held elsewhere: the Python path waits
   for it): the hint is only which lanes to look at. It is let go of as the recorders are reset, and as a drain
   forgets a thread's buffer; not as it forgets a task's, which a server's requests leave at every drain. */

#include "speedups.h"

#ifndef Py_T_OBJECT_EX /* (3.11: structmember.h's names) */
#define Py_T_OBJECT_EX T_OBJECT_EX
#endif

/* Where `object.name` is kept: the address of its __slots__ member, where the name is one of its type's (Lane,
   TrackBuffer, Had: read as the member's descriptor reads it, without the generic lookup and the descriptor's call,
   about 200 instructions each, ten reads a request); else NULL. A member with any flag (read-only, audited) is not
   one, and the callers look only where the type keeps the generic attribute access (no __getattribute__ or
   __setattr__ of its own). */
static PyObject **
slot_of(PyObject *object, PyObject *name)
{
    PyObject *descriptor = _PyType_Lookup(Py_TYPE(object), name); /* (borrowed; the type's cache) */
    PyMemberDef *member;
    if (descriptor == NULL || !Py_IS_TYPE(descriptor, &PyMemberDescr_Type)) return NULL;
    member = ((PyMemberDescrObject *)descriptor)->d_member;
    if (member->type != Py_T_OBJECT_EX || member->flags != 0 ||
        !PyObject_TypeCheck(object, PyDescr_TYPE(descriptor))) {
        return NULL;
    }
    return (PyObject **)((char *)object + member->offset);
}

/* `object.name` (a new reference), or NULL with an exception set: a __slots__ member read in place (an unset one is
   left to PyObject_GetAttr, which raises as ever). */
static PyObject *
attribute_of(PyObject *object, PyObject *name)
{
    PyObject **slot = Py_TYPE(object)->tp_getattro == PyObject_GenericGetAttr ? slot_of(object, name) : NULL;
    if (slot != NULL && *slot != NULL) return Py_NewRef(*slot);
    return PyObject_GetAttr(object, name);
}

/* `object.name = value`: 0, or -1 with an exception set; a __slots__ member set in place. */
static int
set_attribute_of(PyObject *object, PyObject *name, PyObject *value)
{
    PyObject **slot = Py_TYPE(object)->tp_setattro == PyObject_GenericSetAttr ? slot_of(object, name) : NULL;
    if (slot == NULL) return PyObject_SetAttr(object, name, value);
    Py_XSETREF(*slot, Py_NewRef(value)); /* (the value it held may go: set first, as the descriptor does) */
    return 0;
}

/* Whether `object.name` is `expected` (1), is not (0), or could not be read (-1, an exception set). */
static int
attribute_is(PyObject *object, PyObject *name, PyObject *expected)
{
    PyObject *value = attribute_of(object, name);
    if (value == NULL) return -1;
    Py_DECREF(value); /* (compared by identity only: the owner still holds it) */
    return value == expected;
}

/* The first of `lanes` (up to first_fit) whose task is done, a new reference; NULL with no exception set where the
   Python path must look (a lane with no task or with `task`, one of another loop, an odd task), or with one. */
static PyObject *
first_done_lane(RecorderCore *self, PyObject *lanes, PyObject *task, PyObject *loop, PyObject **held_task)
{
    PyObject **names = self->state->lane_names, *lane, *held, *done;
    Py_ssize_t i;
    int holds;
    for (i = 0; i < PyList_GET_SIZE(lanes) && i < self->first_fit; i++) { /* (the list may grow meanwhile: not here) */
        lane = Py_NewRef(PyList_GET_ITEM(lanes, i));
        held = attribute_of(lane, names[LANE_TASK]);
        if (held == NULL) goto not_found;
        if (held == Py_None || held == task || Py_TYPE(held) != Py_TYPE(task)) goto not_found; /* (free: Python's) */
        if ((done = PyObject_CallMethodNoArgs(held, names[LANE_DONE])) == NULL) goto not_found;
        Py_DECREF(done);
        if (done != Py_True && done != Py_False) goto not_found; /* (an odd task's truth: the Python path's to judge) */
        if ((holds = attribute_is(lane, names[LANE_LOOP], loop)) <= 0) goto not_found; /* (a closed loop's: Python's) */
        if (done == Py_True) {
            *held_task = held;
            return lane;
        }
        Py_DECREF(held);
        Py_DECREF(lane);
    }
    return NULL;
not_found:
    Py_XDECREF(held);
    Py_DECREF(lane);
    return NULL;
}

/* The buffer list of the first free lane of `lanes`, taken for `task` (a new reference; its switch's record holds
   `name`, the task's), when the case above holds, with the values it held before the switch in `*held`; else NULL,
   with no exception set when the case does not hold (what could not be read here, the Python path reads again, and
   counts). Under the lock. */
static PyObject *
take_first_lane(RecorderCore *self, PyObject *lanes, PyObject *task, PyObject *loop, PyObject *name,
                Py_ssize_t *held_values)
{
    ModuleState *state = self->state;
    PyObject **names = state->lane_names, *tracks, *lane = NULL, *held = NULL, *buffer = NULL, *had, *events = NULL;
    PyObject *values[RECORD_FIELDS];
    int holds;
    if ((tracks = PyObject_GetAttr((PyObject *)self, names[LANE_TRACKS])) == NULL) goto not_taken;
    holds = attribute_is(tracks, names[LANE_TAKING], Py_False); /* (a collection recording while it takes one) */
    Py_DECREF(tracks);
    if (holds <= 0) goto not_taken;
    if ((lane = first_done_lane(self, lanes, task, loop, &held)) == NULL) goto not_taken;
    if ((had = attribute_of(lane, names[LANE_HAD])) == NULL) goto not_taken;
    holds = attribute_is(had, state->str_on, Py_False); /* (remembered for traced calls: Lane.take does more) */
    Py_DECREF(had);
    if (holds <= 0) goto not_taken;
    if ((buffer = attribute_of(lane, names[LANE_BUFFER])) == NULL || buffer == Py_None) goto not_taken;
    if ((holds = attribute_is(buffer, names[LANE_OWNER], held)) <= 0) goto not_taken;
    if ((events = attribute_of(buffer, state->str_events)) == NULL || !PyList_CheckExact(events)) goto not_taken;
    *held_values = PyList_GET_SIZE(events);
    if (*held_values + 2 * RECORD_FIELDS > self->max_values) goto not_taken; /* (a new buffer: the Python path's) */
    /* Tracks._take_lane and Lane.take, for this case: the done task records no more; the switch, then the task. */
    if (PyDict_DelItem(self->task_buffers, held) < 0) {
        if (!PyErr_ExceptionMatches(PyExc_KeyError)) goto failed;
        PyErr_Clear();
    }
    values[0] = Py_NewRef(self->task_switch);
    values[1] = Py_NewRef(name);
    values[2] = PyLong_FromLong(0);
    values[3] = PyLong_FromLong(0);
    values[4] = Py_NewRef(Py_None);
    if (append_event(state, events, values, PY_SSIZE_T_MAX) < 0) goto failed;
    if (set_attribute_of(buffer, names[LANE_OWNER], task) < 0 || set_attribute_of(lane, names[LANE_TASK], task) < 0 ||
        PyDict_SetItem(self->task_buffers, task, buffer) < 0) {
        goto failed;
    }
    Py_DECREF(buffer);
    Py_DECREF(lane);
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
    Py_XDECREF(lane);
    Py_XDECREF(held);
    return NULL;
}

/* The name of `task` (a new reference) where it is an _asyncio.Task, asked of its type's get_name as tracks.name_of
   asks it (not of an attribute of the instance's), which runs no Python code; else NULL, with no exception set: a
   subclass's get_name may run code that records, and the Python path, which takes a lane ready for that, asks it.
   _asyncio is imported by then (a loop runs): looked up, not imported. */
static PyObject *
c_task_name(ModuleState *state, PyObject *task)
{
    PyObject *module, *name;
    if (state->c_task_get_name == NULL) {
        if ((module = PyImport_GetModule(state->str_c_asyncio)) == NULL) {
            PyErr_Clear();
            return NULL;
        }
        state->c_task_type = PyObject_GetAttrString(module, "Task");
        Py_DECREF(module);
        if (state->c_task_type == NULL || !PyType_Check(state->c_task_type) ||
            (state->c_task_get_name = PyObject_GetAttr(state->c_task_type, state->str_get_name)) == NULL) {
            PyErr_Clear();
            Py_CLEAR(state->c_task_type);
            return NULL;
        }
    }
    if (!Py_IS_TYPE(task, (PyTypeObject *)state->c_task_type)) return NULL;
    if ((name = PyObject_CallOneArg(state->c_task_get_name, task)) == NULL || !PyUnicode_CheckExact(name)) {
        Py_XDECREF(name);
        PyErr_Clear(); /* (the Python path's to ask again, and to name it all the same) */
        return NULL;
    }
    return name;
}

/* The running thread's lanes, as the hint has them (borrowed), where the case above can hold; else NULL. */
static PyObject *
hinted_lanes(RecorderCore *self)
{
    PyObject *lanes = self->lanes;
    /* (Not where threads share a thread state, gevent's greenlets: the id would not tell this thread's lanes.) */
    if (lanes == NULL || !PyList_CheckExact(lanes) || !self->cache_threads ||
        self->lanes_thread != PyThreadState_GetID(PyThreadState_Get()) || self->task_switch == NULL ||
        self->task_buffers == NULL || !PyDict_CheckExact(self->task_buffers)) {
        return NULL;
    }
    return lanes;
}

/* The buffer list of the lane `task` (running on `loop`, with no buffer yet) takes here (a new reference), when the
   case above holds; NULL with no exception set when it does not (the Python path takes the task), or with one. */
PyObject *
first_lane_events(RecorderCore *self, PyObject *task, PyObject *loop)
{
    PyObject **names = self->state->lane_names, *lanes, *lock, *got, *events, *released, *name;
    PyObject *type, *value, *traceback;
    Py_ssize_t held = -1;
    /* The name its switch's record keeps (tracks.name_of: the task itself would live on in it until the next drain) */
    if (hinted_lanes(self) == NULL || (name = c_task_name(self->state, task)) == NULL) return NULL;
    if ((lanes = hinted_lanes(self)) == NULL) { /* (read again after the first look at _asyncio, which got attributes) */
        Py_DECREF(name);
        return NULL;
    }
    Py_INCREF(lanes); /* (held from here: Python code the lock runs may replace the hint and let it go) */
    if ((lock = PyObject_GetAttr((PyObject *)self, names[LANE_LOCK])) == NULL) {
        Py_DECREF(lanes);
        Py_DECREF(name);
        goto not_taken;
    }
    got = PyObject_CallMethodOneArg(lock, names[LANE_ACQUIRE], Py_False); /* (without waiting: a lock held elsewhere
                                                                              is the Python path's to wait for) */
    if (got != Py_True) {
        Py_XDECREF(got);
        Py_DECREF(lock);
        Py_DECREF(lanes);
        Py_DECREF(name);
        goto not_taken;
    }
    Py_DECREF(got);
    events = take_first_lane(self, lanes, task, loop, name, &held);
    Py_DECREF(name);
    Py_DECREF(lanes);
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

/* Timeline._hint_lanes(lanes, task_switch, first_fit): the running thread's lanes (lanes.ThreadLanes.lanes, a list),
   or None for none; tracks.TASK_SWITCH; lanes.FIRST_FIT. */
PyObject *
core_hint_lanes(RecorderCore *self, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *old_lanes = self->lanes, *old_switch = self->task_switch;
    Py_ssize_t first_fit;
    if (nargs != 3 || (args[0] != Py_None && !PyList_CheckExact(args[0]))) {
        PyErr_SetString(PyExc_TypeError,
                        "_hint_lanes(lanes, task_switch, first_fit): a list or None, TASK_SWITCH and an int");
        return NULL;
    }
    if ((first_fit = PyLong_AsSsize_t(args[2])) == -1 && PyErr_Occurred()) return NULL;
    self->lanes = args[0] == Py_None ? NULL : Py_NewRef(args[0]);
    self->lanes_thread = args[0] == Py_None ? 0 : PyThreadState_GetID(PyThreadState_Get());
    self->task_switch = Py_NewRef(args[1]);
    self->first_fit = first_fit;
    Py_XDECREF(old_lanes);
    Py_XDECREF(old_switch);
    Py_RETURN_NONE;
}
