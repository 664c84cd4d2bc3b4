/* The wire protocol's numbers the C code (this packer and the client's recorder) writes or relies on, each from its
   Python definition (named beside it). Each module exposes them as WIRE_CONSTANTS (add_wire_constants), and a test
   holds that dict equal to the Python values: change one side and it fails. */
#ifndef RINGTRACE_WIRE_CONSTANTS_H
#define RINGTRACE_WIRE_CONSTANTS_H

/* wire/model.py: values one event takes on the recording path (kind, label, start_ns, end_ns, args), and where its
   args are among them. */
#define RECORD_FIELDS 5
#define RECORD_ARGS 4

/* wire/model.py: what event_packing.py's Python path normalises instead of packing as it is (anything past these goes
   to Python). */
#define MAX_ARG_ITEMS 1000
#define MAX_ARG_TEXT 65536

/* wire/frames.py: FRAME_HEADER "<IB" (body size, frame type), EVENTS_HEADER "<HHIIQQ" (header size, flags, track id,
   count, first and last timestamps), FrameType.EVENTS, and the columns of an EVENTS payload (EVENT_COLUMNS). */
#define FRAME_HEADER_SIZE 5
#define EVENTS_HEADER_SIZE 28
#define FRAME_TYPE_EVENTS 6
#define EVENT_COLUMN_COUNT 5

/* wire/model.py CALL and CALL_RAISED, and wire/call_records.py RECORD "<qqII": a traced call as a tracer writes it. */
#define CALL_KIND_ID 11
#define CALL_RAISED_KIND_ID 12
#define CALL_RECORD_SIZE 24

#include <Python.h>

/* WIRE_CONSTANTS on `module`: every number above by its name. 0, or -1 with an exception set. */
static inline int
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
        {"CALL_KIND_ID", CALL_KIND_ID},
        {"CALL_RAISED_KIND_ID", CALL_RAISED_KIND_ID},
        {"CALL_RECORD_SIZE", CALL_RECORD_SIZE},
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

#endif
