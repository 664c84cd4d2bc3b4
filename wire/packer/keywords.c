/* Keywords: an instant's keyword arguments as its call passed them (see keywords.h). The recorder makes them
   (client/speedups/recorder_core.c), with this type, which it takes from this module at its import. */

#include "packer.h"

static PyObject *
keywords_as_dict(Keywords *self, PyObject *Py_UNUSED(ignored))
{
    Py_ssize_t i;
    PyObject *dict = PyDict_New();
    if (dict == NULL || self->names == NULL) return dict;
    for (i = 0; i < Py_SIZE(self); i++) {
        if (self->values[i] != NULL &&
            PyDict_SetItem(dict, PyTuple_GET_ITEM(self->names, i), self->values[i]) < 0) {
            Py_DECREF(dict);
            return NULL;
        }
    }
    return dict;
}

static PyObject *
keywords_repr(Keywords *self)
{
    PyObject *dict = keywords_as_dict(self, NULL), *repr;
    if (dict == NULL) return NULL;
    repr = PyUnicode_FromFormat("Keywords(%R)", dict);
    Py_DECREF(dict);
    return repr;
}

static int
keywords_traverse(Keywords *self, visitproc visit, void *arg)
{
    Py_ssize_t i;
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->names);
    for (i = 0; i < Py_SIZE(self); i++) Py_VISIT(self->values[i]);
    return 0;
}

static int
keywords_clear(Keywords *self)
{
    Py_ssize_t i;
    Py_CLEAR(self->names);
    for (i = 0; i < Py_SIZE(self); i++) Py_CLEAR(self->values[i]);
    return 0;
}

static void
keywords_dealloc(Keywords *self)
{
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    keywords_clear(self);
    PyObject_GC_Del(self);
    Py_DECREF(type);
}

static PyMethodDef keywords_methods[] = {
    {"as_dict", (PyCFunction)keywords_as_dict, METH_NOARGS, "The map these arguments stand for, as a new dict."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot keywords_slots[] = {
    {Py_tp_doc, "An instant's keyword arguments as the C recorder keeps them (see keyword_args.py)."},
    {Py_tp_dealloc, keywords_dealloc},
    {Py_tp_traverse, keywords_traverse},
    {Py_tp_clear, keywords_clear},
    {Py_tp_repr, keywords_repr},
    {Py_tp_methods, keywords_methods},
    {0, NULL},
};

PyType_Spec keywords_spec = {
    .name = "ringtrace.wire._packer.Keywords",
    .basicsize = offsetof(Keywords, values),
    .itemsize = sizeof(PyObject *),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = keywords_slots,
};
