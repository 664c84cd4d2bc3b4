/* pack_args(): the args column of an EVENTS payload, the common shapes here and every other by a Python function. */

#include "packer.h"

/* Event i's arguments, packed here when they are of the common shapes, else by pack_other(kind, args) (Python: the
   bytes, or None for an event it leaves out). 1 when written, 0 for an event left out, -1 on error. */
static int
pack_event_args(Packed *out, PyObject *kind, PyObject *args, PyObject *converters, PyObject *values_converter,
                PyObject *pack_other, PyTypeObject *keywords_type)
{
    PyObject *packed, *call[2] = {kind, args};
    int written = 0;
    if (args == Py_None) {
        if (packed_reserve(out, 1) < 0) return -1;
        out->data[out->size++] = 0xc0;
        return 1;
    }
    if (PyDict_CheckExact(args)) written = pack_flat_map(out, args);
    else if (Py_IS_TYPE(args, keywords_type)) written = pack_keywords(out, (Keywords *)args);
    else if (PyTuple_CheckExact(args)) {
        /* Only for the kinds whose values normalise_values converts (messages): compared, never dereferenced. */
        PyObject *converter = PyDict_GetItemWithError(converters, kind);
        if (converter == NULL && PyErr_Occurred()) return -1;
        if (converter == values_converter) written = pack_flat_values(out, args);
    }
    if (written != 0) return written;
    packed = PyObject_Vectorcall(pack_other, call, 2, NULL);
    if (packed == NULL) return -1;
    if (packed == Py_None) written = 0;
    else if (!PyBytes_CheckExact(packed)) {
        PyErr_Format(PyExc_TypeError, "pack_args: pack_other returned %.100s, not bytes", Py_TYPE(packed)->tp_name);
        written = -1;
    }
    else if (packed_reserve(out, PyBytes_GET_SIZE(packed)) < 0) written = -1;
    else {
        memcpy(out->data + out->size, PyBytes_AS_STRING(packed), (size_t)PyBytes_GET_SIZE(packed));
        out->size += PyBytes_GET_SIZE(packed);
        written = 1;
    }
    Py_DECREF(packed);
    return written;
}

/* Whether any of the n events of `records` has arguments. */
static int
any_args(PyObject *records, Py_ssize_t n)
{
    Py_ssize_t i;
    for (i = 0; i < n; i++) {
        if (PyList_GET_ITEM(records, i * RECORD_FIELDS + RECORD_ARGS) != Py_None) return 1;
    }
    return 0;
}

PyObject *
pack_args(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *records, *converters, *values_converter, *pack_other, *rejected = NULL, *column = NULL;
    PyObject *result = NULL;
    Packed out = {NULL, 0, 0};
    Py_ssize_t n, i;
    int with_args = 0; /* an event kept has arguments */
    if (nargs != 4 || !PyList_CheckExact(args[0]) || !PyDict_Check(args[1]) || !PyCallable_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, "pack_args(records: list, converters: dict, values_converter, pack_other)");
        return NULL;
    }
    records = args[0];
    converters = args[1];
    values_converter = args[2];
    pack_other = args[3];
    Py_INCREF(records);
    n = PyList_GET_SIZE(records) / RECORD_FIELDS;
    if (PyList_GET_SIZE(records) % RECORD_FIELDS != 0 || n > 0xFFFFFFFFLL) {
        PyErr_Format(PyExc_ValueError, "pack_args: %zd values are not whole events of one run", PyList_GET_SIZE(records));
        goto done;
    }
    if ((rejected = PyList_New(0)) == NULL) goto done;
    if (!any_args(records, n)) { /* spans and instants without arguments: the usual case */
        result = PyTuple_Pack(2, Py_None, rejected);
        goto done;
    }
    /* 5 bytes kept in front for the array header, written last (the events left out are not known before). */
    if (packed_reserve(&out, 5 + 16 * n) < 0) goto done;
    out.size = 5;
    for (i = 0; i < n; i++) {
        PyObject *kind, *event_args;
        int written;
        if ((i + 1) * RECORD_FIELDS > PyList_GET_SIZE(records)) { /* pack_other ran Python code that took some */
            PyErr_SetString(PyExc_RuntimeError, "pack_args: the records changed while being packed");
            goto done;
        }
        /* Held while pack_other runs: it may run any Python code. */
        kind = Py_NewRef(PyList_GET_ITEM(records, i * RECORD_FIELDS));
        event_args = Py_NewRef(PyList_GET_ITEM(records, i * RECORD_FIELDS + RECORD_ARGS));
        written = pack_event_args(&out, kind, event_args, converters, values_converter, pack_other,
                                  ((PackerState *)PyModule_GetState(module))->keywords_type);
        with_args |= written > 0 && event_args != Py_None;
        Py_DECREF(kind);
        Py_DECREF(event_args);
        if (written < 0) goto done;
        if (written == 0) {
            PyObject *index = PyLong_FromSsize_t(i);
            if (index == NULL || PyList_Append(rejected, index) < 0) {
                Py_XDECREF(index);
                goto done;
            }
            Py_DECREF(index);
        }
    }
    if (with_args) {
        unsigned char header[5];
        Py_ssize_t header_size = put_array_header(header, n - PyList_GET_SIZE(rejected)) - header;
        memcpy(out.data + 5 - header_size, header, (size_t)header_size);
        column = PyBytes_FromStringAndSize((char *)out.data + 5 - header_size, out.size - 5 + header_size);
        if (column == NULL) goto done;
    }
    else column = Py_NewRef(Py_None);
    result = PyTuple_Pack(2, column, rejected);
done:
    PyMem_Free(out.data);
    Py_XDECREF(column);
    Py_XDECREF(rejected);
    Py_DECREF(records);
    return result;
}
