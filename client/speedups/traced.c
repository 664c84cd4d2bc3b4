/* Traced, @traced on a plain function: the call, and one span around it. */

#include "speedups.h"

/* @traced on a plain function (traced.py): the call, and one span around it, as `with timeline.scope(label):` records
   it, without a Python frame, a Scope or the with statement's lookups. Binds as a method, as a function does. */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *function;
    PyObject *label;
    RecorderCore *core;
    PyObject *dict; /* what functools.update_wrapper copies (__name__, __doc__, __wrapped__...) */
} Traced;

/* The span of a call that began at `start_ns` and ended now, appended to `events` (NULL when `result` is: the call
   raised, and the span says with what). The raised exception, if any, is kept as it was. Returns 0, or -1 for an
   exception the program must see instead. */
static int
record_call(RecorderCore *core, PyObject *events, PyObject *label, int64_t start_ns, PyObject *result)
{
    ModuleState *state = core->state;
    PyObject *values[RECORD_FIELDS], *exc_type = NULL, *exc = NULL, *tb = NULL, *start, *end, *arguments;
    int64_t end_ns;
    int clock, failed = 0;
    if (result == NULL) PyErr_Fetch(&exc_type, &exc, &tb); /* restored below, whatever happens here */
    clock = now_ns(state, &end_ns);
    end = clock < 0 ? NULL : PyLong_FromLongLong(end_ns);
    start = end == NULL ? NULL : PyLong_FromLongLong(start_ns);
    arguments = start == NULL ? NULL : exc_type == NULL ? Py_NewRef(Py_None) : with_exception(state, Py_None, exc_type);
    if (start == NULL || end == NULL || arguments == NULL) {
        Py_XDECREF(start);
        Py_XDECREF(end);
        Py_XDECREF(arguments);
        failed = count_unrecorded(&core->unrecorded) < 0;
    }
    else {
        values[0] = Py_NewRef(state->span_kind);
        values[1] = Py_NewRef(label);
        values[2] = start;
        values[3] = end;
        values[4] = arguments;
        if (append_event(state, events, values, core->max_values) < 0) failed = count_unrecorded(&core->unrecorded) < 0;
        else failed = wake_at_half(core, events) < 0;
    }
    if (exc_type != NULL) {
        if (failed) { /* a KeyboardInterrupt meanwhile: it wins, the call's own exception is dropped */
            Py_DECREF(exc_type);
            Py_XDECREF(exc);
            Py_XDECREF(tb);
        }
        else {
            PyErr_Restore(exc_type, exc, tb);
        }
    }
    return failed ? -1 : 0;
}

static PyObject *
traced_call(Traced *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    RecorderCore *core = self->core;
    PyObject *events, *result;
    int64_t start_ns;
    if (!core->listening) return PyObject_Vectorcall(self->function, args, nargsf, kwnames);
    events = current_events(core);
    if (events == NULL) {
        if (count_unrecorded(&core->unrecorded) < 0) return NULL;
        return PyObject_Vectorcall(self->function, args, nargsf, kwnames);
    }
    if (events == Py_None || now_ns(core->state, &start_ns) < 0) {
        if (events != Py_None && count_unrecorded(&core->unrecorded) < 0) {
            Py_DECREF(events);
            return NULL;
        }
        Py_DECREF(events);
        return PyObject_Vectorcall(self->function, args, nargsf, kwnames);
    }
    result = PyObject_Vectorcall(self->function, args, nargsf, kwnames);
    if (record_call(core, events, self->label, start_ns, result) < 0) Py_CLEAR(result);
    Py_DECREF(events);
    return result;
}

static PyObject *
traced_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *function, *label, *core, *module;
    Traced *self;
    static char *names[] = {"function", "label", "timeline", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOO", names, &function, &label, &core)) return NULL;
    if ((module = PyType_GetModuleByDef(type, &speedups_module)) == NULL) return NULL;
    if (!PyObject_TypeCheck(core, ((ModuleState *)PyModule_GetState(module))->recorder_core_type) ||
        !PyCallable_Check(function)) {
        PyErr_SetString(PyExc_TypeError, "Traced(function, label, timeline): a callable, and a Timeline");
        return NULL;
    }
    self = (Traced *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->vectorcall = (vectorcallfunc)traced_call;
    self->function = Py_NewRef(function);
    self->label = Py_NewRef(label);
    self->core = (RecorderCore *)Py_NewRef(core);
    return (PyObject *)self;
}

/* As a function: an attribute of a class binds to the instance. */
static PyObject *
traced_get(PyObject *self, PyObject *instance, PyObject *Py_UNUSED(owner))
{
    if (instance == NULL || instance == Py_None) return Py_NewRef(self);
    return PyMethod_New(self, instance);
}

static int
traced_traverse(Traced *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->function);
    Py_VISIT(self->label);
    Py_VISIT(self->core);
    Py_VISIT(self->dict);
    return 0;
}

static int
traced_clear(Traced *self)
{
    Py_CLEAR(self->function);
    Py_CLEAR(self->label);
    Py_CLEAR(self->core);
    Py_CLEAR(self->dict);
    return 0;
}

static void
traced_dealloc(Traced *self)
{
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    traced_clear(self);
    type->tp_free((PyObject *)self);
    Py_DECREF(type);
}

static PyObject *
traced_repr(Traced *self)
{
    return PyUnicode_FromFormat("<traced %R>", self->function);
}

/* Pickled as a function is: by reference, its module and qualified name (functools.update_wrapper copied them), so that
   multiprocessing takes it (Pool.map, ProcessPoolExecutor); copy.copy and copy.deepcopy give it back, as a function. */
static PyObject *
traced_reduce(Traced *self, PyObject *Py_UNUSED(ignored))
{
    PyObject *name = PyObject_GetAttrString((PyObject *)self, "__qualname__");
    if (name == NULL && PyErr_ExceptionMatches(PyExc_AttributeError)) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "cannot pickle traced %R: it has no __qualname__ to find it by", self->function);
    }
    return name;
}

static PyMethodDef traced_methods[] = {
    {"__reduce__", (PyCFunction)traced_reduce, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef traced_members[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(Traced, vectorcall), READONLY, NULL},
    {"__dictoffset__", T_PYSSIZET, offsetof(Traced, dict), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef traced_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot traced_slots[] = {
    {Py_tp_doc, "A function under @traced: each call is one span (see traced.py)."},
    {Py_tp_new, traced_new},
    {Py_tp_dealloc, traced_dealloc},
    {Py_tp_traverse, traced_traverse},
    {Py_tp_clear, traced_clear},
    {Py_tp_call, PyVectorcall_Call},
    {Py_tp_descr_get, traced_get},
    {Py_tp_members, traced_members},
    {Py_tp_methods, traced_methods},
    {Py_tp_getset, traced_getset},
    {Py_tp_repr, traced_repr},
    {0, NULL},
};

PyType_Spec traced_spec = {
    .name = "ringtrace.client._speedups.Traced",
    .basicsize = sizeof(Traced),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_IMMUTABLETYPE |
             Py_TPFLAGS_METHOD_DESCRIPTOR,
    .slots = traced_slots,
};
