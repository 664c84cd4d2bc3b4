/* pack_columns(): the four integer columns of an EVENTS payload (kinds, string ids, offsets, durations), and the
   string ids of labels, which pack_events() looks up too. */

#include "packer.h"

/* The string id of `label` in `table` (a StringTable: a dict whose __missing__ assigns ids). Returns 1 for an id the
   table holds (the next event with this label gets the same), 0 for one __missing__ gave (it counts each lookup that
   finds the table full: look again next time), -1 on error. The caller holds a reference to `label`: its __hash__,
   __eq__ and __str__ run here. */
int
string_id(PyObject *table, PyObject *label, int64_t *out)
{
    PyObject *id = PyDict_GetItemWithError(table, label);
    int result;
    if (id != NULL) {
        Py_INCREF(id);
        result = as_int64(id, "a string id", out);
        Py_DECREF(id);
        return result < 0 ? -1 : 1;
    }
    if (PyErr_Occurred()) return -1;
    id = PyObject_GetItem(table, label);
    if (id == NULL) return -1;
    result = as_int64(id, "a string id", out);
    Py_DECREF(id);
    return result;
}

PyObject *
pack_columns(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *records, *table, *arg_column = NULL, *head = NULL, *result = NULL;
    Py_ssize_t n, i;
    int64_t *columns = NULL, *kinds, *names, *starts, *ends, first, last;
    PyObject *last_label = NULL; /* consecutive events mostly share a label: look it up once */
    int64_t last_id = 0;
    int any_args = 0;
    unsigned char *p;
    if (nargs != 2 || !PyList_CheckExact(args[0]) || !PyDict_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "pack_columns(records: list, table: StringTable)");
        return NULL;
    }
    records = args[0];
    table = args[1];
    Py_INCREF(records);
    n = PyList_GET_SIZE(records) / RECORD_FIELDS;
    if (n == 0 || PyList_GET_SIZE(records) % RECORD_FIELDS != 0) {
        PyErr_Format(PyExc_ValueError, "pack_columns: %zd values are not whole events", PyList_GET_SIZE(records));
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
    for (i = 0; i < n; i++) {
        PyObject *value;
        if ((value = record_value(records, i, 0)) == NULL || as_int64(value, "a kind", &kinds[i]) < 0) goto done;
        if ((value = record_value(records, i, 1)) == NULL) goto done;
        if (value != last_label) {
            int held;
            Py_INCREF(value);
            held = string_id(table, value, &last_id);
            if (held < 0) {
                Py_DECREF(value);
                goto done;
            }
            Py_XSETREF(last_label, held ? value : NULL);
            if (!held) Py_DECREF(value);
        }
        names[i] = last_id;
        if ((value = record_value(records, i, 2)) == NULL || as_int64(value, "a start", &starts[i]) < 0) goto done;
        if ((value = record_value(records, i, 3)) == NULL || as_int64(value, "an end", &ends[i]) < 0) goto done;
        if ((value = record_value(records, i, RECORD_ARGS)) == NULL) goto done;
        any_args |= value != Py_None;
    }
    first = starts[0];
    last = ends[0];
    for (i = 1; i < n; i++) {
        if (starts[i] < first) first = starts[i];
        if (ends[i] > last) last = ends[i];
    }
    for (i = 0; i < n; i++) {
        int64_t unused;
        if (__builtin_sub_overflow(ends[i], starts[i], &unused) || __builtin_sub_overflow(starts[i], first, &unused)) {
            PyErr_SetString(PyExc_OverflowError, "pack_columns: an offset or duration does not fit 64 bits");
            goto done;
        }
    }
    /* 1 + 4 columns of (5-byte header + 9 bytes per value) + the args column when it is all nil. */
    head = PyBytes_FromStringAndSize(NULL, 1 + 5 * 5 + 9 * 4 * n + n);
    if (head == NULL) goto done;
    p = (unsigned char *)PyBytes_AS_STRING(head);
    p = put_array_header(p, EVENT_COLUMN_COUNT);
    p = put_array_header(p, n);
    for (i = 0; i < n; i++) p = put_int(p, kinds[i]);
    p = put_array_header(p, n);
    for (i = 0; i < n; i++) p = put_int(p, names[i]);
    p = put_array_header(p, n);
    for (i = 0; i < n; i++) p = put_int(p, starts[i] - first);
    p = put_array_header(p, n);
    for (i = 0; i < n; i++) p = put_int(p, ends[i] - starts[i]);
    if (any_args) {
        arg_column = PyList_New(n);
        if (arg_column == NULL) goto done;
        for (i = 0; i < n; i++) {
            PyObject *value = record_value(records, i, RECORD_ARGS);
            if (value == NULL) goto done;
            PyList_SET_ITEM(arg_column, i, Py_NewRef(value));
        }
    }
    else {
        p = put_array_header(p, n);
        memset(p, 0xc0, n);
        p += n;
        arg_column = Py_NewRef(Py_None);
    }
    if (_PyBytes_Resize(&head, (char *)p - PyBytes_AS_STRING(head)) < 0) goto done;
    result = Py_BuildValue("(OLLO)", head, (long long)first, (long long)last, arg_column);
done:
    PyMem_Free(columns);
    Py_XDECREF(last_label);
    Py_XDECREF(head);
    Py_XDECREF(arg_column);
    Py_DECREF(records);
    return result;
}
