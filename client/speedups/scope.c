/* Scope, what scope() returns: one span from enter to exit; and NullScope, the one shared object scope() returns when
   it keeps nothing. */

#include "speedups.h"

PyObject *
scope_enter(Scope *self, PyObject *Py_UNUSED(ignored))
{
    if (self->events == NULL) return Py_NewRef(self); /* cleared by the garbage collector: keeps nothing */
    self->entered = now_ns(self->core->state, &self->start_ns) == 0;
    if (!self->entered && count_unrecorded(&self->core->unrecorded) < 0) return NULL;
    return Py_NewRef(self);
}

/* args with "exception" set to the exception type's name, as a new dict (a new reference), or NULL. */
PyObject *
with_exception(ModuleState *state, PyObject *args, PyObject *exc_type)
{
    PyObject *dict = args == Py_None ? PyDict_New() : PyDict_Copy(args);
    PyObject *name;
    if (dict == NULL) return NULL;
    name = PyObject_GetAttr(exc_type, state->str_name);
    if (name == NULL && PyErr_ExceptionMatches(PyExc_Exception)) {
        PyErr_Clear();
        name = PyObject_Str(exc_type);
    }
    if (name == NULL || PyDict_SetItem(dict, state->str_exception, name) < 0) {
        Py_XDECREF(name);
        Py_DECREF(dict);
        return NULL;
    }
    Py_DECREF(name);
    return dict;
}

PyObject *
scope_exit(Scope *self, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *values[RECORD_FIELDS], *start, *end, *arguments, *events;
    ModuleState *state;
    int64_t end_ns;
    int clock;
    if (self->events == NULL || !self->entered) Py_RETURN_FALSE; /* keeps nothing: loses nothing */
    state = self->core->state;
    clock = now_ns(state, &end_ns);
    end = clock < 0 ? NULL : PyLong_FromLongLong(end_ns);
    start = end == NULL ? NULL : PyLong_FromLongLong(self->start_ns);
    if (start == NULL) {
        arguments = NULL;
    }
    else if (nargs > 0 && args[0] != Py_None) {
        arguments = with_exception(state, self->args, args[0]);
    }
    else {
        arguments = Py_NewRef(self->args);
    }
    if (start == NULL || end == NULL || arguments == NULL) {
        Py_XDECREF(start);
        Py_XDECREF(end);
        Py_XDECREF(arguments);
        if (count_unrecorded(&self->core->unrecorded) < 0) return NULL;
        Py_RETURN_FALSE;
    }
    events = Py_NewRef(self->events);
    values[0] = Py_NewRef(state->span_kind);
    values[1] = Py_NewRef(self->label);
    values[2] = start;
    values[3] = end;
    values[4] = arguments;
    if (append_event(state, events, values, self->core->max_values) < 0) {
        if (count_unrecorded(&self->core->unrecorded) < 0) {
            Py_DECREF(events);
            return NULL;
        }
    }
    else if (wake_at_half(self->core, events) < 0) {
        Py_DECREF(events);
        return NULL;
    }
    Py_DECREF(events);
    Py_RETURN_FALSE;
}

static int
scope_traverse(Scope *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->events);
    Py_VISIT(self->label);
    Py_VISIT(self->args);
    Py_VISIT(self->core);
    return 0;
}

static int
scope_clear(Scope *self)
{
    Py_CLEAR(self->events);
    Py_CLEAR(self->label);
    Py_CLEAR(self->args);
    Py_CLEAR(self->core);
    return 0;
}

static void
scope_dealloc(Scope *self)
{
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    scope_clear(self);
    PyObject_GC_Del(self);
    Py_DECREF(type);
}

/* The span's label: settable until it exits (a server's route, say, known only once the span began). */
static PyObject *
scope_get_label(Scope *self, void *Py_UNUSED(closure))
{
    return Py_NewRef(self->label != NULL ? self->label : Py_None);
}

static int
scope_set_label(Scope *self, PyObject *label, void *Py_UNUSED(closure))
{
    if (label == NULL) {
        PyErr_SetString(PyExc_AttributeError, "a scope's label cannot be deleted");
        return -1;
    }
    Py_XSETREF(self->label, Py_NewRef(label));
    return 0;
}

static PyGetSetDef scope_getset[] = {
    {"label", (getter)scope_get_label, (setter)scope_set_label,
     "The span's label: settable until it exits (a name known only once the span began).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef scope_methods[] = {
    {"__enter__", (PyCFunction)scope_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)(void (*)(void))scope_exit, METH_FASTCALL, NULL},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot scope_slots[] = {
    {Py_tp_doc, "Context manager that records one complete span when it exits."},
    {Py_tp_dealloc, scope_dealloc},
    {Py_tp_traverse, scope_traverse},
    {Py_tp_clear, scope_clear},
    {Py_tp_methods, scope_methods},
    {Py_tp_getset, scope_getset},
    {0, NULL},
};

PyType_Spec scope_spec = {
    .name = "ringtrace.client._speedups.Scope",
    .basicsize = sizeof(Scope),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = scope_slots,
};

/* -- NullScope ---------------------------------------------------------------------------------------------------- */

/* What scope() returns when it keeps nothing (no listener, no buffer): one shared object, whose __enter__ and __exit__
   are builtin functions bound to it once and kept in its type, not methods. A `with` statement looks both up in the
   type and calls them: a method would be bound first, a new object for each lookup, two for each `with`. */

static PyObject *
null_scope_enter(PyObject *self, PyObject *Py_UNUSED(ignored))
{
    return Py_NewRef(self);
}

static PyObject *
null_scope_exit(PyObject *Py_UNUSED(self), PyObject *const *Py_UNUSED(args), Py_ssize_t Py_UNUSED(nargs))
{
    Py_RETURN_FALSE; /* keeps nothing: loses nothing, and lets any exception go on */
}

/* Its label is None, and one set is let go of: it records nothing. */
static PyObject *
null_scope_get_label(PyObject *Py_UNUSED(self), void *Py_UNUSED(closure))
{
    Py_RETURN_NONE;
}

static int
null_scope_set_label(PyObject *Py_UNUSED(self), PyObject *label, void *Py_UNUSED(closure))
{
    if (label == NULL) {
        PyErr_SetString(PyExc_AttributeError, "a scope's label cannot be deleted");
        return -1;
    }
    return 0;
}

static PyGetSetDef null_scope_getset[] = {
    {"label", null_scope_get_label, null_scope_set_label, "None: it records nothing (a label set is let go of).",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef null_scope_enter_def = {"__enter__", (PyCFunction)null_scope_enter, METH_NOARGS, NULL};
static PyMethodDef null_scope_exit_def = {"__exit__", (PyCFunction)(void (*)(void))null_scope_exit, METH_FASTCALL,
                                          NULL};

/* The instance, its type, and the type's two functions bound to the instance are a cycle: the collector's to break. */
static int
null_scope_traverse(PyObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    return 0;
}

static void
null_scope_dealloc(PyObject *self)
{
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    PyObject_GC_Del(self);
    Py_DECREF(type);
}

static PyType_Slot null_scope_slots[] = {
    {Py_tp_doc, "What scope() returns when it keeps nothing: a context manager that records nothing."},
    {Py_tp_dealloc, null_scope_dealloc},
    {Py_tp_traverse, null_scope_traverse},
    {Py_tp_getset, null_scope_getset},
    {0, NULL},
};

PyType_Spec null_scope_spec = {
    .name = "ringtrace.client._speedups.NullScope",
    .basicsize = sizeof(PyObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = null_scope_slots,
};

/* The one NullScope, with its __enter__ and __exit__ bound to it in its type (see above); NULL on error. */
PyObject *
new_null_scope(PyTypeObject *type)
{
    PyObject *scope = PyObject_GC_New(PyObject, type), *enter = NULL, *exit = NULL;
    if (scope == NULL) return NULL;
    PyObject_GC_Track(scope);
    if ((enter = PyCFunction_New(&null_scope_enter_def, scope)) == NULL ||
        (exit = PyCFunction_New(&null_scope_exit_def, scope)) == NULL ||
        PyDict_SetItemString(type->tp_dict, "__enter__", enter) < 0 ||
        PyDict_SetItemString(type->tp_dict, "__exit__", exit) < 0) {
        Py_XDECREF(enter);
        Py_XDECREF(exit);
        Py_DECREF(scope);
        return NULL;
    }
    PyType_Modified(type); /* the type's attribute cache */
    Py_DECREF(enter);
    Py_DECREF(exit);
    return scope;
}
