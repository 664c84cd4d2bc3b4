/* Which asyncio loop runs in this thread, read where asyncio keeps it, and configure(): what the recorder needs from
   the Python side, with the probe that decides whether the loop can be read without a call. */

#include "speedups.h"

#if PY_VERSION_HEX >= 0x030D0000 && PY_VERSION_HEX < 0x030E0000
/* CPython 3.13 allocates every thread state as a _PyThreadStateImpl (Include/internal/pycore_tstate.h), whose first
   field after the public PyThreadState is asyncio's running loop (a strong reference, or NULL), set by its C module's
   _set_running_loop and read by its get_running_loop. The internal header is not for extensions: the word is read at
   that offset, and only once configure()'s probe saw asyncio's setter write it there (probe_loop_slot). */
#define LOOP_SLOT 1
static inline PyObject *
loop_slot(PyThreadState *tstate)
{
    return *(PyObject **)((char *)tstate + sizeof(PyThreadState));
}
#else
#define LOOP_SLOT 0
#endif

#if PY_VERSION_HEX < 0x030C0000 && !defined(MS_WINDOWS)
/* CPython 3.11 keeps a holder of the running loop in the thread state dict, with the pid of the process that set it:
   asyncio's get_running_loop answers its loop only in that process (a forked child inherits the dict), and calls
   getpid() each time to know, a system call on every event of a task. Its shape (Modules/_asynciomodule.c,
   PyRunningLoopHolder) is read here, and only once configure()'s probe saw asyncio's setter make such a holder
   (probe_holder); the pid is this process's, asked once and again after a fork (forget_pid). */
#include <pthread.h>
#include <unistd.h>
#define LOOP_HOLDER 1
typedef struct {
    PyObject_HEAD PyObject *rl_loop;
    pid_t rl_pid;
} LoopHolder;
static pid_t own_pid_known; /* 0: not asked since the process started or forked */
static int forget_pid_set;  /* the at-fork handler is in place: until then, the holder is not read */

static void
forget_pid(void)
{
    own_pid_known = 0;
}

static pid_t
own_pid(void)
{
    if (own_pid_known == 0) own_pid_known = getpid();
    return own_pid_known;
}

/* The loop of `holder` (a LoopHolder), as asyncio's get_running_loop answers it: None where it holds None or was set
   in another process (a new reference). */
static PyObject *
held_loop(PyObject *holder)
{
    LoopHolder *held = (LoopHolder *)holder;
    PyObject *loop = held->rl_loop == NULL || held->rl_pid != own_pid() ? Py_None : held->rl_loop;
    return Py_NewRef(loop);
}

/* Whether what the thread state dict holds under the key is a holder of `loop` as LoopHolder reads one, set by this
   process, of asyncio's holder type (and of `type`, where not NULL): its type, or NULL. */
static PyTypeObject *
probe_holder(ModuleState *state, PyObject *dict, PyObject *loop, PyTypeObject *type)
{
    PyObject *held = PyDict_GetItemWithError(dict, state->str_running_loop); /* borrowed */
    PyTypeObject *kind;
    if (held == NULL) {
        PyErr_Clear();
        return NULL;
    }
    kind = Py_TYPE(held);
    if (held == loop || (type != NULL && kind != type) || strcmp(kind->tp_name, "_RunningLoopHolder") != 0 ||
        kind->tp_basicsize != (Py_ssize_t)sizeof(LoopHolder) || kind->tp_itemsize != 0) {
        return NULL;
    }
    return ((LoopHolder *)held)->rl_loop == loop && ((LoopHolder *)held)->rl_pid == getpid() ? kind : NULL;
}
#else
#define LOOP_HOLDER 0
#endif

/* This thread's running asyncio loop, as asyncio.events._get_running_loop() answers (a new reference; None: none),
   or NULL with an exception set. Where configure() saw asyncio keep it in the thread state dict (CPython 3.11 and
   3.12, with asyncio's C module), a thread whose dict has nothing or None under the key runs no loop, and that is
   read without calling asyncio: the call, whose own cache misses in a thread that never ran a loop, was most of what
   finding the buffer cost. Anything else there (a loop, or 3.11's holder of one) is asyncio's to interpret: it is
   asked. */
PyObject *
running_loop(ModuleState *state)
{
#if LOOP_SLOT
    if (state->running_loop_in_slot) {
        PyObject *loop = loop_slot(PyThreadState_Get());
        return Py_NewRef(loop == NULL ? Py_None : loop);
    }
#endif
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
#if LOOP_HOLDER
            if (held != NULL && (PyObject *)Py_TYPE(held) == state->loop_holder_type) return held_loop(held);
#endif
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
#if LOOP_HOLDER
    PyTypeObject *holder;
#endif
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
#if LOOP_HOLDER
    holder = found == 1 && forget_pid_set ? probe_holder(state, dict, mine, NULL) : NULL;
#endif
    if (found == 1) found = loop_reads_back(state, dict, set_loop, Py_None);
#if LOOP_HOLDER
    if (found == 1 && holder != NULL && probe_holder(state, dict, Py_None, holder) == holder) {
        Py_XSETREF(state->loop_holder_type, Py_NewRef((PyObject *)holder));
    }
#endif
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

#if LOOP_SLOT
/* 3.13: whether asyncio's `set_loop` writes the running loop into the thread state's slot (see loop_slot): a loop of
   the probe's own set, then none, each read back from the slot and from asyncio; the thread's running loop set back
   as found. 1 or 0, or -1 with an exception set that is not an Exception (any other makes the answer no). */
static int
probe_loop_slot(ModuleState *state, PyObject *set_loop)
{
    PyThreadState *tstate = PyThreadState_Get();
    PyObject *before, *mine = NULL, *result, *answer, *type = NULL, *value = NULL, *tb = NULL;
    int found = -1;
    if (set_loop == Py_None) return 0;
    if ((before = PyObject_CallNoArgs(state->get_running_loop)) == NULL) goto failed;
    if (loop_slot(tstate) != (before == Py_None ? NULL : before)) {
        found = 0; /* the slot does not hold what asyncio answers: not asyncio's, not touched */
        Py_DECREF(before);
        return found;
    }
    if ((mine = PyObject_CallNoArgs((PyObject *)&PyBaseObject_Type)) == NULL) goto restore;
    if ((result = PyObject_CallOneArg(set_loop, mine)) == NULL) goto restore;
    Py_DECREF(result);
    if ((answer = PyObject_CallNoArgs(state->get_running_loop)) == NULL) goto restore;
    found = answer == mine && loop_slot(tstate) == mine;
    Py_DECREF(answer);
    if (found == 1) {
        if ((result = PyObject_CallOneArg(set_loop, Py_None)) == NULL) goto restore;
        Py_DECREF(result);
        if ((answer = PyObject_CallNoArgs(state->get_running_loop)) == NULL) goto restore;
        found = answer == Py_None && loop_slot(tstate) == NULL;
        Py_DECREF(answer);
    }
restore:
    if (found < 0) PyErr_Fetch(&type, &value, &tb);
    result = PyObject_CallOneArg(set_loop, before); /* back as it was, whatever the probe found */
    Py_DECREF(before);
    Py_XDECREF(mine);
    if (result == NULL) {
        if (type != NULL) { /* the first error is the one to report */
            PyErr_Clear();
            PyErr_Restore(type, value, tb);
        }
        found = -1;
    }
    else {
        Py_DECREF(result);
        if (type != NULL) PyErr_Restore(type, value, tb);
    }
    if (found >= 0) return found;
failed:
    if (!PyErr_ExceptionMatches(PyExc_Exception)) return -1;
    PyErr_Clear();
    return 0;
}
#endif

/* configure(get_running_loop, span_kind, instant_kind, wake[, set_running_loop]): returns whether current_events()
   reads the running loop from the thread state or its dict (see running_loop); without set_running_loop (or with
   None) it asks get_running_loop on every event. */
PyObject *
configure(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    ModuleState *state = PyModule_GetState(module);
    int found;
    if (nargs < 4 || nargs > 6 || (nargs == 6 && args[5] != Py_None && !PyDict_CheckExact(args[5]))) {
        PyErr_SetString(PyExc_TypeError, "configure(get_running_loop, span_kind, instant_kind, wake"
                                         "[, set_running_loop[, current_tasks: dict | None]])");
        return NULL;
    }
    state->running_loop_in_dict = 0; /* until the probe says so */
    state->running_loop_in_slot = 0;
    Py_CLEAR(state->loop_holder_type);
#if LOOP_HOLDER
    if (!forget_pid_set) forget_pid_set = pthread_atfork(NULL, NULL, forget_pid) == 0;
#endif
    state->loop_free_dict = NULL;
    Py_XSETREF(state->get_running_loop, Py_NewRef(args[0]));
    Py_XSETREF(state->span_kind, Py_NewRef(args[1]));
    Py_XSETREF(state->instant_kind, Py_NewRef(args[2]));
    Py_XSETREF(state->wake, Py_NewRef(args[3]));
    Py_CLEAR(state->current_tasks);
    if (nargs == 6 && args[5] != Py_None) state->current_tasks = Py_NewRef(args[5]);
#if LOOP_SLOT
    found = nargs >= 5 ? probe_loop_slot(state, args[4]) : 0;
    if (found < 0) return NULL;
    state->running_loop_in_slot = found;
    if (found) return Py_NewRef(Py_True);
#endif
    found = nargs >= 5 ? probe_loop_key(state, args[4]) : 0;
    if (found < 0) return NULL;
    state->running_loop_in_dict = found;
    if (!found) Py_CLEAR(state->loop_holder_type);
    return PyBool_FromLong(found);
}

/* The running loop as the recorder finds it, for the tests to hold it to asyncio's answer. */
PyObject *
module_running_loop(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    return running_loop(PyModule_GetState(module));
}
