/* pack_events(): a whole EVENTS frame in one pass for a run of the common shapes: what pack_columns and pack_args
   write, behind the frame's headers (wire/frames.py FRAME_HEADER "<IB" and EVENTS_HEADER "<HHIIQQ"), in one buffer
   made once. The flusher spends on each event about what the recording call did, so copies and calls per run count
   here. */

#include "packer.h"

/* Raise the wire's FrameTooLarge(size, limit), as the Python path's encode() does (a ValueError if that cannot be
   had), so that the encoder tells a run to split from one to pack the general way. */
static void
frame_too_large(Py_ssize_t size, long long limit)
{
    PyObject *errors = PyImport_ImportModule("ringtrace.wire.errors"), *error = NULL, *raised = NULL;
    if (errors != NULL) error = PyObject_GetAttrString(errors, "FrameTooLarge");
    if (error != NULL) raised = PyObject_CallFunction(error, "nL", size, limit);
    if (raised != NULL) {
        PyErr_SetObject(error, raised);
    }
    else {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "pack_events: a frame of %zd bytes is past %lld", size, limit);
    }
    Py_XDECREF(raised);
    Py_XDECREF(error);
    Py_XDECREF(errors);
}

/* One event's arguments when they have a common shape (see pack_event_args): 1 when written, 0 when they have another
   shape (nothing written), -1 on error. Runs no Python code. `last_kind` (a reference) and `last_values` cache whether
   the last kind seen takes a message's values. */
static int
pack_common_args(Packed *out, PyObject *kind, PyObject *args, PyObject *converters, PyObject *values_converter,
                 PyTypeObject *keywords_type, KeyCache *key_cache, PyObject **last_kind, int *last_values)
{
    if (args == Py_None) {
        if (packed_reserve(out, 1) < 0) return -1;
        out->data[out->size++] = 0xc0;
        return 1;
    }
    if (Py_IS_TYPE(args, keywords_type)) return pack_keywords_cached(out, (Keywords *)args, key_cache);
    if (PyDict_CheckExact(args)) return pack_flat_map(out, args);
    if (!PyTuple_CheckExact(args)) return 0;
    if (kind != *last_kind) {
        /* The kind is an int: its hash and comparison run no Python code. Compared, never dereferenced. */
        PyObject *converter = PyDict_GetItemWithError(converters, kind);
        if (converter == NULL && PyErr_Occurred()) return -1;
        Py_XSETREF(*last_kind, Py_NewRef(kind));
        *last_values = converter != NULL && converter == values_converter;
    }
    return *last_values ? pack_flat_values(out, args) : 0;
}

PyObject *
pack_events(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *records, *table, *converters, *values_converter, *result = NULL;
    PyObject *last_label = NULL, *last_kind = NULL; /* consecutive events mostly share both */
    PackerState *state = PyModule_GetState(module);
    KeyCache key_cache = {NULL, {NULL, 0, 0}, {0}};
    int64_t *columns = NULL, *kinds, *names, *starts, *ends, first, last, last_id = 0;
    long long track_id, max_frame_bytes;
    Packed packed = {NULL, 0, 0};
    Py_ssize_t n, i, head_size, body_size;
    int last_values = 0;
    unsigned char *p;
    if (nargs != 6 || !PyList_CheckExact(args[0]) || !PyDict_Check(args[1]) || !PyDict_Check(args[2]) ||
        !PyLong_Check(args[4]) || !PyLong_Check(args[5])) {
        PyErr_SetString(PyExc_TypeError, "pack_events(records: list, table: StringTable, converters: dict, "
                                         "values_converter, track_id: int, max_frame_bytes: int)");
        return NULL;
    }
    records = args[0];
    table = args[1];
    converters = args[2];
    values_converter = args[3];
    if ((track_id = PyLong_AsLongLong(args[4])) == -1 && PyErr_Occurred()) return NULL;
    if ((max_frame_bytes = PyLong_AsLongLong(args[5])) == -1 && PyErr_Occurred()) return NULL;
    if (track_id < 0 || track_id > 0xFFFFFFFFLL) {
        PyErr_Format(PyExc_ValueError, "pack_events: track id %lld does not fit 32 bits", track_id);
        return NULL;
    }
    Py_INCREF(records);
    n = PyList_GET_SIZE(records) / RECORD_FIELDS;
    if (n == 0 || PyList_GET_SIZE(records) % RECORD_FIELDS != 0 || n > 0xFFFFFFFFLL) {
        PyErr_Format(PyExc_ValueError, "pack_events: %zd values are not whole events of one frame",
                     PyList_GET_SIZE(records));
        goto done;
    }
    columns = PyMem_Malloc(sizeof(int64_t) * 4 * n);
    if (columns == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    kinds = columns;
    names = columns + n;
    starts = columns + 2 * n;
    ends = columns + 3 * n;
    if (packed_reserve(&packed, 16 * n) < 0) goto done;
    for (i = 0; i < n; i++) {
        PyObject *value, *event_args, *end;
        int written;
        if ((value = record_value(records, i, 0)) == NULL || as_int64(value, "a kind", &kinds[i]) < 0) goto done;
        if ((event_args = record_value(records, i, RECORD_ARGS)) == NULL) goto done;
        /* The arguments first, as pack_args before pack_columns: an event of another shape leaves the run to them
           before its label takes an id. */
        written = pack_common_args(&packed, value, event_args, converters, values_converter, state->keywords_type,
                                   &key_cache, &last_kind, &last_values);
        if (written < 0) goto done;
        if (written == 0) {
            result = Py_NewRef(Py_None);
            goto done;
        }
        if ((value = record_value(records, i, 1)) == NULL) goto done;
        if (value != last_label) {
            int held;
            if (!PyUnicode_CheckExact(value)) { /* its __hash__ and __eq__ may run any code: theirs to look up */
                result = Py_NewRef(Py_None);
                goto done;
            }
            Py_INCREF(value);
            held = string_id(table, value, &last_id); /* a miss runs the table's __missing__ */
            if (held < 0) {
                Py_DECREF(value);
                goto done;
            }
            Py_XSETREF(last_label, held ? value : NULL);
            if (!held) Py_DECREF(value);
        }
        names[i] = last_id;
        if ((value = record_value(records, i, 2)) == NULL || as_int64(value, "a start", &starts[i]) < 0) goto done;
        end = record_value(records, i, 3);
        if (end == value) ends[i] = starts[i]; /* an instant: its start, read once */
        else if (end == NULL || as_int64(end, "an end", &ends[i]) < 0) goto done;
    }
    first = starts[0];
    last = ends[0];
    for (i = 1; i < n; i++) {
        if (starts[i] < first) first = starts[i];
        if (ends[i] > last) last = ends[i];
    }
    if (first < 0 || last < 0) { /* the header's timestamps are unsigned */
        PyErr_SetString(PyExc_OverflowError, "pack_events: a timestamp before 0");
        goto done;
    }
    head_size = 1 + 4 * array_header_size(n) + array_header_size(n);
    for (i = 0; i < n; i++) {
        int64_t offset, duration;
        if (__builtin_sub_overflow(ends[i], starts[i], &duration) || __builtin_sub_overflow(starts[i], first, &offset)) {
            PyErr_SetString(PyExc_OverflowError, "pack_events: an offset or duration does not fit 64 bits");
            goto done;
        }
        head_size += int_size(kinds[i]) + int_size(names[i]) + int_size(offset) + int_size(duration);
    }
    body_size = EVENTS_HEADER_SIZE + head_size + packed.size;
    if (FRAME_HEADER_SIZE + body_size > max_frame_bytes || body_size > 0xFFFFFFFFLL) {
        frame_too_large(FRAME_HEADER_SIZE + body_size, max_frame_bytes);
        goto done;
    }
    result = PyBytes_FromStringAndSize(NULL, FRAME_HEADER_SIZE + body_size);
    if (result == NULL) goto done;
    p = (unsigned char *)PyBytes_AS_STRING(result);
    p = put_events_head(p, body_size, track_id, n, first, last);
    p = put_array_header(p, n);
    for (i = 0; i < n; i++) p = put_int(p, kinds[i]);
    p = put_array_header(p, n);
    for (i = 0; i < n; i++) p = put_int(p, names[i]);
    p = put_array_header(p, n);
    for (i = 0; i < n; i++) p = put_int(p, starts[i] - first);
    p = put_array_header(p, n);
    for (i = 0; i < n; i++) p = put_int(p, ends[i] - starts[i]);
    p = put_array_header(p, n);
    memcpy(p, packed.data, (size_t)packed.size);
    assert(p + packed.size == (unsigned char *)PyBytes_AS_STRING(result) + PyBytes_GET_SIZE(result));
done:
    PyMem_Free(columns);
    PyMem_Free(packed.data);
    PyMem_Free(key_cache.keys.data);
    Py_XDECREF(key_cache.names);
    Py_XDECREF(last_label);
    Py_XDECREF(last_kind);
    Py_DECREF(records);
    return result;
}
