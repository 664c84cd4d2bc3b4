/* The Tracer type and the module (ringtrace.client._functions). */

#include "tracer.h"

Tracer *rt_running;
static uint32_t last_generation;

static PyObject *
tracer_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"decide",  "locations",    "min_duration_ns", "max_depth",
                               "builtins", "buffer_bytes", "wake",            NULL};
    PyObject *decide, *locations, *wake = Py_None;
    long long min_duration_ns = 0, buffer_bytes = RT_DEFAULT_BUFFER_BYTES;
    Py_ssize_t max_depth = 0;
    int builtins = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO!|$LnpLO:Tracer", keywords, &decide, &PyList_Type, &locations,
                                     &min_duration_ns, &max_depth, &builtins, &buffer_bytes, &wake)) {
        return NULL;
    }
    if (!PyCallable_Check(decide)) {
        return PyErr_Format(PyExc_TypeError, "Tracer: decide must be callable, not %.100s", Py_TYPE(decide)->tp_name);
    }
    if (wake != Py_None && !PyCallable_Check(wake)) {
        return PyErr_Format(PyExc_TypeError, "Tracer: wake must be callable or None, not %.100s",
                            Py_TYPE(wake)->tp_name);
    }
    if (min_duration_ns < 0 || max_depth < 0) {
        return PyErr_Format(PyExc_ValueError, "Tracer: min_duration_ns (%lld) and max_depth (%zd) must be >= 0",
                            min_duration_ns, max_depth);
    }
    if (buffer_bytes < RT_RECORD_SIZE || buffer_bytes > ((long long)1 << 40)) {
        return PyErr_Format(PyExc_ValueError,
                            "Tracer: buffer_bytes %lld is not between one record (%d bytes) and 1 TiB", buffer_bytes,
                            RT_RECORD_SIZE);
    }
    if (last_generation == UINT32_MAX) {
        return PyErr_Format(PyExc_RuntimeError, "Tracer: %u tracers is the most a process can make", UINT32_MAX);
    }
    Tracer *self = (Tracer *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    self->generation = ++last_generation;
    self->tool_id = -1;
    self->min_duration_ns = min_duration_ns;
    self->max_depth = max_depth;
    self->depth_limit = max_depth ? max_depth : PY_SSIZE_T_MAX;
    self->builtins = builtins;
    self->buffer_bytes = (Py_ssize_t)(buffer_bytes - buffer_bytes % RT_RECORD_SIZE);
    self->decide = Py_NewRef(decide);
    self->locations = Py_NewRef(locations);
    self->wake = Py_NewRef(wake);
    self->indexes = PyDict_New();
    self->thread_key = PyUnicode_FromFormat("ringtrace.functions.tracer.%u", self->generation);
    if (self->indexes == NULL || self->thread_key == NULL || rt_index_locations(self) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static int
tracer_traverse(Tracer *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->decide);
    Py_VISIT(self->locations);
    Py_VISIT(self->wake);
    Py_VISIT(self->indexes);
    Py_VISIT(self->current_task);
    return 0;
}

static int
tracer_clear(Tracer *self)
{
    Py_CLEAR(self->decide);
    Py_CLEAR(self->locations);
    Py_CLEAR(self->wake);
    Py_CLEAR(self->indexes);
    Py_CLEAR(self->current_task);
    return 0;
}

static void
tracer_dealloc(Tracer *self)
{
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    if (self->weakrefs != NULL) {
        PyObject_ClearWeakRefs((PyObject *)self);
    }
    /* a running tracer is held by start() until stop(): it never goes while running */
    tracer_clear(self);
    Py_CLEAR(self->thread_key);
    rt_forget_threads(self);
    rt_clear_c_locations(self);
    type->tp_free(self);
    Py_DECREF(type);
}

static PyObject *
tracer_start(Tracer *self, PyObject *unused)
{
    if (self->running) {
        Py_RETURN_NONE;
    }
    if (rt_running != NULL) {
        return PyErr_Format(PyExc_RuntimeError, "Tracer.start: another function tracer runs (%R); stop it first",
                            (PyObject *)rt_running);
    }
    if (self->decide == NULL) {
        return PyErr_Format(PyExc_RuntimeError, "Tracer.start: the tracer was cleared");
    }
    rt_reset_stacks(self); /* what was open when it last stopped was closed then */
    if (self->current_task == NULL) { /* (not at import: the module imports nothing of ringtrace's) */
        PyObject *watch = PyImport_ImportModule("ringtrace.client.recording.asyncio_watch");
        self->current_task = watch == NULL ? NULL : PyObject_GetAttrString(watch, "current_task");
        Py_XDECREF(watch);
        if (self->current_task == NULL) {
            return NULL;
        }
    }
    rt_clock_init(); /* once: the first start() measures the TSC's rate (2 ms) */
    rt_clock_start(self);
    self->running = 1;
    rt_running = (Tracer *)Py_NewRef(self); /* a running tracer stays: the hooks find it there */
    if (rt_hooks_start(self) < 0) {
        self->running = 0;
        rt_running = NULL;
        Py_DECREF(self);
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *
tracer_stop(Tracer *self, PyObject *unused)
{
    if (!self->running) {
        Py_RETURN_NONE;
    }
    self->running = 0;
    int failed = rt_hooks_stop(self);
    rt_close_open_calls(self);
    rt_running = NULL;
    Py_DECREF(self); /* start()'s: the caller holds another */
    if (failed) {
        return NULL;
    }
    rt_wake_if_due(self, NULL, 0); /* a buffer passed a quarter full as its open calls were closed */
    Py_RETURN_NONE;
}

static PyObject *
tracer_drain(Tracer *self, PyObject *unused)
{
    return rt_drain(self, 0);
}

static PyObject *
tracer_drain_cuts(Tracer *self, PyObject *unused)
{
    return rt_drain(self, 1);
}

static PyObject *
tracer_get_dropped(Tracer *self, void *closure)
{
    return PyLong_FromUnsignedLongLong(self->dropped);
}

static PyObject *
tracer_get_recorded(Tracer *self, void *closure)
{
    return PyLong_FromUnsignedLongLong(self->recorded);
}

static PyObject *
tracer_get_running(Tracer *self, void *closure)
{
    return PyBool_FromLong(self->running);
}

static PyObject *
tracer_repr(Tracer *self)
{
    return PyUnicode_FromFormat("<ringtrace function Tracer %s, %llu recorded, %llu dropped>",
                                self->running ? "running" : "stopped", (unsigned long long)self->recorded,
                                (unsigned long long)self->dropped);
}

static PyMethodDef tracer_methods[] = {
    {"start", (PyCFunction)tracer_start, METH_NOARGS,
     "start(): records calls on every thread from now on, running threads and those started later."},
    {"stop", (PyCFunction)tracer_stop, METH_NOARGS,
     "stop(): records no more; calls still open on every thread are written with end = now. Idempotent."},
    {"drain", (PyCFunction)tracer_drain, METH_NOARGS,
     "drain() -> [(thread ident, records)]: each thread's records since the last drain, ended threads included. "
     "One runs at a time: a drain begun while another runs (on another thread, or in a finalizer) gets []."},
    {"drain_cuts", (PyCFunction)tracer_drain_cuts, METH_NOARGS,
     "drain_cuts() -> [(thread ident, records, cuts)]: drain(), and where in each thread's records the calls of "
     "each asyncio task's steps (or of none) begin: [(byte offset, task or None)], the first at 0."},
    {"switch_calls", (PyCFunction)(void (*)(void))rt_switch_calls, METH_FASTCALL,
     "switch_calls(saved, lane) -> calls: the program switched greenlets on this thread: saved (what this returned "
     "as it left the greenlet now switched to; None: nothing yet) becomes the thread's open calls, whose records are "
     "lane's (None: the thread's); returns the open calls of the greenlet left (None while stopped)."},
    {"close_calls", (PyCFunction)(void (*)(void))rt_close_calls, METH_FASTCALL,
     "close_calls(saved, lane): the open calls of a greenlet left suspended end now, as lane's."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef tracer_getset[] = {
    {"dropped", (getter)tracer_get_dropped, NULL, "calls not recorded because a buffer was full", NULL},
    {"recorded", (getter)tracer_get_recorded, NULL, "records written so far (all threads)", NULL},
    {"running", (getter)tracer_get_running, NULL, "between start() and stop()", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMemberDef tracer_members[] = {
    {"__weaklistoffset__", T_PYSSIZET, offsetof(Tracer, weakrefs), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot tracer_slots[] = {
    {Py_tp_doc, "Tracer(decide, locations, *, min_duration_ns=0, max_depth=0, builtins=False, "
                "buffer_bytes=16 MiB, wake=None): records every call of the code decide(code, module) accepts as "
                "one call record when it ends, per thread (see ringtrace.wire.call_records)."},
    {Py_tp_new, tracer_new},
    {Py_tp_dealloc, tracer_dealloc},
    {Py_tp_traverse, tracer_traverse},
    {Py_tp_clear, tracer_clear},
    {Py_tp_repr, tracer_repr},
    {Py_tp_methods, tracer_methods},
    {Py_tp_getset, tracer_getset},
    {Py_tp_members, tracer_members},
    {0, NULL},
};

static PyType_Spec tracer_spec = {
    "ringtrace.client._functions.Tracer",
    sizeof(Tracer),
    0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    tracer_slots,
};

static int
module_exec(PyObject *module)
{
    if (rt_code_extra_index < 0) {
#if PY_VERSION_HEX >= 0x030C0000
        rt_code_extra_index = PyUnstable_Eval_RequestCodeExtraIndex(NULL);
#else
        rt_code_extra_index = _PyEval_RequestCodeExtraIndex(NULL);
#endif
        if (rt_code_extra_index < 0) {
            PyErr_SetString(PyExc_RuntimeError, "ringtrace.client._functions: no code object extra slot is free");
            return -1;
        }
    }
    PyObject *type = PyType_FromModuleAndSpec(module, &tracer_spec, NULL);
    if (type == NULL) {
        return -1;
    }
    int failed = PyModule_AddObjectRef(module, "Tracer", type) < 0 ||
                 PyModule_AddIntConstant(module, "DEFAULT_BUFFER_BYTES", RT_DEFAULT_BUFFER_BYTES) < 0 ||
                 PyModule_AddIntConstant(module, "RECORD_SIZE", RT_RECORD_SIZE) < 0;
    Py_DECREF(type);
    return failed ? -1 : 0;
}

static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, module_exec},
    {0, NULL},
};

static struct PyModuleDef functions_module = {
    PyModuleDef_HEAD_INIT,
    "ringtrace.client._functions",
    "The function tracer in C: Tracer records every Python call (and, optionally, C function call) as a 24-byte "
    "call record when it ends. Its twin is ringtrace.client.functions.python_tracer.PythonTracer.",
    0,
    NULL,
    module_slots,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC
PyInit__functions(void)
{
    return PyModuleDef_Init(&functions_module);
}
