/* A span of a trace begun, once its parent is known (trace_context.TraceScope.__enter__): its ids drawn, its args
   with them, and it made the current span. The pure-Python twin is trace_context._begin_span; this is the same in one
   call, which a server's every request makes (the Python one is a good part of the server span's cost). */

#include "speedups.h"

/* configure_spans(SpanContext, _Active, _ACTIVE, getrandbits, SAMPLED), once, at trace_context's import. */
PyObject *
configure_spans(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    ModuleState *state = PyModule_GetState(module);
    if (nargs != 5 || !PyType_Check(args[0]) || !PyType_IsSubtype((PyTypeObject *)args[0], &PyTuple_Type) ||
        !PyType_Check(args[1]) || !PyType_IsSubtype((PyTypeObject *)args[1], &PyTuple_Type) ||
        !PyContextVar_CheckExact(args[2]) || !PyLong_CheckExact(args[4])) {
        PyErr_SetString(PyExc_TypeError, "configure_spans(SpanContext, _Active, _ACTIVE, getrandbits, SAMPLED): two "
                                         "tuple types, a ContextVar, a function and an int");
        return NULL;
    }
    Py_XSETREF(state->span_context_type, Py_NewRef(args[0]));
    Py_XSETREF(state->active_type, Py_NewRef(args[1]));
    Py_XSETREF(state->active_var, Py_NewRef(args[2]));
    Py_XSETREF(state->random_bits, Py_NewRef(args[3]));
    Py_XSETREF(state->int_sampled, Py_NewRef(args[4]));
    Py_RETURN_NONE;
}

/* `count` (1 or 3) words of 64 random bits from Python's random.getrandbits (which a forked child seeds anew), in one
   draw of 64 * count bits: words[0] its lowest 64, words[count - 1] its highest (getrandbits(192) is three draws of
   64, the first the lowest, so this is what three draws give); -1 with an exception set. */
static int
draw(ModuleState *state, uint64_t *words, int count)
{
    unsigned char bytes[24]; /* (little-endian: the lowest byte first) */
    PyObject *drawn = PyObject_CallOneArg(state->random_bits, count == 1 ? state->int_64 : state->int_192);
    int failed;
    if (drawn == NULL) return -1;
    if (!PyLong_Check(drawn)) {
        PyErr_Format(PyExc_TypeError, "getrandbits(%d) gave %.100s, not an int", 64 * count, Py_TYPE(drawn)->tp_name);
        Py_DECREF(drawn);
        return -1;
    }
    /* (what does not fit, or is negative: OverflowError on every version, as 3.11's and 3.12's conversion says it) */
#if PY_VERSION_HEX >= 0x030D0000
    Py_ssize_t needed = PyLong_AsNativeBytes(drawn, bytes, 8 * count,
                                             Py_ASNATIVEBYTES_LITTLE_ENDIAN | Py_ASNATIVEBYTES_UNSIGNED_BUFFER |
                                                 Py_ASNATIVEBYTES_REJECT_NEGATIVE);
    failed = needed < 0 || needed > 8 * count; /* (fewer: leading zeros, all written) */
    if (needed < 0 && PyErr_ExceptionMatches(PyExc_ValueError)) {
        PyErr_SetString(PyExc_OverflowError, "can't convert negative int to unsigned");
    }
    else if (needed > 8 * count) {
        PyErr_SetString(PyExc_OverflowError, "int too big to convert");
    }
#else
    failed = _PyLong_AsByteArray((PyLongObject *)drawn, bytes, 8 * count, 1, 0) < 0;
#endif
    Py_DECREF(drawn);
    if (failed) return -1;
    for (int w = 0; w < count; w++) {
        words[w] = 0;
        for (int i = 7; i >= 0; i--) {
            words[w] = (words[w] << 8) | bytes[8 * w + i];
        }
    }
    return 0;
}

/* `count` 64-bit words as lowercase hex, 16 digits each, the first word first; NULL with an exception set. */
static PyObject *
hex_of(const uint64_t *words, int count)
{
    static const char digits[] = "0123456789abcdef";
    PyObject *text = PyUnicode_New(16 * count, 127);
    Py_UCS1 *out;
    if (text == NULL) return NULL;
    out = PyUnicode_1BYTE_DATA(text);
    for (int w = 0; w < count; w++) {
        for (int i = 0; i < 16; i++) {
            out[16 * w + i] = (Py_UCS1)digits[(words[w] >> (60 - 4 * i)) & 15];
        }
    }
    return text;
}

/* An instance of the tuple subclass `type` holding `items` (stolen, all or none given: NULL ones mean failure, the
   others released), made as tuple.__new__(type, items) makes it (tuple's own constructor: on 3.14 it also sets the
   tuple's cached hash); NULL with an exception set. */
static PyObject *
tuple_of(PyObject *type, PyObject **items, Py_ssize_t count)
{
    PyObject *plain = NULL, *args, *tuple;
    Py_ssize_t i;
    for (i = 0; i < count; i++) {
        if (items[i] == NULL) goto fail;
    }
#if PY_VERSION_HEX < 0x030E0000
    /* (before 3.14, what tuple.__new__ does for a subclass: its instance allocated, the items set; without the plain
       tuple and the argument tuple made on the way, about 400 instructions each) */
    if ((tuple = ((PyTypeObject *)type)->tp_alloc((PyTypeObject *)type, count)) == NULL) goto fail;
    for (i = 0; i < count; i++) {
        PyTuple_SET_ITEM(tuple, i, items[i]);
    }
    return tuple;
#endif
    if ((plain = PyTuple_New(count)) == NULL) goto fail;
    for (i = 0; i < count; i++) {
        PyTuple_SET_ITEM(plain, i, items[i]);
    }
    args = PyTuple_Pack(1, plain);
    Py_DECREF(plain);
    if (args == NULL) return NULL;
    tuple = PyTuple_Type.tp_new((PyTypeObject *)type, args, NULL);
    Py_DECREF(args);
    return tuple;
fail:
    for (i = 0; i < count; i++) {
        Py_XDECREF(items[i]);
    }
    return NULL;
}

/* The new span's SpanContext: a child of `parent` (a SpanContext), or the first span of a new trace (parent None);
   ids never all zero, as the specification asks. The bits are those traceparent.new_root and child_of take from
   the same generator: getrandbits(192), the lowest 64 the span id, the highest 128 the trace id; a child's span id
   getrandbits(64). NULL with an exception set. */
static PyObject *
new_context(ModuleState *state, PyObject *parent)
{
    uint64_t words[3] = {0, 0, 0}, trace[2];
    PyObject *items[4];
    if (parent == Py_None) {
        do { /* (all drawn again when either id is all zeros, as new_root does) */
            if (draw(state, words, 3) < 0) return NULL;
        } while (words[0] == 0 || (words[1] == 0 && words[2] == 0));
        trace[0] = words[2];
        trace[1] = words[1];
        items[0] = hex_of(trace, 2);
        items[2] = Py_NewRef(state->int_sampled);
        items[3] = Py_NewRef(state->empty_name);
    }
    else {
        while (words[0] == 0) {
            if (draw(state, words, 1) < 0) return NULL;
        }
        items[0] = Py_NewRef(PyTuple_GET_ITEM(parent, 0));
        items[2] = Py_NewRef(PyTuple_GET_ITEM(parent, 2));
        items[3] = Py_NewRef(PyTuple_GET_ITEM(parent, 3));
    }
    items[1] = hex_of(&words[0], 1);
    return tuple_of(state->span_context_type, items, 4);
}

/* trace_context.serving(): 1 where the current span is a server span or inside one, 0 where not, -1 with an
   exception set. Where a span ended in another context, the Python side says (the current span is then the one it was
   begun in, as far as that context is concerned). */
int
is_serving(ModuleState *state)
{
    PyObject *active;
    int serving;
    if (state->ended_entries != NULL && PyDict_GET_SIZE(state->ended_entries) != 0 && state->serving_twin != NULL) {
        if ((active = PyObject_CallNoArgs(state->serving_twin)) == NULL) return -1;
        serving = PyObject_IsTrue(active);
        Py_DECREF(active);
        return serving;
    }
    if (PyContextVar_Get(state->active_var, Py_None, &active) < 0) return -1;
    serving = Py_IS_TYPE(active, (PyTypeObject *)state->active_type) && PyTuple_GET_SIZE(active) == 3 &&
              PyTuple_GET_ITEM(active, 2) == Py_True;
    Py_DECREF(active);
    return serving;
}

/* The span begun: (context, args with its ids, token), as begin_span() answers; NULL with an exception set. The args
   are a copy of `given` with the ids, or where `owned` (a dict the caller made for this span, which no one else
   holds: a server span's) `given` itself, the ids added (one dict less a request). */
PyObject *
begin_span_of(ModuleState *state, PyObject *parent, PyObject *given, PyObject *kind, PyObject *otel_span, int owned)
{
    PyObject *context, *with_ids = NULL, *active, *token, *result, *items[3];
    int serving;
    if (state->span_context_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "begin_span() before configure_spans()");
        return NULL;
    }
    if (!PyDict_Check(given) || (parent != Py_None && !Py_IS_TYPE(parent, (PyTypeObject *)state->span_context_type)) ||
        (parent != Py_None && PyTuple_GET_SIZE(parent) != 4)) {
        PyErr_SetString(PyExc_TypeError, "begin_span(parent, args, kind, otel_span): a SpanContext or None, a dict, "
                                         "the kind and OpenTelemetry's span or None");
        return NULL;
    }
    if ((context = new_context(state, parent)) == NULL) return NULL;
    /* {**args, trace_id, span_id[, parent_span_id], kind}, in that order */
    if ((with_ids = owned ? Py_NewRef(given) : PyDict_Copy(given)) == NULL ||
        PyDict_SetItem(with_ids, state->str_trace_id, PyTuple_GET_ITEM(context, 0)) < 0 ||
        PyDict_SetItem(with_ids, state->str_span_id, PyTuple_GET_ITEM(context, 1)) < 0 ||
        (parent != Py_None && PyDict_SetItem(with_ids, state->str_parent_span_id, PyTuple_GET_ITEM(parent, 1)) < 0) ||
        PyDict_SetItem(with_ids, state->str_kind, kind) < 0) {
        goto fail;
    }
    if ((serving = is_serving(state)) < 0) goto fail;
    if (!serving && (serving = PyObject_RichCompareBool(kind, state->str_server, Py_EQ)) < 0) goto fail;
    items[0] = Py_NewRef(context);
    items[1] = Py_NewRef(otel_span);
    items[2] = Py_NewRef(serving ? Py_True : Py_False);
    if ((active = tuple_of(state->active_type, items, 3)) == NULL) goto fail;
    token = PyContextVar_Set(state->active_var, active);
    Py_DECREF(active);
    if (token == NULL) goto fail;
    result = PyTuple_Pack(3, context, with_ids, token);
    if (result == NULL) { /* (no one to reset it: the span is not the current one after all) */
        PyObject *type, *value, *traceback;
        PyErr_Fetch(&type, &value, &traceback);
        if (PyContextVar_Reset(state->active_var, token) < 0) PyErr_Clear();
        PyErr_Restore(type, value, traceback);
    }
    Py_DECREF(token);
    Py_DECREF(context);
    Py_DECREF(with_ids);
    return result;
fail:
    Py_DECREF(context);
    Py_XDECREF(with_ids);
    return NULL;
}

/* begin_span(parent, args, kind, otel_span): the span's SpanContext (a child of parent, or a new trace's first), a
   copy of args with its ids and kind, and the token of _ACTIVE set to _Active(context, otel_span, serving): (context,
   args, token). */
PyObject *
begin_span(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_Format(PyExc_TypeError, "begin_span(parent, args, kind, otel_span) takes 4 arguments (%zd given)", nargs);
        return NULL;
    }
    return begin_span_of(PyModule_GetState(module), args[0], args[1], args[2], args[3], 0);
}
