/* How far a stored EVENTS frame's events reach past their starts, in C, with the GIL released: the twin of
read/reach.py's frame_ahead(), which defines it (a window measures a segment's frames once: read/reach.py).

frame_reach() reads the payload's kind and dur columns (every value checked as msgpack-python reads it, with
_msgpack_read.h) and returns (ahead, paired): the longest `dur` of the events whose kind lasts (a span, a traced
call), 0 if none, capped at INT64_MAX; and whether any event's kind pairs (a marker, source activity, an async slice:
their pairs are matched by the Python side, which decodes such a frame). None: a payload the Python side must read
(not the five arrays of `count` values, trailing bytes, a kind or a lasting event's dur that is not an integer). */

#include "_msgpack_read.h"

/* Kind codes, one byte per kind id (read/reach.py's table). */
#define REACH_OTHER 0
#define REACH_LASTS 1
#define REACH_PAIRS 2

typedef struct {
    const uint8_t *payload;
    size_t payload_len;
    Py_ssize_t count;
    int column_of[COLUMNS];
    const uint8_t *codes;
    Py_ssize_t codes_len;
    i128 ahead;
    int paired;
} Frame;

static int
measure(Frame *f)
{
    Cursor column[COLUMNS];
    if (read_columns(f->payload, f->payload_len, f->count, f->column_of, column) != OK) {
        return BAD;
    }
    for (Py_ssize_t i = 0; i < f->count; i++) {
        i128 kind, dur;
        if (read_int(&column[KIND], &kind) != OK) {
            return BAD;
        }
        int code = kind >= 0 && kind < f->codes_len ? f->codes[(Py_ssize_t)kind] : REACH_OTHER;
        if (code == REACH_LASTS) {
            if (read_int(&column[DUR], &dur) != OK) {
                return BAD;
            }
            if (dur > f->ahead) {
                f->ahead = dur > MAX_WALL_NS ? MAX_WALL_NS : dur;
            }
        }
        else {
            if (skip(&column[DUR], 0) != OK) {
                return BAD;
            }
            f->paired |= code == REACH_PAIRS;
        }
    }
    return OK;
}

PyDoc_STRVAR(frame_reach_doc,
"frame_reach(payload, count, columns, codes)\n"
"--\n\n"
"(ahead, paired) of a stored EVENTS frame's payload, or None when the Python side must read it. columns: where kind,\n"
"name, ts, dur and args are among the payload's 5 columns; codes: a byte per kind id (0 other, 1 lasts, 2 pairs).");

static PyObject *
frame_reach(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 4) {
        PyErr_Format(PyExc_TypeError, "frame_reach() takes 4 arguments (%zd given)", nargs);
        return NULL;
    }
    Frame f;
    memset(&f, 0, sizeof(f));
    if (frame_shape(args[1], args[2], &f.count, f.column_of) < 0) {
        return NULL;
    }
    Py_buffer payload, codes;
    if (PyObject_GetBuffer(args[0], &payload, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    if (PyObject_GetBuffer(args[3], &codes, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&payload);
        return NULL;
    }
    f.payload = payload.buf;
    f.payload_len = (size_t)payload.len;
    f.codes = codes.buf;
    f.codes_len = codes.len;
    int status;
    Py_BEGIN_ALLOW_THREADS
    status = measure(&f);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&codes);
    PyBuffer_Release(&payload);
    if (status != OK) {
        Py_RETURN_NONE;
    }
    return Py_BuildValue("(LO)", (long long)f.ahead, f.paired ? Py_True : Py_False);
}

static PyMethodDef module_methods[] = {
    {"frame_reach", (PyCFunction)(void (*)(void))frame_reach, METH_FASTCALL, frame_reach_doc},
    {NULL, NULL, 0, NULL},
};

/* No state at all, so each interpreter can import it, with a GIL of its own or none: frame_reach() touches only its
   arguments, and runs with the GIL released. */
static PyModuleDef_Slot module_slots[] = {
#if PY_VERSION_HEX >= 0x030C0000
    {Py_mod_multiple_interpreters, Py_MOD_PER_INTERPRETER_GIL_SUPPORTED},
#endif
#if PY_VERSION_HEX >= 0x030D0000
    {Py_mod_gil, Py_MOD_GIL_NOT_USED},
#endif
    {0, NULL},
};

static struct PyModuleDef reach_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "ringtrace.collector.read._reach",
    .m_doc = "How far a stored EVENTS frame's events reach past their starts, in C (see reach.py).",
    .m_size = 0,
    .m_methods = module_methods,
    .m_slots = module_slots,
};

PyMODINIT_FUNC
PyInit__reach(void)
{
    return PyModuleDef_Init(&reach_module);
}
