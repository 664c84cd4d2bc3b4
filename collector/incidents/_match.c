/* The rules' first pass over a stored EVENTS frame, in C: the events that may meet a rule (its candidates), found
straight from the frame's msgpack payload without a Python object per event, as frame_match.py's Python twin
(_candidates_py, which defines the behaviour; the tests hold both to the same results) finds them.

The payload comes from the network: it is checked whole as msgpack-python would read it (_msgpack_read.h) before any
event is judged, and every length is checked against the bytes left. A payload it refuses, or one nested deeper than
the C reader goes, gives None: the Python twin decides then.

Optional: when this module is not built, or RINGTRACE_PURE_PYTHON=1 is set, the watch runs the Python twin. */

#include "../export/_msgpack_read.h"

/* A criterion is two int64s: the least duration that makes an event a candidate (INT64_MAX: none does), and flags. */
#define NEVER INT64_MAX
#define FLAG_STATUS_ERROR 1 /* a candidate too if its args map has "status": "error" (an OTLP span's error status) */
#define KIND_SLOTS 3        /* per kind id: min duration, flags, name group (-1: none) */
#define NAME_SLOTS 2        /* per name id in a group: min duration, flags */
#define MAX_GROUPS 16
#define OUT_SLOTS 5         /* per candidate: index, kind, name, ts, dur */

static inline int64_t
get_i64(const char *table, Py_ssize_t slot)
{
    int64_t v;
    memcpy(&v, table + slot * (Py_ssize_t)sizeof(int64_t), sizeof(v)); /* (bytes need not be 8-byte aligned) */
    return v;
}

/* Whether the args value under the cursor (checked by skip() already; the cursor is a copy) is a map whose "status"
   is the string "error". A key given twice counts with its last value, as msgpack-python keeps it. */
static int
status_is_error(Cursor args)
{
    uint32_t items;
    int error = 0;
    if (read_container(&args, 1, &items) != OK) {
        return 0;
    }
    for (uint32_t i = 0; i < items; i++) {
        Cursor key = args;
        int64_t n = str_length(&key);
        if (n < 0 || !key_is(key.p, n, "status")) {
            if (skip(&args, 1) != OK || skip(&args, 1) != OK) {
                return 0;
            }
            continue;
        }
        args.p = key.p + n;
        Cursor value = args;
        int64_t m = str_length(&value);
        error = m >= 0 && key_is(value.p, m, "error");
        if (skip(&args, 1) != OK) {
            return 0;
        }
    }
    return error;
}

static inline int
meets(int64_t min_dur, int64_t flags, int64_t dur, Cursor args)
{
    return (min_dur != NEVER && dur >= min_dur) || ((flags & FLAG_STATUS_ERROR) && status_is_error(args));
}

static inline int
read_i64(Cursor *c, int64_t *out)
{
    i128 v;
    if (read_int(c, &v) != OK || v < (i128)INT64_MIN || v > (i128)INT64_MAX) {
        return BAD;
    }
    *out = (int64_t)v;
    return OK;
}

typedef struct {
    const char *kinds;
    Py_ssize_t kind_count;
    const char *names[MAX_GROUPS];
    Py_ssize_t name_count[MAX_GROUPS];
    Py_ssize_t groups;
} Criteria;

/* The candidates of a checked payload into `out`, OUT_SLOTS int64s each: OK, or BAD when a kind, name, ts or dur is
   not an integer of 64 bits (the frame is refused whole, as the Python twin refuses it). */
static int
candidates(Cursor column[COLUMNS], Py_ssize_t count, const Criteria *criteria, Out *out)
{
    for (Py_ssize_t i = 0; i < count; i++) {
        int64_t kind, name, ts, dur;
        if (read_i64(&column[KIND], &kind) != OK || read_i64(&column[NAME], &name) != OK ||
            read_i64(&column[TS], &ts) != OK || read_i64(&column[DUR], &dur) != OK) {
            return BAD;
        }
        Cursor args = column[ARGS];
        if (skip(&column[ARGS], 0) != OK) {
            return BAD;
        }
        if (kind < 0 || kind >= criteria->kind_count) {
            continue;
        }
        Py_ssize_t at = (Py_ssize_t)kind * KIND_SLOTS;
        int hit = meets(get_i64(criteria->kinds, at), get_i64(criteria->kinds, at + 1), dur, args);
        int64_t group = get_i64(criteria->kinds, at + 2);
        if (!hit && group >= 0 && group < criteria->groups && name >= 0 && name < criteria->name_count[group]) {
            const char *names = criteria->names[group];
            Py_ssize_t slot = (Py_ssize_t)name * NAME_SLOTS;
            hit = meets(get_i64(names, slot), get_i64(names, slot + 1), dur, args);
        }
        if (hit) {
            int64_t row[OUT_SLOTS] = {(int64_t)i, kind, name, ts, dur};
            put(out, (const char *)row, sizeof(row));
        }
    }
    return OK;
}

static PyObject *
match_frame(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer payload = {0}, kinds = {0}, names[MAX_GROUPS];
    Py_ssize_t count, groups = 0;
    int column_of[COLUMNS];
    Criteria criteria = {0};
    Out out = {0};
    PyObject *result = NULL;
    int status;
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "match_frame(payload, count, columns, kinds, names)");
        return NULL;
    }
    if (frame_shape(args[1], args[2], &count, column_of) < 0) {
        return NULL;
    }
    if (!PyTuple_Check(args[4]) || PyTuple_GET_SIZE(args[4]) > MAX_GROUPS) {
        PyErr_Format(PyExc_ValueError, "names must be a tuple of at most %d buffers", MAX_GROUPS);
        return NULL;
    }
    if (PyObject_GetBuffer(args[0], &payload, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    if (PyObject_GetBuffer(args[3], &kinds, PyBUF_SIMPLE) < 0) {
        goto done;
    }
    for (; groups < PyTuple_GET_SIZE(args[4]); groups++) {
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(args[4], groups), &names[groups], PyBUF_SIMPLE) < 0) {
            goto done;
        }
        criteria.names[groups] = names[groups].buf;
        criteria.name_count[groups] = names[groups].len / (Py_ssize_t)(NAME_SLOTS * sizeof(int64_t));
    }
    criteria.kinds = kinds.buf;
    criteria.kind_count = kinds.len / (Py_ssize_t)(KIND_SLOTS * sizeof(int64_t));
    criteria.groups = groups;
    /* Nothing here touches a Python object: the buffers are held, so other threads (ingest) run meanwhile. */
    Py_BEGIN_ALLOW_THREADS
    Cursor column[COLUMNS];
    status = read_columns(payload.buf, (size_t)payload.len, count, column_of, column);
    if (status == OK) {
        status = candidates(column, count, &criteria, &out);
    }
    Py_END_ALLOW_THREADS
    if (out.failed) {
        PyErr_NoMemory();
    }
    else if (status != OK) {
        result = Py_NewRef(Py_None);
    }
    else {
        result = PyBytes_FromStringAndSize(out.data ? out.data : "", (Py_ssize_t)out.len);
    }
done:
    free(out.data);
    for (Py_ssize_t i = 0; i < groups; i++) {
        PyBuffer_Release(&names[i]);
    }
    if (kinds.obj != NULL) {
        PyBuffer_Release(&kinds);
    }
    PyBuffer_Release(&payload);
    return result;
}

static PyMethodDef module_methods[] = {
    {"match_frame", (PyCFunction)(void (*)(void))match_frame, METH_FASTCALL,
     "match_frame(payload, count, columns, kinds, names) -> bytes of int64 (index, kind, name, ts, dur) per "
     "candidate, or None: the payload is left to the Python twin (frame_match.py)."},
    {NULL, NULL, 0, NULL},
};

/* No state: each interpreter can import it, with a GIL of its own. */
static PyModuleDef_Slot module_slots[] = {
#if PY_VERSION_HEX >= 0x030C0000
    {Py_mod_multiple_interpreters, Py_MOD_PER_INTERPRETER_GIL_SUPPORTED},
#endif
#if PY_VERSION_HEX >= 0x030D0000
    {Py_mod_gil, Py_MOD_GIL_USED},
#endif
    {0, NULL},
};

static struct PyModuleDef match_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "ringtrace.collector.incidents._match",
    .m_doc = "The rules' first pass over a stored EVENTS frame's payload, in C (see frame_match.py).",
    .m_size = 0,
    .m_methods = module_methods,
    .m_slots = module_slots,
};

PyMODINIT_FUNC
PyInit__match(void)
{
    return PyModuleDef_Init(&match_module);
}
