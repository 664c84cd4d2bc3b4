/* Python 3.11 with C functions (builtins=True): the profile function, set on every thread state at start() and,
   through threading.setprofile, on each thread started later (the first event of such a thread installs it in place
   of the Python-level hook). Without C functions, the frame evaluation hook does (evalframe.c). */

#include "tracer.h"

#if !RT_MONITORING

static int
profile_event(Tracer *self, PyFrameObject *frame, int what, PyObject *arg);

/* The profile function. The tracer is held while it runs: decide may stop it (which unsets the profile function,
   dropping the interpreter's reference) and let it go. */
static int
profile(PyObject *tracer, PyFrameObject *frame, int what, PyObject *arg)
{
    Py_INCREF(tracer);
    int result = profile_event((Tracer *)tracer, frame, what, arg);
    Py_DECREF(tracer);
    return result;
}

static int
profile_event(Tracer *self, PyFrameObject *frame, int what, PyObject *arg)
{
    uint32_t loc;
    switch (what) {
    case PyTrace_CALL: {
        PyCodeObject *code = PyFrame_GetCode(frame); /* the frame keeps it alive */
        Py_DECREF(code);
        if (rt_code_location(self, (PyObject *)code, &loc) > 0 && self->running) {
            ThreadBuf *t = rt_thread(self);
            if (t != NULL) {
                /* (no call the look-up makes reaches this function: the interpreter is tracing meanwhile) */
                int task_step = (code->co_flags & CO_COROUTINE) && !t->in_task && rt_task_step_begin(self, t);
                rt_push(self, t, code, loc);
                if (task_step) {
                    t->step_depth = t->depth;
                }
            }
            else {
                self->dropped++;
            }
        }
        break;
    }
    case PyTrace_RETURN: {
        PyCodeObject *code = PyFrame_GetCode(frame);
        Py_DECREF(code);
        if (rt_code_decided(self, (PyObject *)code, &loc) > 0) {
            ThreadBuf *t = rt_thread(self);
            if (t != NULL) {
                rt_pop(self, t, code, arg == NULL ? RT_CALL_RAISED : RT_CALL); /* NULL: an exception left it */
                if (t->in_task && t->depth < t->step_depth) {
                    rt_task_step_end(t);
                }
                rt_wake_if_due(self, t, 0);
            }
        }
        break;
    }
    case PyTrace_C_CALL:
    case PyTrace_C_RETURN:
    case PyTrace_C_EXCEPTION: {
        if (!self->builtins || !rt_is_c_function(self, arg)) {
            break;
        }
        PyCodeObject *code = PyFrame_GetCode(frame); /* the caller's */
        Py_DECREF(code);
        uint32_t caller_loc;
        if (what == PyTrace_C_CALL) {
            if (rt_code_location(self, (PyObject *)code, &caller_loc) > 0 && self->running &&
                rt_c_location(self, arg, &loc)) {
                ThreadBuf *t = rt_thread(self);
                if (t != NULL) {
                    rt_push(self, t, arg, loc);
                }
                else {
                    self->dropped++;
                }
            }
        }
        else if (rt_code_decided(self, (PyObject *)code, &caller_loc) > 0) {
            ThreadBuf *t = rt_thread(self);
            if (t != NULL) {
                rt_pop(self, t, arg, what == PyTrace_C_RETURN ? RT_CALL : RT_CALL_RAISED);
                rt_wake_if_due(self, t, 0);
            }
        }
        break;
    }
    default:
        break;
    }
    return 0;
}

/* threading.setprofile's hook, called (frame, event, arg) by the thread's first event: puts the profile function in
   its place, and gives it that event. */
static PyObject *
thread_hook(PyObject *tracer, PyObject *const *args, Py_ssize_t nargs)
{
    Tracer *self = (Tracer *)tracer;
    if (nargs != 3 || !PyFrame_Check(args[0]) || !PyUnicode_Check(args[1])) {
        Py_RETURN_NONE;
    }
    if (!self->running) {
        if (_PyEval_SetProfile(PyThreadState_Get(), NULL, NULL) < 0) {
            return NULL;
        }
        Py_RETURN_NONE;
    }
    if (_PyEval_SetProfile(PyThreadState_Get(), profile, tracer) < 0) {
        return NULL;
    }
    static const char *const names[] = {"call", "exception", "line", "return", "c_call", "c_exception", "c_return"};
    for (int what = 0; what < 7; what++) {
        if (PyUnicode_CompareWithASCIIString(args[1], names[what]) == 0) {
            /* "return" with None may have been an exception (the hook cannot tell): a call here is what it sees */
            if (what == PyTrace_CALL || what == PyTrace_C_CALL) {
                profile(tracer, (PyFrameObject *)args[0], what, args[2]);
            }
            break;
        }
    }
    Py_RETURN_NONE;
}

static PyMethodDef thread_hook_def = {"thread_hook", (PyCFunction)(void (*)(void))thread_hook, METH_FASTCALL, NULL};

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
    PyObject *hook = PyCFunction_New(&thread_hook_def, (PyObject *)self);
    if (hook == NULL) {
        return -1;
    }
    int failed = set_thread_hook(hook);
    Py_DECREF(hook);
    if (failed) {
        return -1;
    }
    PyInterpreterState *interp = PyThreadState_GetInterpreter(PyThreadState_Get());
    for (PyThreadState *ts = PyInterpreterState_ThreadHead(interp); ts != NULL; ts = PyThreadState_Next(ts)) {
        if (_PyEval_SetProfile(ts, profile, (PyObject *)self) < 0) {
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
        if (ts->c_profilefunc == profile && ts->c_profileobj == (PyObject *)self &&
            _PyEval_SetProfile(ts, NULL, NULL) < 0) {
            failed = -1;
        }
    }
    return failed;
}

#endif
