/* Greenlets share their thread, each with a stack of its own that a switch suspends whole: each has open calls of its
   own. As the program switches (client/functions/greenlet_switches.py follows it through greenlet.settrace), the
   open calls of the greenlet switched to take the place of the thread's, which go to the greenlet left, kept as a
   capsule until it is switched to again; and the records from then on are noted as the greenlet's (its lane: a weak
   reference to it), as an asyncio task's step notes its task. The Python twin: ThreadCalls.swap (thread_calls.py). */

#include "tracer.h"

#define CAPSULE_NAME "ringtrace.functions.greenlet_calls"

/* A greenlet's open calls while it is suspended: what its thread's buffer held of them. */
typedef struct {
    ThreadBuf *thread; /* held (refs) */
    OpenCall *stack;
    Py_ssize_t depth, capacity, lost;
    int in_task;
    Py_ssize_t step_depth;
    PyObject *step_task; /* a strong reference, or NULL */
} GreenletCalls;

static void
greenlet_calls_gone(PyObject *capsule)
{
    GreenletCalls *calls = PyCapsule_GetPointer(capsule, CAPSULE_NAME);
    if (calls == NULL) {
        PyErr_Clear();
        return;
    }
    free(calls->stack);
    Py_CLEAR(calls->step_task);
    rt_thread_release(calls->thread);
    free(calls);
}

/* The capsule's calls (NULL: None), or NULL with TypeError set (*failed). */
static GreenletCalls *
calls_of(PyObject *saved, int *failed)
{
    *failed = 0;
    if (saved == Py_None) {
        return NULL;
    }
    GreenletCalls *calls = PyCapsule_GetPointer(saved, CAPSULE_NAME);
    if (calls == NULL) {
        PyErr_Clear();
        PyErr_SetString(PyExc_TypeError, "Tracer: saved takes what switch_calls returned, or None");
        *failed = 1;
    }
    return calls;
}

/* Whose the records of the thread are now: the task of the step open, else the greenlet (a new reference, or NULL). */
static PyObject *
owner(ThreadBuf *t)
{
    return Py_XNewRef(t->in_task ? t->step_task : t->base);
}

/* switch_calls(saved, lane) -> the open calls of the greenlet left (None while not running): see GreenletCalls
   (thread_calls.py). */
PyObject *
rt_switch_calls(Tracer *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        return PyErr_Format(PyExc_TypeError, "Tracer.switch_calls takes (saved, lane), got %zd arguments", nargs);
    }
    int failed;
    GreenletCalls *in = calls_of(args[0], &failed);
    if (failed) {
        return NULL;
    }
    if (!self->running) {
        Py_RETURN_NONE;
    }
    ThreadBuf *t = rt_thread(self);
    if (t == NULL) {
        Py_RETURN_NONE;
    }
    /* The greenlet left's calls go into the capsule given (the greenlet switched to takes what it held), or a new
       one. (Nothing below runs Python code until the notes: t stays this thread's.) */
    GreenletCalls swapped = {0};
    PyObject *capsule;
    if (in != NULL && in->thread == t) {
        swapped = *in;
        capsule = Py_NewRef(args[0]);
    }
    else {
        in = calloc(1, sizeof(GreenletCalls));
        if (in == NULL) {
            return PyErr_NoMemory();
        }
        capsule = PyCapsule_New(in, CAPSULE_NAME, greenlet_calls_gone);
        if (capsule == NULL) {
            free(in);
            return NULL;
        }
        t->refs++;
        in->thread = t;
    }
    in->stack = t->stack;
    in->depth = t->depth;
    in->capacity = t->capacity;
    in->lost = t->lost;
    in->in_task = t->in_task;
    in->step_depth = t->step_depth;
    in->step_task = t->step_task; /* (the reference moves) */
    t->stack = swapped.stack;
    t->depth = swapped.depth;
    t->capacity = swapped.capacity;
    t->lost = swapped.lost;
    t->in_task = swapped.in_task;
    t->step_depth = swapped.step_depth;
    t->step_task = swapped.step_task;
    PyObject *old_base = t->base;
    t->base = args[1] == Py_None ? NULL : Py_NewRef(args[1]);
    rt_add_note(t, owner(t)); /* (no memory: the records after stay the greenlet left's) */
    Py_XDECREF(old_base);
    return capsule;
}

/* close_calls(saved, lane): the open calls of a greenlet left suspended end now, as lane's: see GreenletCalls. */
PyObject *
rt_close_calls(Tracer *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        return PyErr_Format(PyExc_TypeError, "Tracer.close_calls takes (saved, lane), got %zd arguments", nargs);
    }
    int failed;
    GreenletCalls *calls = calls_of(args[0], &failed);
    if (failed) {
        return NULL;
    }
    if (calls == NULL || calls->depth == 0 || calls->thread->tracer != self) {
        Py_RETURN_NONE;
    }
    ThreadBuf *t = calls->thread;
    PyObject *lane = args[1] == Py_None ? NULL : args[1];
    rt_add_note(t, Py_XNewRef(calls->in_task ? calls->step_task : lane));
    int64_t now = rt_ticks();
    while (calls->depth > 0) {
        OpenCall *call = &calls->stack[--calls->depth];
        if (call->record && now - call->start >= self->min_duration_ticks) {
            rt_write_record(self, t, call->start, now, call->loc, RT_CALL);
        }
    }
    self->dropped += (uint64_t)calls->lost;
    calls->lost = 0;
    rt_add_note(t, owner(t));
    Py_INCREF(self);
    rt_wake_if_due(self, NULL, 0);
    Py_DECREF(self);
    Py_RETURN_NONE;
}
