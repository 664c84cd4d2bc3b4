/* Python 3.12+: Python functions' calls through the frame evaluation hook (evalframe.c: sys.monitoring's PY_START
and PY_RETURN callbacks cost about twice as much), and with C functions (builtins=True), theirs through sys.monitoring:
the CALL, C_RETURN and C_RAISE callbacks, and the tool that start() takes and stop() gives back.

A callback never raises into the program: what goes wrong is reported as unraisable, and the call is not recorded.
DISABLE, returned from CALL where the calling code is not recorded, makes its calls cost nothing after the first;
C_RETURN and C_RAISE cannot be disabled (they follow CALL), and return None. */

#include "tracer.h"

#if RT_MONITORING

static PyObject *monitoring_disable; /* sys.monitoring.DISABLE */
static PyObject *monitoring_missing; /* sys.monitoring.MISSING: a call's arg0 when it has no argument */
static PyObject *sys_exit;           /* the builtin sys.exit, whose raise with code 0 or None is a clean exit */
static int disabled_any;             /* DISABLE was returned: a tracer started later restarts the events */

#define CODE_ARGS_OK(args, nargs, least) ((nargs) >= (least) && PyCode_Check((args)[0]))

static inline PyObject *
disable(void)
{
    disabled_any = 1;
    return Py_NewRef(monitoring_disable);
}

/* CALL(code, offset, callable, arg0): a C function's call begins (a Python function's is PY_START's). */
static PyObject *
on_call(PyObject *tracer, PyObject *const *args, Py_ssize_t nargs)
{
    Tracer *self = (Tracer *)tracer;
    if (!CODE_ARGS_OK(args, nargs, 3)) {
        Py_RETURN_NONE;
    }
    uint32_t caller_loc, loc;
    int recorded = rt_code_decided(self, args[0], &caller_loc);
    if (recorded == 0) {
        return disable(); /* a C function's call is recorded where its caller's code is */
    }
    PyObject *callable = args[2];
    if (!rt_is_c_function(self, callable) || !self->running) {
        Py_RETURN_NONE;
    }
    ThreadBuf *t = rt_thread(self);
    if (t == NULL || t->busy) { /* busy: a call decide or wake makes */
        self->dropped += t == NULL;
        Py_RETURN_NONE;
    }
    Py_INCREF(self); /* decide (or a name's lookup) may stop the tracer and let it go */
    t->busy++;       /* what decide runs is not decided, nor recorded (evalframe.c) */
    if (recorded < 0) { /* a caller begun before start() */
        recorded = rt_code_location_first(self, args[0], NULL, &caller_loc, 0);
    }
    int located = recorded > 0 && rt_c_location(self, callable, &loc);
    t->busy--;
    if (located && self->running) {
        rt_push(self, t, callable, loc);
    }
    Py_DECREF(self);
    Py_RETURN_NONE;
}

/* C_RETURN, C_RAISE(code, offset, callable, arg0). */
static inline PyObject *
on_c_leave(PyObject *tracer, PyObject *const *args, Py_ssize_t nargs, uint32_t kind)
{
    Tracer *self = (Tracer *)tracer;
    if (!CODE_ARGS_OK(args, nargs, 3)) {
        Py_RETURN_NONE;
    }
    uint32_t caller_loc;
    if (rt_code_decided(self, args[0], &caller_loc) > 0 && rt_is_c_function(self, args[2])) {
        ThreadBuf *t = rt_thread(self);
        if (t != NULL && !t->busy) {
            rt_pop(self, t, args[2], kind);
            rt_wake_if_due(self, t, 0);
        }
    }
    Py_RETURN_NONE;
}

static PyObject *
on_c_return(PyObject *tracer, PyObject *const *args, Py_ssize_t nargs)
{
    return on_c_leave(tracer, args, nargs, RT_CALL);
}

/* sys.exit raising with code 0 or None (arg0: its argument) ends the program cleanly: its call returns. */
static PyObject *
on_c_raise(PyObject *tracer, PyObject *const *args, Py_ssize_t nargs)
{
    int clean_exit = nargs >= 4 && args[2] == sys_exit &&
                     (args[3] == monitoring_missing || rt_clean_exit_code(args[3]));
    return on_c_leave(tracer, args, nargs, clean_exit ? RT_CALL : RT_CALL_RAISED);
}

#define CALLBACK(name, function) {name, (PyCFunction)(void (*)(void))function, METH_FASTCALL, NULL}

/* Each callback, under the name of the events it is registered for (sys.monitoring.events.<name>). */
static PyMethodDef c_callbacks[] = {
    CALLBACK("CALL", on_call),
    CALLBACK("C_RETURN", on_c_return),
    CALLBACK("C_RAISE", on_c_raise),
    {NULL, NULL, 0, NULL},
};

/* The first free of the tool ids 4 and 3 (0, 1 and 2 are the debugger's, coverage's and the profiler's). */
static int
free_tool_id(PyObject *monitoring)
{
    static const int candidates[] = {4, 3};
    PyObject *taken_by[2] = {NULL, NULL};
    int chosen = -1;
    for (int i = 0; i < 2 && chosen < 0; i++) {
        PyObject *owner = PyObject_CallMethod(monitoring, "get_tool", "i", candidates[i]);
        if (owner == NULL) {
            goto done;
        }
        if (owner == Py_None) {
            chosen = candidates[i];
            Py_DECREF(owner);
        }
        else {
            taken_by[i] = owner;
        }
    }
    if (chosen < 0) {
        PyErr_Format(PyExc_RuntimeError,
                     "function tracing needs a free sys.monitoring tool id, 4 or 3: 4 is taken by %R and 3 by %R",
                     taken_by[0], taken_by[1]);
    }
done:
    Py_XDECREF(taken_by[0]);
    Py_XDECREF(taken_by[1]);
    return chosen;
}

static int
register_callbacks(Tracer *self, PyObject *monitoring, PyObject *events, PyMethodDef *defs, long *mask)
{
    for (PyMethodDef *def = defs; def->ml_name != NULL; def++) {
        PyObject *event = PyObject_GetAttrString(events, def->ml_name);
        PyObject *callback = event == NULL ? NULL : PyCFunction_New(def, (PyObject *)self);
        PyObject *previous = callback == NULL ? NULL
                                              : PyObject_CallMethod(monitoring, "register_callback", "iOO",
                                                                    self->tool_id, event, callback);
        long bit = event == NULL ? -1 : PyLong_AsLong(event);
        Py_XDECREF(event);
        Py_XDECREF(callback);
        if (previous == NULL || bit == -1) {
            Py_XDECREF(previous);
            return -1;
        }
        Py_DECREF(previous);
        *mask |= bit;
    }
    return 0;
}

static PyObject *
import_monitoring(void)
{
    PyObject *sys = PyImport_ImportModule("sys");
    PyObject *monitoring = sys == NULL ? NULL : PyObject_GetAttrString(sys, "monitoring");
    Py_XDECREF(sys);
    return monitoring;
}

static void give_back_tool(Tracer *self, PyObject *monitoring);

static int
start_monitoring(Tracer *self)
{
    PyObject *monitoring = import_monitoring();
    if (monitoring == NULL) {
        return -1;
    }
    PyObject *events = NULL;
    long mask = 0;
    if (monitoring_disable == NULL && (monitoring_disable = PyObject_GetAttrString(monitoring, "DISABLE")) == NULL) {
        goto fail;
    }
    if (monitoring_missing == NULL && (monitoring_missing = PyObject_GetAttrString(monitoring, "MISSING")) == NULL) {
        goto fail;
    }
    if (sys_exit == NULL && (sys_exit = PySys_GetObject("exit")) != NULL) { /* (borrowed; none if deleted) */
        Py_INCREF(sys_exit);
    }
    self->tool_id = free_tool_id(monitoring);
    if (self->tool_id < 0) {
        goto fail;
    }
    PyObject *used = PyObject_CallMethod(monitoring, "use_tool_id", "is", self->tool_id, "ringtrace");
    if (used == NULL) {
        self->tool_id = -1;
        goto fail;
    }
    Py_DECREF(used);
    events = PyObject_GetAttrString(monitoring, "events");
    if (events == NULL || register_callbacks(self, monitoring, events, c_callbacks, &mask) < 0) {
        goto fail;
    }
    if (disabled_any) { /* what an earlier tracer disabled must be seen again: this one decides anew */
        PyObject *restarted = PyObject_CallMethod(monitoring, "restart_events", NULL);
        if (restarted == NULL) {
            goto fail;
        }
        Py_DECREF(restarted);
        disabled_any = 0;
    }
    PyObject *set = PyObject_CallMethod(monitoring, "set_events", "il", self->tool_id, mask);
    if (set == NULL) {
        goto fail;
    }
    Py_DECREF(set);
    Py_DECREF(events);
    Py_DECREF(monitoring);
    return 0;
fail:
    Py_XDECREF(events);
    if (self->tool_id >= 0) {
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        give_back_tool(self, monitoring);
        PyErr_Restore(type, value, tb);
    }
    Py_DECREF(monitoring);
    return -1;
}

/* No more events, no callbacks, the tool id free: whatever fails is reported, and the rest still done. */
static void
give_back_tool(Tracer *self, PyObject *monitoring)
{
    PyObject *result = PyObject_CallMethod(monitoring, "set_events", "ii", self->tool_id, 0);
    if (result == NULL) {
        PyErr_WriteUnraisable((PyObject *)self);
    }
    Py_XDECREF(result);
    PyObject *events = PyObject_GetAttrString(monitoring, "events");
    for (PyMethodDef *def = c_callbacks; def->ml_name != NULL && events != NULL; def++) {
        PyObject *event = PyObject_GetAttrString(events, def->ml_name);
        result = event == NULL ? NULL
                               : PyObject_CallMethod(monitoring, "register_callback", "iOO", self->tool_id, event,
                                                     Py_None);
        Py_XDECREF(event);
        if (result == NULL) {
            PyErr_WriteUnraisable((PyObject *)self);
        }
        Py_XDECREF(result);
    }
    if (events == NULL) {
        PyErr_WriteUnraisable((PyObject *)self);
    }
    Py_XDECREF(events);
    result = PyObject_CallMethod(monitoring, "free_tool_id", "i", self->tool_id);
    if (result == NULL) {
        PyErr_WriteUnraisable((PyObject *)self);
    }
    Py_XDECREF(result);
    self->tool_id = -1;
}

int
rt_hooks_start(Tracer *self)
{
    if (rt_eval_hook_start(self) < 0) {
        return -1;
    }
    if (self->builtins && start_monitoring(self) < 0) {
        rt_eval_hook_stop(self);
        return -1;
    }
    return 0;
}

int
rt_hooks_stop(Tracer *self)
{
    rt_eval_hook_stop(self);
    if (self->tool_id < 0) {
        return 0;
    }
    PyObject *monitoring = import_monitoring();
    if (monitoring == NULL) {
        return -1;
    }
    give_back_tool(self, monitoring);
    Py_DECREF(monitoring);
    return 0;
}

#endif
