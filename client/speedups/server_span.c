/* A span of a trace opened and closed (trace_context.open_span and close_span), and a server span of an aiohttp
   request begun and ended (aiohttp_server.begin and end), each in one call: a server's every request makes them, and
   their Python twins' frames and bytecode were most of the span's cost on the program's thread. What is rare is asked
   of the Python side, so that there is one behaviour: OpenTelemetry in the program (its twin opens the span), a
   caller's traceparent to parse, a span ended in another context, a route not labelled before, an error's text. */

#include "speedups.h"

/* Python's `callable(args[i])` for each i in [from, to). */
static int
all_callable(PyObject *const *args, Py_ssize_t from, Py_ssize_t to)
{
    for (Py_ssize_t i = from; i < to; i++) {
        if (!PyCallable_Check(args[i])) return 0;
    }
    return 1;
}

/* configure_open_span(modules, otel_name, ended_entries, incoming, outgoing, extract, current_span, inject,
   ended_elsewhere, open_span, serving), once, at trace_context's import. */
PyObject *
configure_open_span(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    ModuleState *state = PyModule_GetState(module);
    if (nargs != 11 || !PyDict_Check(args[0]) || !PyUnicode_CheckExact(args[1]) || !PyDict_Check(args[2]) ||
        !PyFrozenSet_CheckExact(args[3]) || !PyFrozenSet_CheckExact(args[4]) || !all_callable(args, 5, 11)) {
        PyErr_SetString(PyExc_TypeError,
                        "configure_open_span(modules, otel_name, ended_entries, incoming, outgoing, extract, "
                        "current_span, inject, ended_elsewhere, open_span, serving): two dicts around a str, two "
                        "frozensets and six functions");
        return NULL;
    }
    Py_XSETREF(state->modules, Py_NewRef(args[0]));
    Py_XSETREF(state->otel_name, Py_NewRef(args[1]));
    Py_XSETREF(state->ended_entries, Py_NewRef(args[2]));
    Py_XSETREF(state->incoming, Py_NewRef(args[3]));
    Py_XSETREF(state->outgoing, Py_NewRef(args[4]));
    Py_XSETREF(state->extract, Py_NewRef(args[5]));
    Py_XSETREF(state->current_span, Py_NewRef(args[6]));
    Py_XSETREF(state->inject, Py_NewRef(args[7]));
    Py_XSETREF(state->ended_elsewhere, Py_NewRef(args[8]));
    Py_XSETREF(state->open_span_twin, Py_NewRef(args[9]));
    Py_XSETREF(state->serving_twin, Py_NewRef(args[10]));
    Py_RETURN_NONE;
}

/* configure_server_spans(new_label, error_text), once, at aiohttp_server's import. */
PyObject *
configure_server_spans(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    ModuleState *state = PyModule_GetState(module);
    if (nargs != 2 || !all_callable(args, 0, 2)) {
        PyErr_SetString(PyExc_TypeError, "configure_server_spans(new_label, error_text): two functions");
        return NULL;
    }
    Py_XSETREF(state->new_label, Py_NewRef(args[0]));
    Py_XSETREF(state->error_text, Py_NewRef(args[1]));
    Py_RETURN_NONE;
}

/* configure_aiohttp_reads(properties, attributes), at aiohttp_server's install: for each AiohttpRead, aiohttp's
   property of that name (None: none known) and the chain of attributes its getter returns (("_rel_url", "path") for
   a request's path: self._rel_url.path). Each is checked again from its first read on (read_as_aiohttp). */
PyObject *
configure_aiohttp_reads(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    ModuleState *state = PyModule_GetState(module);
    int fits = nargs == 2 && PyTuple_CheckExact(args[0]) && PyTuple_GET_SIZE(args[0]) == AIOHTTP_READS &&
               PyTuple_CheckExact(args[1]) && PyTuple_GET_SIZE(args[1]) == AIOHTTP_READS;
    for (int i = 0; fits && i < AIOHTTP_READS; i++) {
        PyObject *chain = PyTuple_GET_ITEM(args[1], i);
        fits = PyTuple_CheckExact(chain) && PyTuple_GET_SIZE(chain) > 0;
        for (Py_ssize_t j = 0; fits && j < PyTuple_GET_SIZE(chain); j++) {
            fits = PyUnicode_CheckExact(PyTuple_GET_ITEM(chain, j));
        }
    }
    if (!fits) {
        PyErr_Format(PyExc_TypeError,
                     "configure_aiohttp_reads(properties, attributes): two tuples of %d, the second's items "
                     "tuples of attribute names",
                     (int)AIOHTTP_READS);
        return NULL;
    }
    for (int i = 0; i < AIOHTTP_READS; i++) {
        PyObject *property = PyTuple_GET_ITEM(args[0], i);
        if (property != state->aiohttp_property[i]) state->aiohttp_read_same[i] = 0; /* (another: checked anew) */
        Py_XSETREF(state->aiohttp_property[i], property == Py_None ? NULL : Py_NewRef(property));
        Py_XSETREF(state->aiohttp_attribute[i], Py_NewRef(PyTuple_GET_ITEM(args[1], i)));
    }
    Py_RETURN_NONE;
}

/* `owner.name` (a new reference, or NULL with an exception set), where `name` is aiohttp's property `which`: read as
   the attributes its getter returns, where `owner`'s type still has aiohttp's property (not a subclass's own) and
   they hold a value (None: the property says what it makes of that, raising as it does; one missing: read through
   the property from then on). aiohttp sets those attributes before the handler runs; a program that set them later,
   once a cached property had kept its value, would see here what it set and there what was kept. What a
   property costs a request is a Python frame, and, for aiohttp's cached ones, an entry made in the request's cache
   (each about 1,000 instructions). The first read of each is also read through the property: a value not the same
   (an aiohttp whose getter is not what it was) reads through the property from then on. */
static PyObject *
read_as_aiohttp(ModuleState *state, PyObject *owner, PyObject *name, AiohttpRead which)
{
    PyObject *chain = state->aiohttp_attribute[which], *value, *public;
    int same;
    if (state->aiohttp_property[which] == NULL || state->aiohttp_read_same[which] < 0 ||
        _PyType_Lookup(Py_TYPE(owner), name) != state->aiohttp_property[which]) {
        return PyObject_GetAttr(owner, name);
    }
    value = Py_NewRef(owner);
    for (Py_ssize_t i = 0; value != NULL && value != Py_None && i < PyTuple_GET_SIZE(chain); i++) {
        Py_SETREF(value, PyObject_GetAttr(value, PyTuple_GET_ITEM(chain, i)));
    }
    if (value == NULL || value == Py_None) {
        if (value == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_Exception)) return NULL;
            PyErr_Clear(); /* (an attribute this aiohttp does not have: read through the property from now on) */
            state->aiohttp_read_same[which] = -1;
        }
        Py_XDECREF(value);
        return PyObject_GetAttr(owner, name);
    }
    if (state->aiohttp_read_same[which] > 0) return value;
    if ((public = PyObject_GetAttr(owner, name)) == NULL) {
        Py_DECREF(value);
        return NULL;
    }
    same = public == value ? 1 : PyObject_RichCompareBool(public, value, Py_EQ);
    Py_DECREF(value);
    if (same < 0) {
        if (!PyErr_ExceptionMatches(PyExc_Exception)) {
            Py_DECREF(public);
            return NULL;
        }
        PyErr_Clear(); /* (not comparable: not the same) */
    }
    state->aiohttp_read_same[which] = same > 0 ? 1 : -1;
    return public;
}

/* The span the new one is a child of where no caller's names it: the current span (_current_span(None), inlined for
   the usual case, as the twin does); a new reference (None for none), or NULL with an exception set. */
static PyObject *
current_parent(ModuleState *state)
{
    PyObject *active, *parent;
    if (PyDict_GET_SIZE(state->ended_entries) != 0) return PyObject_CallOneArg(state->current_span, Py_None);
    if (PyContextVar_Get(state->active_var, Py_None, &active) < 0) return NULL;
    if (active == Py_None) return active;
    if (!Py_IS_TYPE(active, (PyTypeObject *)state->active_type) || PyTuple_GET_SIZE(active) != 3) {
        Py_DECREF(active); /* (not what trace_context sets: the Python side says what it makes of it) */
        return PyObject_CallOneArg(state->current_span, Py_None);
    }
    parent = Py_NewRef(PyTuple_GET_ITEM(active, 0));
    Py_DECREF(active);
    return parent;
}

/* open_span's: (scope, args, token, context), or NULL with an exception set; `owned` as begin_span_of takes it. */
static PyObject *
open_span_of(ModuleState *state, PyObject *make_scope, PyObject *label, PyObject *kind, PyObject *headers,
             PyObject *given, int owned)
{
    PyObject *otel, *parent = NULL, *begun, *scope = NULL, *answer, *result, *call[4];
    int listed;
    if (state->open_span_twin == NULL || state->span_context_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "open_span() before configure_spans() and configure_open_span()");
        return NULL;
    }
    otel = PyDict_GetItemWithError(state->modules, state->otel_name); /* (borrowed: only compared) */
    if (otel == NULL && PyErr_Occurred()) return NULL;
    if (otel != NULL && otel != Py_None) { /* OpenTelemetry's current span may be the parent: the twin asks it */
        PyObject *twin_args[5] = {make_scope, label, kind, headers, given};
        return PyObject_Vectorcall(state->open_span_twin, twin_args, 5, NULL);
    }
    if (headers != Py_None) {
        if ((listed = PySet_Contains(state->incoming, kind)) < 0) return NULL;
        if (listed && (parent = PyObject_CallOneArg(state->extract, headers)) == NULL) return NULL;
    }
    if (parent == NULL || parent == Py_None) {
        Py_XDECREF(parent);
        if ((parent = current_parent(state)) == NULL) return NULL;
    }
    begun = begin_span_of(state, parent, given, kind, Py_None, owned);
    Py_DECREF(parent);
    if (begun == NULL) return NULL;
    /* begun is (context, args, token), held to the end: its items are borrowed from it */
    if (headers != Py_None) {
        if ((listed = PySet_Contains(state->outgoing, kind)) < 0) goto fail;
        if (listed) {
            call[0] = headers;
            call[1] = PyTuple_GET_ITEM(begun, 0);
            if ((answer = PyObject_Vectorcall(state->inject, call, 2, NULL)) == NULL) goto fail;
            Py_DECREF(answer);
        }
    }
    call[0] = label;
    call[1] = PyTuple_GET_ITEM(begun, 1);
    if ((scope = PyObject_Vectorcall(make_scope, call, 2, NULL)) == NULL) goto fail;
    call[0] = scope;
    answer = Py_IS_TYPE(scope, state->scope_type) /* (the recorder's own: its __enter__ called, not looked up) */
                 ? scope_enter((Scope *)scope, NULL)
                 : PyObject_VectorcallMethod(state->str_enter, call, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    if (answer == NULL) goto fail;
    Py_DECREF(answer);
    result = PyTuple_Pack(4, scope, PyTuple_GET_ITEM(begun, 1), PyTuple_GET_ITEM(begun, 2), PyTuple_GET_ITEM(begun, 0));
    Py_DECREF(scope);
    Py_DECREF(begun);
    return result;
fail: { /* the span never began: the current span is again the one it would have begun in, as the twin leaves it */
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    if (PyContextVar_Reset(state->active_var, PyTuple_GET_ITEM(begun, 2)) < 0) PyErr_Clear();
    PyErr_Restore(type, value, traceback);
    Py_XDECREF(scope);
    Py_DECREF(begun);
    return NULL;
}
}

/* close_span's: 0, or -1 with an exception set. */
static int
close_span_of(ModuleState *state, PyObject *scope, PyObject *token, PyObject *context, PyObject *exc_type,
              PyObject *exc, PyObject *traceback)
{
    PyObject *answer, *call[4];
    if (state->ended_elsewhere == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "close_span() before configure_open_span()");
        return -1;
    }
    if (PyContextVar_Reset(state->active_var, token) < 0) {
        if (!PyErr_ExceptionMatches(PyExc_ValueError) && !PyErr_ExceptionMatches(PyExc_RuntimeError)) return -1;
        PyErr_Clear(); /* exited in another context (another task, a generator finalised elsewhere) */
        call[0] = context;
        call[1] = token;
        if ((answer = PyObject_Vectorcall(state->ended_elsewhere, call, 2, NULL)) == NULL) return -1;
        Py_DECREF(answer);
    }
    call[0] = scope;
    call[1] = exc_type;
    call[2] = exc;
    call[3] = traceback;
    answer = Py_IS_TYPE(scope, state->scope_type)
                 ? scope_exit((Scope *)scope, call + 1, 3)
                 : PyObject_VectorcallMethod(state->str_exit, call, 4 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    if (answer == NULL) return -1;
    Py_DECREF(answer);
    return 0;
}

/* open_span(make_scope, label, kind, headers, args): trace_context.open_span_in_python's twin. */
PyObject *
open_span(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5) {
        PyErr_Format(PyExc_TypeError, "open_span(make_scope, label, kind, headers, args) takes 5 arguments (%zd given)",
                     nargs);
        return NULL;
    }
    return open_span_of(PyModule_GetState(module), args[0], args[1], args[2], args[3], args[4], 0);
}

/* close_span(scope, token, context, exc_type, exc, tb): trace_context.close_span_in_python's twin. */
PyObject *
close_span(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6) {
        PyErr_Format(PyExc_TypeError,
                     "close_span(scope, token, context, exc_type, exc, tb) takes 6 arguments (%zd given)", nargs);
        return NULL;
    }
    if (close_span_of(PyModule_GetState(module), args[0], args[1], args[2], args[3], args[4], args[5]) < 0) return NULL;
    Py_RETURN_NONE;
}

/* A ServerSpans (aiohttp_server's: a tuple of scope_of, answers and the dict of labels named), checked; 0, or -1 with
   TypeError set. */
static int
check_spans(PyObject *spans)
{
    if (!PyTuple_Check(spans) || PyTuple_GET_SIZE(spans) != 3 || !PyDict_CheckExact(PyTuple_GET_ITEM(spans, 2))) {
        PyErr_SetString(PyExc_TypeError, "a server span's spans: (scope_of, answers, named), named a dict");
        return -1;
    }
    return 0;
}

/* The server span's args, {"method", "path", "route", "response": {}}, and its headers where they name a caller
   (else None), through *headers_out; the path through *path_out. A new dict, or NULL with an exception set. */
static PyObject *
request_args(ModuleState *state, PyObject *request, PyObject **path_out, PyObject **headers_out)
{
    PyObject *path, *headers, *method = NULL, *response = NULL, *args = NULL, *traceparent, *call[2];
    if ((path = read_as_aiohttp(state, request, state->str_path, READ_PATH)) == NULL) return NULL;
    if ((headers = PyObject_GetAttr(request, state->str_headers)) == NULL) goto fail;
    if ((method = PyObject_GetAttr(request, state->str_method)) == NULL) goto fail;
    if ((response = PyDict_New()) == NULL || (args = PyDict_New()) == NULL) goto fail;
    if (PyDict_SetItem(args, state->str_method, method) < 0 || PyDict_SetItem(args, state->str_path, path) < 0 ||
        PyDict_SetItem(args, state->str_route, path) < 0 || PyDict_SetItem(args, state->str_response, response) < 0) {
        goto fail;
    }
    call[0] = headers;
    call[1] = state->str_traceparent;
    traceparent = PyObject_VectorcallMethod(state->str_get, call, 2 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    if (traceparent == NULL) goto fail;
    if (traceparent == Py_None) Py_SETREF(headers, Py_NewRef(Py_None)); /* (no caller's span) */
    Py_DECREF(traceparent);
    Py_DECREF(method);
    Py_DECREF(response);
    *path_out = path;
    *headers_out = headers;
    return args;
fail:
    Py_DECREF(path);
    Py_XDECREF(headers);
    Py_XDECREF(method);
    Py_XDECREF(response);
    Py_XDECREF(args);
    return NULL;
}

/* begin_server_span(spans, request): aiohttp_server.begin_in_python's twin. */
PyObject *
begin_server_span(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    ModuleState *state = PyModule_GetState(module);
    PyObject *given = NULL, *path = NULL, *headers = NULL, *span = NULL;
    int open;
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "begin_server_span(spans, request) takes 2 arguments (%zd given)", nargs);
        return NULL;
    }
    if (state->new_label == NULL || state->active_var == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "begin_server_span() before configure_server_spans()");
        return NULL;
    }
    if (check_spans(args[0]) < 0) return NULL;
    if ((open = is_serving(state)) < 0) return NULL;
    if (open) Py_RETURN_NONE; /* an app inside another, or a middleware under a recorded app: one span a request */
    if ((given = request_args(state, args[1], &path, &headers)) != NULL) {
        span = open_span_of(state, PyTuple_GET_ITEM(args[0], 0), path, state->str_server, headers, given, 1);
        Py_DECREF(given);
        Py_DECREF(path);
        Py_DECREF(headers);
    }
    if (span != NULL && (!PyTuple_CheckExact(span) || PyTuple_GET_SIZE(span) != 4)) {
        PyErr_SetString(PyExc_TypeError, "open_span() gave what is not (scope, args, token, context)");
        Py_CLEAR(span);
    }
    if (span == NULL && PyErr_ExceptionMatches(PyExc_Exception)) { /* a request that cannot be read: unrecorded */
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    return span; /* (scope, args, token, context) */
}

/* The attribute `name` of `owner`, or None where it has none (getattr(owner, name, None)); NULL with an exception
   set. */
static PyObject *
attribute_or_none(PyObject *owner, PyObject *name)
{
    PyObject *value = PyObject_GetAttr(owner, name);
    if (value == NULL && PyErr_ExceptionMatches(PyExc_AttributeError)) {
        PyErr_Clear();
        return Py_NewRef(Py_None);
    }
    return value;
}

/* The (label, route) of the request, as aiohttp_server.label_of gives it: the one kept for its (method, route
   object), else new_label's. A new reference, or NULL with an exception set. */
static PyObject *
label_of(ModuleState *state, PyObject *spans, PyObject *request)
{
    PyObject *method, *match_info, *route = NULL, *key, *found, *call[4];
    if ((method = PyObject_GetAttr(request, state->str_method)) == NULL) return NULL;
    match_info = read_as_aiohttp(state, request, state->str_match_info, READ_MATCH_INFO);
    if (match_info != NULL) {
        route = read_as_aiohttp(state, match_info, state->str_route, READ_ROUTE);
        Py_DECREF(match_info);
    }
    if (route == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_Exception)) {
            Py_DECREF(method);
            return NULL;
        }
        PyErr_Clear(); /* (no route: resolving it raised) */
        route = Py_NewRef(Py_None);
    }
    if ((key = PyTuple_Pack(2, method, route)) == NULL) {
        found = NULL;
    }
    else {
        found = Py_XNewRef(PyDict_GetItemWithError(PyTuple_GET_ITEM(spans, 2), key));
        Py_DECREF(key);
        if (found == Py_None) Py_CLEAR(found); /* (not kept: as the twin reads it) */
        if (found == NULL && !PyErr_Occurred()) {
            call[0] = spans;
            call[1] = request;
            call[2] = method;
            call[3] = route;
            found = PyObject_Vectorcall(state->new_label, call, 4, NULL);
        }
    }
    Py_DECREF(method);
    Py_DECREF(route);
    return found;
}

/* The span's response map and route filled in (aiohttp_server.end_in_python's try block): 0, or -1 with an exception
   set. *closing is the exception the span ends with: exc, or NULL for none (an HTTPException below 500 is an
   answer). */
static int
fill_in(ModuleState *state, PyObject *spans, PyObject *scope, PyObject *given, PyObject *request, PyObject *result,
        PyObject *exc, PyObject **closing)
{
    PyObject *response, *status, *found;
    int failed;
    if ((response = PyObject_GetItem(given, state->str_response)) == NULL) return -1;
    if (exc == Py_None) {
        status = read_as_aiohttp(state, result, state->str_status, READ_STATUS); /* getattr(result, "status", None) */
        if (status == NULL && PyErr_ExceptionMatches(PyExc_AttributeError)) {
            PyErr_Clear();
            status = Py_NewRef(Py_None);
        }
        failed = status == NULL || PyObject_SetItem(response, state->str_status, status) < 0;
        Py_XDECREF(status);
    }
    else {
        int answer = PyObject_IsInstance(exc, PyTuple_GET_ITEM(spans, 1)), an_int;
        status = answer < 0 ? NULL : answer ? attribute_or_none(exc, state->str_status) : Py_NewRef(Py_None);
        failed = status == NULL;
        an_int = !failed && PyLong_CheckExact(status);
        if (an_int && PyObject_SetItem(response, state->str_status, status) < 0) failed = 1;
        if (!failed && an_int) {
            int below = PyObject_RichCompareBool(status, state->int_500, Py_LT);
            if (below < 0) failed = 1;
            else if (below) *closing = NULL; /* (a 404 or a redirect, raised: an answer, not an error) */
        }
        if (!failed && (!an_int || *closing != NULL)) {
            PyObject *text = PyObject_CallOneArg(state->error_text, exc);
            failed = text == NULL || PyObject_SetItem(response, state->str_error, text) < 0;
            Py_XDECREF(text);
        }
        Py_XDECREF(status);
    }
    Py_DECREF(response);
    if (failed) return -1;
    if ((found = label_of(state, spans, request)) == NULL) return -1;
    if (!PyTuple_CheckExact(found)) Py_SETREF(found, PySequence_Tuple(found)); /* (unpacked as the twin does) */
    if (found == NULL) return -1;
    if (PyTuple_GET_SIZE(found) != 2) {
        PyErr_Format(PyExc_ValueError, "a server span's label: (label, route), not %zd values",
                     PyTuple_GET_SIZE(found));
        failed = 1;
    }
    else {
        if (Py_IS_TYPE(scope, state->scope_type)) { /* (as its label's setter sets it) */
            Py_XSETREF(((Scope *)scope)->label, Py_NewRef(PyTuple_GET_ITEM(found, 0)));
        }
        else if (PyObject_SetAttr(scope, state->str_scope_label, PyTuple_GET_ITEM(found, 0)) < 0) {
            failed = 1;
        }
        failed = failed || PyObject_SetItem(given, state->str_route, PyTuple_GET_ITEM(found, 1)) < 0;
    }
    Py_DECREF(found);
    return failed ? -1 : 0;
}

/* A server span's args, as it ends, left to the garbage collector's generations no more where they can take part in
   no cycle: each key and value of a type that holds no reference (str, int, None, ...), or the response dict, which
   holds none (a dict's tracking rule leaves it untracked) and which only the args hold. A dict holding a dict is
   tracked (CPython tracks a dict once a value of a container type is set in it: the inner one may change without
   the outer knowing), so without this each request's args waited in its buffer until the next drain as a tracked
   container: a busy server's young collections walked them (about twice as long, measured), and promoted them into
   full collections (bench_collections.py). The args are made here for the span (request_args, the ids added in
   begin_span_of) and held by the span alone, so no cycle can pass through them later: an inner dict anyone else holds (a
   refcount above 1) is not taken as one that holds nothing, and an insertion into the args tracks them again. A span
   that ends with an exception records a copy (with its type), left tracked; so does the Python twin its args. */
static void
untrack_flat_args(PyObject *given)
{
    PyObject *key, *value;
    Py_ssize_t position = 0;
    if (!PyDict_CheckExact(given) || !PyObject_GC_IsTracked(given)) return;
    while (PyDict_Next(given, &position, &key, &value)) { /* (a type that may hold references: PyType_IS_GC) */
        if (PyType_IS_GC(Py_TYPE(key))) return;
        if (PyType_IS_GC(Py_TYPE(value)) &&
            !(PyDict_CheckExact(value) && !PyObject_GC_IsTracked(value) && Py_REFCNT(value) == 1)) {
            return;
        }
    }
    PyObject_GC_UnTrack(given);
}

/* end_server_span(spans, span, request, result, exc): aiohttp_server.end_in_python's twin. */
PyObject *
end_server_span(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    ModuleState *state = PyModule_GetState(module);
    PyObject *span, *scope, *given, *exc, *closing, *exc_type = Py_None, *traceback = NULL;
    int closed;
    if (nargs != 5) {
        PyErr_Format(PyExc_TypeError,
                     "end_server_span(spans, span, request, result, exc) takes 5 arguments (%zd given)", nargs);
        return NULL;
    }
    if (state->new_label == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "end_server_span() before configure_server_spans()");
        return NULL;
    }
    span = args[1];
    exc = args[4];
    if (check_spans(args[0]) < 0) return NULL;
    if (!PyTuple_CheckExact(span) || PyTuple_GET_SIZE(span) != 4) {
        PyErr_SetString(PyExc_TypeError, "end_server_span(spans, span, request, result, exc): begin_server_span()'s "
                                         "span");
        return NULL;
    }
    Py_INCREF(span); /* (its items borrowed from it: the caller's reference may go with what runs here) */
    scope = PyTuple_GET_ITEM(span, 0);
    given = PyTuple_GET_ITEM(span, 1);
    if (exc != Py_None && !PyExceptionInstance_Check(exc)) {
        PyErr_SetString(PyExc_TypeError,
                        "end_server_span(spans, span, request, result, exc): exc an exception or None");
        goto fail;
    }
    closing = exc;
    if (fill_in(state, args[0], scope, given, args[2], args[3], exc, &closing) < 0) {
        if (!PyErr_ExceptionMatches(PyExc_Exception)) goto fail;
        PyErr_Clear(); /* (a request's odd state: the span ends with what was filled in so far) */
    }
    untrack_flat_args(given); /* (its args are final: the scope records them as it exits) */
    if (closing == NULL || closing == Py_None) {
        closing = Py_None;
    }
    else {
        exc_type = (PyObject *)Py_TYPE(closing);
        traceback = PyObject_GetAttr(closing, state->str_traceback); /* (as the twin reads it) */
        if (traceback == NULL) goto fail;
    }
    closed = close_span_of(state, scope, PyTuple_GET_ITEM(span, 2), PyTuple_GET_ITEM(span, 3), exc_type, closing,
                           traceback != NULL ? traceback : Py_None);
    Py_XDECREF(traceback);
    Py_DECREF(span);
    if (closed < 0) return NULL;
    Py_RETURN_NONE;
fail:
    Py_DECREF(span);
    return NULL;
}
