/* The module: its functions, its per-interpreter state, and the types it adds at import. */

#include "speedups.h"

static PyMethodDef module_methods[] = {
    {"configure", (PyCFunction)(void (*)(void))configure, METH_FASTCALL,
     "configure(get_running_loop, span_kind, instant_kind, wake[, set_running_loop]): what the recorder needs from "
     "the Python side; returns whether the running loop is read from the thread state, without a call."},
    {"running_loop", module_running_loop, METH_NOARGS,
     "running_loop(): this thread's running asyncio loop (or None), as the recorder finds it."},
    {"tracked", tracked, METH_O, "tracked(list): the list, tracked by the cyclic collector again."},
    {"take_runs", (PyCFunction)(void (*)(void))take_runs, METH_FASTCALL,
     "take_runs(list, count, run_values): the first count values of list in runs, removed from it."},
    {"pack_columns", (PyCFunction)(void (*)(void))pack_columns, METH_FASTCALL,
     "pack_columns(records, table) -> (head, first_ns, last_ns, args): an EVENTS payload's integer columns."},
    {"pack_args", (PyCFunction)(void (*)(void))pack_args, METH_FASTCALL,
     "pack_args(records, converters, values_converter, pack_other) -> (args column or None, events left out)."},
    {"pack_events", (PyCFunction)(void (*)(void))pack_events, METH_FASTCALL,
     "pack_events(records, table, converters, values_converter, track_id, max_frame_bytes) -> an EVENTS frame, or "
     "None for a run with arguments or labels of other shapes."},
    {NULL, NULL, 0, NULL},
};

static int
module_traverse(PyObject *module, visitproc visit, void *arg)
{
    ModuleState *state = PyModule_GetState(module);
    Py_VISIT(state->recorder_core_type);
    Py_VISIT(state->scope_type);
    Py_VISIT(state->null_scope_type);
    Py_VISIT(state->message_type);
    Py_VISIT(state->traced_type);
    Py_VISIT(state->keywords_type);
    Py_VISIT(state->null_scope);
    Py_VISIT(state->get_running_loop);
    Py_VISIT(state->probe_kept);
    Py_VISIT(state->wake);
    Py_VISIT(state->span_kind);
    Py_VISIT(state->instant_kind);
    return 0;
}

static int
module_clear(PyObject *module)
{
    ModuleState *state = PyModule_GetState(module);
    Py_CLEAR(state->recorder_core_type);
    Py_CLEAR(state->null_scope);
    Py_CLEAR(state->scope_type);
    Py_CLEAR(state->null_scope_type);
    Py_CLEAR(state->message_type);
    Py_CLEAR(state->traced_type);
    Py_CLEAR(state->keywords_type);
    Py_CLEAR(state->get_running_loop);
    Py_CLEAR(state->str_running_loop);
    Py_CLEAR(state->probe_kept);
    Py_CLEAR(state->wake);
    Py_CLEAR(state->span_kind);
    Py_CLEAR(state->instant_kind);
    Py_CLEAR(state->room);
    Py_CLEAR(state->str_thread_events);
    Py_CLEAR(state->str_task_events);
    Py_CLEAR(state->str_exception);
    Py_CLEAR(state->str_name);
    Py_CLEAR(state->str_kind_id);
    Py_CLEAR(state->str_label);
    Py_CLEAR(state->str_not_an_event);
    Py_CLEAR(state->str_on);
    Py_CLEAR(state->str_marker);
    return 0;
}

static void
module_free(void *module)
{
    module_clear((PyObject *)module);
}

/* A type of this module, made from its spec and added to the module; NULL on error. */
static PyTypeObject *
add_type(PyObject *module, PyType_Spec *spec, PyObject *base)
{
    PyObject *type = PyType_FromModuleAndSpec(module, spec, base);
    if (type == NULL) return NULL;
    if (PyModule_AddType(module, (PyTypeObject *)type) < 0) {
        Py_DECREF(type);
        return NULL;
    }
    return (PyTypeObject *)type;
}

/* WIRE_CONSTANTS: every number of wire_constants.h by its name, for a test to hold equal to the Python definitions. */
static int
add_wire_constants(PyObject *module)
{
    static const struct {
        const char *name;
        long value;
    } constants[] = {
        {"RECORD_FIELDS", RECORD_FIELDS},
        {"RECORD_ARGS", RECORD_ARGS},
        {"MAX_ARG_ITEMS", MAX_ARG_ITEMS},
        {"MAX_ARG_TEXT", MAX_ARG_TEXT},
        {"FRAME_HEADER_SIZE", FRAME_HEADER_SIZE},
        {"EVENTS_HEADER_SIZE", EVENTS_HEADER_SIZE},
        {"FRAME_TYPE_EVENTS", FRAME_TYPE_EVENTS},
        {"EVENT_COLUMN_COUNT", EVENT_COLUMN_COUNT},
    };
    size_t i;
    PyObject *dict = PyDict_New();
    if (dict == NULL) return -1;
    for (i = 0; i < sizeof(constants) / sizeof(constants[0]); i++) {
        PyObject *value = PyLong_FromLong(constants[i].value);
        if (value == NULL || PyDict_SetItemString(dict, constants[i].name, value) < 0) {
            Py_XDECREF(value);
            Py_DECREF(dict);
            return -1;
        }
        Py_DECREF(value);
    }
    if (PyModule_AddObjectRef(module, "WIRE_CONSTANTS", dict) < 0) {
        Py_DECREF(dict);
        return -1;
    }
    Py_DECREF(dict);
    return 0;
}

static int
module_exec(PyObject *module)
{
    ModuleState *state = PyModule_GetState(module);
    if ((state->recorder_core_type = add_type(module, &core_spec, NULL)) == NULL ||
        (state->scope_type = add_type(module, &scope_spec, NULL)) == NULL ||
        (state->null_scope_type = add_type(module, &null_scope_spec, NULL)) == NULL ||
        (state->message_type = add_type(module, &message_spec, NULL)) == NULL ||
        (state->traced_type = add_type(module, &traced_spec, NULL)) == NULL ||
        (state->keywords_type = add_type(module, &keywords_spec, NULL)) == NULL) {
        return -1;
    }
    state->room = PyTuple_Pack(RECORD_FIELDS, Py_None, Py_None, Py_None, Py_None, Py_None);
    if ((state->null_scope = new_null_scope(state->null_scope_type)) == NULL) return -1;
    state->str_thread_events = PyUnicode_InternFromString("_thread_events");
    state->str_task_events = PyUnicode_InternFromString("_task_events");
    state->str_exception = PyUnicode_InternFromString("exception");
    state->str_name = PyUnicode_InternFromString("__name__");
    state->str_kind_id = PyUnicode_InternFromString("_kind_id");
    state->str_label = PyUnicode_InternFromString("_label");
    state->str_not_an_event = PyUnicode_InternFromString("_not_an_event");
    state->str_on = PyUnicode_InternFromString("on");
    state->str_marker = PyUnicode_InternFromString("_marker");
    state->str_running_loop = PyUnicode_InternFromString("__asyncio_running_event_loop__");
    state->probe_kept = PyList_New(0);
    if (!state->str_running_loop || !state->probe_kept) return -1;
    if (!state->room || !state->str_thread_events || !state->str_task_events || !state->str_exception ||
        !state->str_name || !state->str_kind_id || !state->str_label || !state->str_not_an_event || !state->str_on ||
        !state->str_marker) {
        return -1;
    }
    /* What pack_args leaves to Python, for the tests to hold against model.py's limits. */
    if (PyModule_AddIntConstant(module, "MAX_ARG_ITEMS", MAX_ARG_ITEMS) < 0 ||
        PyModule_AddIntConstant(module, "MAX_ARG_TEXT", MAX_ARG_TEXT) < 0) {
        return -1;
    }
    return add_wire_constants(module);
}

/* Multi-phase initialisation: each interpreter that imports the module runs module_exec() for a module (and types)
   of its own. The recorder relies on the GIL (it does not build where there is none), but not on sharing it. */
static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, module_exec},
#if PY_VERSION_HEX >= 0x030C0000
    {Py_mod_multiple_interpreters, Py_MOD_PER_INTERPRETER_GIL_SUPPORTED},
#endif
#if PY_VERSION_HEX >= 0x030D0000
    {Py_mod_gil, Py_MOD_GIL_USED},
#endif
    {0, NULL},
};

struct PyModuleDef speedups_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "ringtrace.client._speedups",
    .m_doc = "The recording hot path and the stream encoder's inner loop, in C (see recorder.py and encoder.py).",
    .m_size = sizeof(ModuleState),
    .m_methods = module_methods,
    .m_slots = module_slots,
    .m_traverse = module_traverse,
    .m_clear = module_clear,
    .m_free = module_free,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    return PyModuleDef_Init(&speedups_module);
}
