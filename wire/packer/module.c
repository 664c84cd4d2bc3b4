/* The module: its functions, the Keywords type, the wire numbers it was compiled with. */

#include "packer.h"

/* tracked(list): `list`, tracked by the cyclic collector again (take_runs() makes its run lists untracked, for the
   flusher's time with them): for a listener that may keep it, where a cycle could go through it. */
static PyObject *
tracked(PyObject *Py_UNUSED(module), PyObject *list)
{
    if (!PyList_CheckExact(list)) {
        PyErr_Format(PyExc_TypeError, "tracked() takes a list, not %.100s", Py_TYPE(list)->tp_name);
        return NULL;
    }
    if (!PyObject_GC_IsTracked(list)) PyObject_GC_Track(list);
    return Py_NewRef(list);
}

static PyMethodDef packer_methods[] = {
    {"tracked", tracked, METH_O, "tracked(list): the list, tracked by the cyclic collector again."},
    {"pack_columns", (PyCFunction)(void (*)(void))pack_columns, METH_FASTCALL,
     "pack_columns(records, table) -> (head, first_ns, last_ns, args): an EVENTS payload's integer columns."},
    {"pack_args", (PyCFunction)(void (*)(void))pack_args, METH_FASTCALL,
     "pack_args(records, converters, values_converter, pack_other) -> (args column or None, events left out)."},
    {"pack_events", (PyCFunction)(void (*)(void))pack_events, METH_FASTCALL,
     "pack_events(records, table, converters, values_converter, track_id, max_frame_bytes) -> an EVENTS frame, or "
     "None for a run with arguments or labels of other shapes."},
    {"pack_records", (PyCFunction)(void (*)(void))pack_records, METH_FASTCALL,
     "pack_records(records, offset, max_count, names, overflow_id, track_id, max_frame_bytes) -> the label indexes "
     "not interned yet, or (frame or None, records packed, offset past them, records named with the overflow id)."},
    {"pack_calls", (PyCFunction)(void (*)(void))pack_calls, METH_FASTCALL,
     "pack_calls(records, first, count, names, stacks, overflow_id, track_id, max_frame_bytes) -> the location "
     "indexes not interned yet (a list), or (an EVENTS frame or None past max_frame_bytes, overflowed names, calls "
     "with no stack id)."},
    {NULL, NULL, 0, NULL},
};

static int
packer_traverse(PyObject *module, visitproc visit, void *arg)
{
    PackerState *state = PyModule_GetState(module);
    Py_VISIT(state->keywords_type);
    return 0;
}

static int
packer_clear(PyObject *module)
{
    PackerState *state = PyModule_GetState(module);
    Py_CLEAR(state->keywords_type);
    return 0;
}

static void
packer_free(void *module)
{
    packer_clear((PyObject *)module);
}

static int
packer_exec(PyObject *module)
{
    PackerState *state = PyModule_GetState(module);
    PyObject *type = PyType_FromModuleAndSpec(module, &keywords_spec, NULL);
    if (type == NULL) return -1;
    if (PyModule_AddType(module, (PyTypeObject *)type) < 0) {
        Py_DECREF(type);
        return -1;
    }
    state->keywords_type = (PyTypeObject *)type;
    /* What pack_args leaves to Python, for the tests to hold against model.py's limits. */
    if (PyModule_AddIntConstant(module, "MAX_ARG_ITEMS", MAX_ARG_ITEMS) < 0 ||
        PyModule_AddIntConstant(module, "MAX_ARG_TEXT", MAX_ARG_TEXT) < 0) {
        return -1;
    }
    return add_wire_constants(module);
}

/* Multi-phase initialisation: each interpreter that imports the module runs packer_exec() for a module (and type) of
   its own. It relies on the GIL (its packers read lists and dicts while no Python code runs), not on sharing it. */
static PyModuleDef_Slot packer_slots[] = {
    {Py_mod_exec, packer_exec},
#if PY_VERSION_HEX >= 0x030C0000
    {Py_mod_multiple_interpreters, Py_MOD_PER_INTERPRETER_GIL_SUPPORTED},
#endif
#if PY_VERSION_HEX >= 0x030D0000
    {Py_mod_gil, Py_MOD_GIL_USED},
#endif
    {0, NULL},
};

static struct PyModuleDef packer_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "ringtrace.wire._packer",
    .m_doc = "The stream encoder's inner loop, in C (see event_packing.py).",
    .m_size = sizeof(PackerState),
    .m_methods = packer_methods,
    .m_slots = packer_slots,
    .m_traverse = packer_traverse,
    .m_clear = packer_clear,
    .m_free = packer_free,
};

PyMODINIT_FUNC
PyInit__packer(void)
{
    return PyModuleDef_Init(&packer_module);
}
