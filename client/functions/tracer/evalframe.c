/* Python functions' calls through the frame evaluation hook (PEP 523; on 3.11 with C functions, the profile function
   sees them instead), in place of sys.monitoring's PY_START and PY_RETURN callbacks or the profile function, for its
   cost. The profile function makes the interpreter build a frame object, fetch and
   restore the exception state and call it twice for every call; sys.monitoring calls a Python-level callable twice,
   with a Python int made for the offset each time. The hook is called once per frame evaluation (a call, or a
   generator's or coroutine's resume) around the interpreter's own evaluation, and sees the same calls: it returns the
   frame's result (NULL: an exception left it). Another hook in place (a debugger's) is chained, not replaced.

   A generator's or coroutine's frame is also evaluated once when it is made (up to RETURN_GENERATOR, still owned by
   the thread): not a call the profile function reports, nor this hook. */

#include "tracer.h" /* Python.h: _GNU_SOURCE, for pthread_getattr_np */

#define GENERATOR_FLAGS (CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR)

/* A frame evaluated through the hook enters the interpreter's eval function anew, on the C stack, where a call the
   interpreter inlines does not: a deep recursion that runs untraced would overflow the C stack under the hook. So
   the hook keeps a reserve of C stack (a quarter of the thread's, at most STACK_RESERVE): a frame met below it is
   evaluated with a RecursionError thrown into it (the interpreter unwinds and frees it), as the interpreter does when
   its own C recursion limit is reached. On 3.12+ the eval function's entry also counts against that limit
   (PY_EVAL_C_STACK_UNITS, 2, of Py_C_RECURSION_LIMIT: 1,500 on 3.12, so RecursionError at 750 calls deep): the hook
   gives that back, so that the Python recursion limit is the limit as it is untraced, the reserve guarding the C
   stack. */
#define STACK_RESERVE ((uintptr_t)512 << 10)

/* The lowest address this thread's frames may reach: 0 not yet known, 1 unknown (no reserve kept). */
static __thread uintptr_t stack_floor __attribute__((tls_model("initial-exec")));

static void
find_stack_floor(uintptr_t here)
{
    pthread_attr_t attr;
    void *low = NULL;
    size_t size = 0;
    stack_floor = 1;
    if (pthread_getattr_np(pthread_self(), &attr) == 0) {
        if (pthread_attr_getstack(&attr, &low, &size) == 0 && low != NULL && (uintptr_t)low < here) {
            uintptr_t reserve = size / 4 < STACK_RESERVE ? size / 4 : STACK_RESERVE;
            stack_floor = (uintptr_t)low + reserve;
        }
        pthread_attr_destroy(&attr);
    }
}

static _PyFrameEvalFunction chained;
/* The hook a stop found put over eval_hook (which calls it: the stop leaves eval_hook where it is). A start that finds
   that hook still in place traces through it: chaining it again would have the two call each other, without end. One
   that finds another (that hook took itself out, putting the interpreter's own back) chains that one anew. */
static _PyFrameEvalFunction over;

/* The frame evaluated, untraced. */
static inline PyObject *
evaluate(PyThreadState *tstate, struct _PyInterpreterFrame *frame, int throwflag)
{
    char probe;
    uintptr_t here = (uintptr_t)&probe;
    if (stack_floor == 0) {
        find_stack_floor(here);
    }
    if (here < stack_floor) {
        PyErr_SetString(PyExc_RecursionError, "maximum recursion depth exceeded (C stack, under function tracing)");
        return chained(tstate, frame, 1);
    }
#if PY_VERSION_HEX >= 0x030C0000
    tstate->c_recursion_remaining += 2;
    PyObject *result = chained(tstate, frame, throwflag);
    tstate->c_recursion_remaining -= 2;
    return result;
#else
    return chained(tstate, frame, throwflag);
#endif
}

/* decide runs for a thread with no buffer (dropped()): its own calls are let be. */
static __thread int deciding_unbuffered __attribute__((tls_model("initial-exec")));

/* A call that found no buffer (its thread state being cleared, or no memory): counted in dropped if its code is
   recorded, deciding it first if not yet decided. */
static void
dropped(Tracer *self, PyObject *code, PyObject *globals, int recorded)
{
    if (recorded < 0) {
        if (deciding_unbuffered) {
            return;
        }
        uint32_t loc;
        Py_INCREF(self); /* decide may stop the tracer and let it go */
        deciding_unbuffered = 1;
        recorded = rt_code_location_first(self, code, globals, &loc, 0);
        deciding_unbuffered = 0;
        if (recorded > 0 && rt_running == self) {
            self->dropped++;
        }
        Py_DECREF(self);
    }
    else if (recorded > 0) {
        self->dropped++;
    }
}

/* How an exception leaving a frame ends its call: a SystemExit whose code is None or 0 (sys.exit(), sys.exit(0),
   raise SystemExit: the program ending cleanly) as a return, any other as raised. The exception is read and put back
   as it was (on 3.11 normalised first, as the interpreter would on handling it). */
int
rt_clean_exit_code(PyObject *code)
{
    int overflow = 0;
    return code == NULL || code == Py_None || (PyLong_Check(code) && PyLong_AsLongAndOverflow(code, &overflow) == 0 &&
                                               !overflow);
}

static uint32_t
unwound_kind(void)
{
    if (!PyErr_ExceptionMatches(PyExc_SystemExit)) {
        return RT_CALL_RAISED;
    }
    uint32_t kind = RT_CALL_RAISED;
#if PY_VERSION_HEX >= 0x030C0000
    PyObject *exc = PyErr_GetRaisedException();
    if (exc != NULL && PyObject_TypeCheck(exc, (PyTypeObject *)PyExc_SystemExit)) {
        PyObject *code = ((PySystemExitObject *)exc)->code;
        if (rt_clean_exit_code(code)) {
            kind = RT_CALL;
        }
    }
    PyErr_SetRaisedException(exc);
#else
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (value != NULL && PyObject_TypeCheck(value, (PyTypeObject *)PyExc_SystemExit)) {
        PyObject *code = ((PySystemExitObject *)value)->code;
        if (rt_clean_exit_code(code)) {
            kind = RT_CALL;
        }
    }
    PyErr_Restore(type, value, tb);
#endif
    return kind;
}

/* What evaluates frames under the hook: the interpreter's, or a debugger's. */

static PyObject *
eval_hook(PyThreadState *tstate, struct _PyInterpreterFrame *interpreter_frame, int throwflag)
{
    Tracer *self = rt_running;
    RtFrame *frame = (RtFrame *)interpreter_frame;
    PyCodeObject *code_object = FRAME_CODE(frame);
    PyObject *code = (PyObject *)code_object;
    if (self == NULL || code == NULL || ((code_object->co_flags & GENERATOR_FLAGS) && frame->owner == 0)) {
        return evaluate(tstate, interpreter_frame, throwflag);
    }
    uint32_t loc;
    int recorded = rt_code_decided(self, code, &loc);
    if (recorded == 0) {
        return evaluate(tstate, interpreter_frame, throwflag);
    }
    ThreadBuf *t = rt_thread(self);
    if (t == NULL) {
        dropped(self, code, frame->f_globals, recorded);
        return evaluate(tstate, interpreter_frame, throwflag);
    }
    if (t->busy) {
        return evaluate(tstate, interpreter_frame, throwflag);
    }
    if (recorded < 0) {
        Py_INCREF(self); /* decide may stop the tracer and let it go */
        t->busy++;       /* decide's own calls are not decided, nor recorded */
        recorded = rt_code_location_first(self, code, frame->f_globals, &loc, 1);
        t->busy--;
        int stopped = rt_running != self;
        Py_DECREF(self); /* the last reference only if it stopped */
        if (recorded < 0) {
            /* a signal handler's exception (the program's), raised in the frame as it starts, which unwinds it */
            return evaluate(tstate, interpreter_frame, 1);
        }
        if (recorded == 0 || stopped) {
            return evaluate(tstate, interpreter_frame, throwflag);
        }
    }
    int task_step = 0;
    if ((code_object->co_flags & CO_COROUTINE) && !t->in_task) {
        Py_INCREF(self); /* the look-up may stop the tracer and let it go */
        task_step = rt_task_step_begin(self, t);
        int stopped = rt_running != self;
        Py_DECREF(self);
        if (stopped) {
            return evaluate(tstate, interpreter_frame, throwflag);
        }
    }
    uint32_t generation = self->generation;
    rt_push(self, t, code, loc);
    PyObject *result = evaluate(tstate, interpreter_frame, throwflag);
    /* the tracer may have stopped (its open calls closed then), even been started again, or gone meanwhile */
    self = rt_running;
    if (self != NULL && self->generation == generation && (t = rt_thread(self)) != NULL) {
        rt_pop(self, t, code, result == NULL ? unwound_kind() : RT_CALL);
        if (task_step) {
            rt_task_step_end(t);
        }
        if (rt_wake_if_due(self, t, 1)) { /* a signal handler's exception (the program's): the frame's result now */
            Py_XDECREF(result);
            return NULL;
        }
    }
    return result;
}

int
rt_eval_hook_start(Tracer *self)
{
    PyInterpreterState *interp = PyInterpreterState_Get();
    _PyFrameEvalFunction current = _PyInterpreterState_GetEvalFrameFunc(interp);
    if (current != eval_hook && current != over) {
        chained = current;
        _PyInterpreterState_SetEvalFrameFunc(interp, eval_hook);
    }
    over = NULL;
    return 0;
}

void
rt_eval_hook_stop(Tracer *self)
{
    PyInterpreterState *interp = PyInterpreterState_Get();
    _PyFrameEvalFunction current = _PyInterpreterState_GetEvalFrameFunc(interp);
    if (current == eval_hook) {
        _PyInterpreterState_SetEvalFrameFunc(interp, chained);
    }
    else { /* another hook was put in place over this one: it calls this one, which passes frames on untraced */
        over = current;
    }
}
