/* Python 3.11 with C functions (builtins=True): the profile function, set on every thread state at start() and,
   through threading.setprofile, on each thread started later (the first event of such a thread installs it in place
   of the Python-level hook). Without C functions, the frame evaluation hook does (evalframe.c). */

#include "tracer.h"

#if !RT_MONITORING

/* The profile object is None, and the profile function finds the tracer in rt_running, which holds it while it runs:
   the interpreter calls the function with the object it borrows from the thread, after making the frame's object,
   which may set off a collection whose code (traced too) stops the tracer and lets it go, or lets another thread do
   so. Each event has a fast path, taken where nothing is to be decided or made and no Python code runs (the tracer is
   not held: nothing can let it go), and a slow one, the whole of it, which holds the tracer while it runs: decide may
   stop it (dropping rt_running's reference) and let it go. Each fast path is a function of its own, which the profile
   function jumps to: one body for all events saved every register any of them needs on every event. An entry on the
   stack notes its frame: a Python call's own, a C call's caller's. A Python call's end is the call on top of the stack
   if its code and frame are the top's; a C call's, if its callable and the frame it was called from are (the same
   callable called again from code not recorded, inside that call, is not its end). A C call is made from recorded code
   if the top's frame is its caller's (an entry is made only in recorded code's frames), else as co_extra tells. */

static int python_call_slow(Tracer *self, PyFrameObject *frame);
static int python_return_slow(Tracer *self, PyFrameObject *frame, PyObject *arg);
static int c_call_slow(Tracer *self, PyFrameObject *frame, PyObject *callable);
static int c_end_slow(Tracer *self, PyFrameObject *frame, PyObject *callable, uint32_t kind);

/* This thread's buffer if the cache holds it, else NULL (rt_thread finds or makes it: the slow path's). */
static inline ThreadBuf *
cached_thread(Tracer *self)
{
    return self->cache_buf != NULL && pthread_equal(pthread_self(), self->cache_thread) ? self->cache_buf : NULL;
}

/* The call on top of the thread's stack, if it is the one of `key` made from `from`: the end of that call. */
static inline int
ends_top(ThreadBuf *t, const void *key, const void *from)
{
    return !t->lost && t->depth > 0 && t->stack[t->depth - 1].key == key && t->stack[t->depth - 1].from == from;
}

static __attribute__((noinline)) int
python_call(Tracer *self, PyFrameObject *frame)
{
    PyCodeObject *code = (PyCodeObject *)FRAME_OBJECT_CODE(frame);
    uint32_t loc;
    int decided = rt_code_decided(self, (PyObject *)code, &loc);
    if (decided == 0) {
        return 0;
    }
    ThreadBuf *t;
    if (decided < 0 || !self->running || (code->co_flags & CO_COROUTINE) || (t = cached_thread(self)) == NULL) {
        return python_call_slow(self, frame);
    }
    rt_push_from(self, t, code, loc, frame);
    return 0;
}

/* wake is due (a buffer passed a quarter full): called with the tracer held, as the event's last thing */
static void
wake_held(Tracer *self, ThreadBuf *t)
{
    Py_INCREF(self);
    rt_wake_if_due(self, t, 0);
    Py_DECREF(self);
}

static __attribute__((noinline)) int
python_return(Tracer *self, PyFrameObject *frame, PyObject *arg)
{
    ThreadBuf *t = cached_thread(self);
    if (t == NULL || !ends_top(t, FRAME_OBJECT_CODE(frame), frame)) {
        return python_return_slow(self, frame, arg);
    }
    rt_end_top(self, t, t->stack[t->depth - 1].record ? rt_ticks() : 0, arg == NULL ? RT_CALL_RAISED : RT_CALL);
    if (t->in_task && t->depth < t->step_depth) {
        rt_task_step_end(t);
    }
    if (self->wake_due) {
        wake_held(self, t);
    }
    return 0;
}

static __attribute__((noinline)) int
c_call(Tracer *self, PyFrameObject *frame, PyObject *callable)
{
    if (!self->builtins || !rt_is_c_function(self, callable)) {
        return 0;
    }
    uint32_t caller_loc, loc;
    ThreadBuf *t = cached_thread(self);
    int decided = t != NULL && t->depth > 0 && t->stack[t->depth - 1].from == (const void *)frame
                      ? 1
                      : rt_code_decided(self, FRAME_OBJECT_CODE(frame), &caller_loc);
    if (decided == 0) {
        return 0;
    }
    PyObject *type;
    const void *method = rt_c_function_key(callable, &type);
    if (decided < 0 || !self->running || t == NULL || !rt_c_location_known(self, method, type, &loc)) {
        return c_call_slow(self, frame, callable);
    }
    rt_push_from(self, t, callable, loc, frame);
    return 0;
}

static __attribute__((noinline)) int
c_end(Tracer *self, PyFrameObject *frame, PyObject *callable, uint32_t kind)
{
    ThreadBuf *t = cached_thread(self);
    if (t == NULL || !ends_top(t, callable, frame)) {
        return c_end_slow(self, frame, callable, kind);
    }
    rt_end_top(self, t, t->stack[t->depth - 1].record ? rt_ticks() : 0, kind);
    if (self->wake_due) {
        wake_held(self, t);
    }
    return 0;
}

/* The profile function. */
static int
profile(PyObject *unused, PyFrameObject *frame, int what, PyObject *arg)
{
    Tracer *self = rt_running; /* (not the profile object: see the top of this file) */
    if (self == NULL) {
        return 0;
    }
    switch (what) {
    case PyTrace_CALL:
        return python_call(self, frame);
    case PyTrace_RETURN:
        return python_return(self, frame, arg); /* arg NULL: an exception left it */
    case PyTrace_C_CALL:
        return c_call(self, frame, arg);
    case PyTrace_C_RETURN:
        return c_end(self, frame, arg, RT_CALL);
    case PyTrace_C_EXCEPTION:
        return c_end(self, frame, arg, RT_CALL_RAISED);
    default:
        return 0;
    }
}

/* The slow paths: each event whole, the tracer held. */

static __attribute__((noinline)) int
python_call_slow(Tracer *self, PyFrameObject *frame)
{
    Py_INCREF(self);
    PyCodeObject *code = (PyCodeObject *)FRAME_OBJECT_CODE(frame);
    uint32_t loc;
    if (rt_code_location(self, (PyObject *)code, &loc) > 0 && self->running) {
        ThreadBuf *t = rt_thread(self);
        if (t != NULL) {
            /* (no call the look-up makes reaches this function: the interpreter is tracing meanwhile) */
            int task_step = (code->co_flags & CO_COROUTINE) && !t->in_task && rt_task_step_begin(self, t);
            rt_push_from(self, t, code, loc, frame);
            if (task_step) {
                t->step_depth = t->depth;
            }
        }
        else {
            self->dropped++;
        }
    }
    Py_DECREF(self);
    return 0;
}

static __attribute__((noinline)) int
python_return_slow(Tracer *self, PyFrameObject *frame, PyObject *arg)
{
    Py_INCREF(self);
    PyObject *code = FRAME_OBJECT_CODE(frame);
    uint32_t loc;
    if (rt_code_decided(self, code, &loc) > 0) {
        ThreadBuf *t = rt_thread(self);
        if (t != NULL) {
            rt_pop(self, t, code, arg == NULL ? RT_CALL_RAISED : RT_CALL);
            if (t->in_task && t->depth < t->step_depth) {
                rt_task_step_end(t);
            }
            rt_wake_if_due(self, t, 0);
        }
    }
    Py_DECREF(self);
    return 0;
}

static __attribute__((noinline)) int
c_call_slow(Tracer *self, PyFrameObject *frame, PyObject *callable)
{
    Py_INCREF(self);
    uint32_t caller_loc, loc;
    if (rt_code_location(self, FRAME_OBJECT_CODE(frame), &caller_loc) > 0 && self->running &&
        rt_c_location(self, callable, &loc)) {
        ThreadBuf *t = rt_thread(self);
        if (t != NULL) {
            rt_push_from(self, t, callable, loc, frame);
        }
        else {
            self->dropped++;
        }
    }
    Py_DECREF(self);
    return 0;
}

static __attribute__((noinline)) int
c_end_slow(Tracer *self, PyFrameObject *frame, PyObject *callable, uint32_t kind)
{
    Py_INCREF(self);
    uint32_t caller_loc;
    if (self->builtins && rt_is_c_function(self, callable) &&
        rt_code_decided(self, FRAME_OBJECT_CODE(frame), &caller_loc) > 0) {
        ThreadBuf *t = rt_thread(self);
        if (t != NULL) {
            rt_pop(self, t, callable, kind);
            rt_wake_if_due(self, t, 0);
        }
    }
    Py_DECREF(self);
    return 0;
}
/* threading.setprofile's hook, called (frame, event, arg) by the thread's first event: puts the running tracer's
   profile function in its place, and gives it that event; none running, it takes itself off the thread. */
static PyObject *
thread_hook(PyObject *unused, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyFrame_Check(args[0]) || !PyUnicode_Check(args[1])) {
        Py_RETURN_NONE;
    }
    if (rt_running == NULL || !rt_running->running) {
        if (_PyEval_SetProfile(PyThreadState_Get(), NULL, NULL) < 0) {
            return NULL;
        }
        Py_RETURN_NONE;
    }
    if (_PyEval_SetProfile(PyThreadState_Get(), profile, Py_None) < 0) {
        return NULL;
    }
    static const char *const names[] = {"call", "exception", "line", "return", "c_call", "c_exception", "c_return"};
    for (int what = 0; what < 7; what++) {
        if (PyUnicode_CompareWithASCIIString(args[1], names[what]) == 0) {
            /* "return" with None may have been an exception (the hook cannot tell): a call here is what it sees */
            if (what == PyTrace_CALL || what == PyTrace_C_CALL) {
                profile(Py_None, (PyFrameObject *)args[0], what, args[2]); /* (it finds the tracer, if any still) */
            }
            break;
        }
    }
    Py_RETURN_NONE;
}

static PyMethodDef thread_hook_def = {"thread_hook", (PyCFunction)(void (*)(void))thread_hook, METH_FASTCALL, NULL};
/* The hook, made once and never freed: the interpreter calls a thread's profile object through a reference it
   borrows from the thread, after making the frame's object, which may set off a collection whose callbacks, traced,
   meet the hook (a thread's first event) and take it off the thread; a hook freed then would be called freed. */
static PyObject *thread_hook_object;

static int
set_thread_hook(PyObject *hook)
{
    PyObject *threading = PyImport_ImportModule("threading");
    PyObject *result = threading == NULL ? NULL : PyObject_CallMethod(threading, "setprofile", "O", hook);
    Py_XDECREF(threading);
    Py_XDECREF(result);
    return result == NULL ? -1 : 0;
}

int
rt_hooks_start(Tracer *self)
{
    if (!self->builtins) {
        return rt_eval_hook_start(self);
    }
    if (thread_hook_object == NULL && (thread_hook_object = PyCFunction_New(&thread_hook_def, NULL)) == NULL) {
        return -1;
    }
    if (set_thread_hook(thread_hook_object) < 0) {
        return -1;
    }
    PyInterpreterState *interp = PyThreadState_GetInterpreter(PyThreadState_Get());
    for (PyThreadState *ts = PyInterpreterState_ThreadHead(interp); ts != NULL; ts = PyThreadState_Next(ts)) {
        if (_PyEval_SetProfile(ts, profile, Py_None) < 0) {
            return -1;
        }
    }
    return 0;
}

int
rt_hooks_stop(Tracer *self)
{
    if (!self->builtins) {
        rt_eval_hook_stop(self);
        return 0;
    }
    int failed = set_thread_hook(Py_None);
    PyInterpreterState *interp = PyThreadState_GetInterpreter(PyThreadState_Get());
    for (PyThreadState *ts = PyInterpreterState_ThreadHead(interp); ts != NULL; ts = PyThreadState_Next(ts)) {
        if (ts->c_profilefunc == profile &&
            _PyEval_SetProfile(ts, NULL, NULL) < 0) {
            failed = -1;
        }
    }
    return failed;
}

#endif
