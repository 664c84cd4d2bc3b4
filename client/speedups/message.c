/* Message, what Timeline.message defines: a callable that logs its values as one instant of its kind. */

#include "speedups.h"

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    RecorderCore *core;
    PyObject *kind;    /* its KindSpec */
    PyObject *kind_id; /* kind.id */
    PyObject *label;   /* kind.name: the category */
    PyObject *sampling; /* a messages.Sampling while sampling may turn it on, else None */
    PyObject *weakrefs;
    long kind_number;   /* kind_id's value, or -1 where it does not fit a compact record's 32 bits (records.c) */
    int level;
    char enabled;
} Message;

static PyObject *
message_call(Message *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *tuple, *stamp;
    if (!self->enabled) {
        PyObject *on;
        int sampled;
        PyObject *sampling = self->sampling;
        if (sampling == Py_None) Py_RETURN_NONE;
        Py_INCREF(sampling); /* another thread may replace it while on() runs */
        on = PyObject_CallMethodNoArgs(sampling, self->core->state->str_on);
        Py_DECREF(sampling);
        sampled = on == NULL ? -1 : PyObject_IsTrue(on);
        Py_XDECREF(on);
        if (sampled < 0) return unrecorded(self->core);
        if (!sampled) Py_RETURN_NONE;
    }
    /* Values are positional; named ones are kept after them rather than refused (as the Python recorder does). */
    nargs += kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    if (self->core->listening && self->core->max_record_bytes > 0) { /* compact where it has the shape (records.c) */
        int recorded = record_compact_message(self->core, self->kind_number, self->label, args, nargs);
        if (recorded < 0) return NULL;
        if (recorded) Py_RETURN_NONE;
    }
    tuple = PyTuple_New(nargs);
    if (tuple != NULL) {
        Py_ssize_t i;
        int atoms = 1;
        for (i = 0; i < nargs; i++) {
            PyTuple_SET_ITEM(tuple, i, Py_NewRef(args[i]));
            atoms &= !PyObject_IS_GC(args[i]);
        }
        /* Values that hold no references (ints, floats, text: the usual ones) cannot be part of a cycle: the
           collector would untrack the tuple at its first pass, after visiting it there; untracked now, it never
           visits it. */
        if (atoms) PyObject_GC_UnTrack(tuple);
    }
    stamp = tuple == NULL ? NULL : now_ns_object(self->core->state);
    if (stamp == NULL) {
        Py_XDECREF(tuple);
        return unrecorded(self->core);
    }
    return record_instant(self->core, Py_NewRef(self->kind_id), Py_NewRef(self->label), stamp, tuple);
}

static PyObject *
message_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *kind, *core, *kind_id, *label, *priority_level = NULL, *module;
    int enabled;
    long level;
    Message *self;
    static char *names[] = {"kind", "timeline", "enabled", "level", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOpO", names, &kind, &core, &enabled, &priority_level)) return NULL;
    if ((module = PyType_GetModuleByDef(type, &speedups_module)) == NULL) return NULL;
    if (!PyObject_TypeCheck(core, ((ModuleState *)PyModule_GetState(module))->recorder_core_type)) {
        PyErr_SetString(PyExc_TypeError, "Message(kind, timeline, enabled, level): timeline must be a Timeline");
        return NULL;
    }
    level = PyLong_AsLong(priority_level);
    if (level == -1 && PyErr_Occurred()) return NULL;
    if (level < INT_MIN || level > INT_MAX) {
        PyErr_Format(PyExc_OverflowError, "Message(kind, timeline, enabled, level): level %ld does not fit an int",
                     level);
        return NULL;
    }
    kind_id = PyObject_GetAttrString(kind, "id");
    label = kind_id == NULL ? NULL : PyObject_GetAttrString(kind, "name");
    if (label == NULL) {
        Py_XDECREF(kind_id);
        return NULL;
    }
    self = (Message *)type->tp_alloc(type, 0);
    if (self == NULL) {
        Py_DECREF(kind_id);
        Py_DECREF(label);
        return NULL;
    }
    self->vectorcall = (vectorcallfunc)message_call;
    self->core = (RecorderCore *)Py_NewRef(core);
    self->kind = Py_NewRef(kind);
    self->kind_id = kind_id;
    self->label = label;
    self->sampling = Py_NewRef(Py_None);
    self->kind_number = PyLong_AsLong(kind_id);
    if (self->kind_number == -1 && PyErr_Occurred()) PyErr_Clear(); /* (not an int, or past a long: as objects) */
    if (self->kind_number > 0xFFFFFFFFL) self->kind_number = -1;
    self->level = (int)level;
    self->enabled = (char)enabled;
    return (PyObject *)self;
}

static int
message_traverse(Message *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->core);
    Py_VISIT(self->kind);
    Py_VISIT(self->kind_id);
    Py_VISIT(self->label);
    Py_VISIT(self->sampling);
    return 0;
}

static int
message_clear(Message *self)
{
    Py_CLEAR(self->core);
    Py_CLEAR(self->kind);
    Py_CLEAR(self->kind_id);
    Py_CLEAR(self->label);
    Py_CLEAR(self->sampling);
    return 0;
}

static void
message_dealloc(Message *self)
{
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    if (self->weakrefs != NULL) PyObject_ClearWeakRefs((PyObject *)self);
    message_clear(self);
    type->tp_free((PyObject *)self);
    Py_DECREF(type);
}

static PyObject *
message_get_sampling(Message *self, void *Py_UNUSED(closure))
{
    return Py_NewRef(self->sampling);
}

static int
message_set_sampling(Message *self, PyObject *value, void *Py_UNUSED(closure))
{
    if (value == NULL) {
        PyErr_SetString(PyExc_AttributeError, "_sampling cannot be deleted");
        return -1;
    }
    Py_SETREF(self->sampling, Py_NewRef(value));
    return 0;
}

static PyObject *
message_repr(Message *self)
{
    return PyUnicode_FromFormat("Message(%R)", self->kind);
}

static PyMemberDef message_members[] = {
    {"enabled", T_BOOL, offsetof(Message, enabled), 0, "Whether calls record (the timeline sets it)."},
    {"level", T_INT, offsetof(Message, level), READONLY, "The rank of its priority (0: fatal)."},
    {"kind", T_OBJECT, offsetof(Message, kind), READONLY, "Its event kind."},
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(Message, vectorcall), READONLY, NULL},
    {"__weaklistoffset__", T_PYSSIZET, offsetof(Message, weakrefs), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef message_getset[] = {
    {"_sampling", (getter)message_get_sampling, (setter)message_set_sampling, "Sampling, or None.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot message_slots[] = {
    {Py_tp_doc, "A message defined with Timeline.message: call it with its values to log it (see messages.py)."},
    {Py_tp_new, message_new},
    {Py_tp_dealloc, message_dealloc},
    {Py_tp_traverse, message_traverse},
    {Py_tp_clear, message_clear},
    {Py_tp_call, PyVectorcall_Call},
    {Py_tp_members, message_members},
    {Py_tp_getset, message_getset},
    {Py_tp_repr, message_repr},
    {0, NULL},
};

PyType_Spec message_spec = {
    .name = "ringtrace.client._speedups.Message",
    .basicsize = sizeof(Message),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = message_slots,
};
