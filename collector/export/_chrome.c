/* Chrome trace event JSON straight from a stored EVENTS frame's msgpack payload, in C, with the GIL released.

Optional: when this module is not built (no compiler at install time) or is turned off with RINGTRACE_PURE_PYTHON=1,
the collector writes every event through its pure-Python event walk (read/event_walk.py, export/chrome.py). That walk defines the
behaviour; this module takes only the common events, and the tests hold both to the same JSON, event for event.

events_json() reads a payload of the five columns (kind, name, ts, dur, args) and writes each event whose kind is a
span, an instant or a counter, and whose args are a map of string keys (or nil), as one JSON object, in the key order
export/chrome.py writes (a span with a flow arrow binds it: bind_id and flow_out or flow_in, as export/flows.py
derives them). Every other event (a message, a marker, source activity, an async slice, a typed event's values,
args holding bytes, an extension type or a non-string key, a span with links) is left to the Python walk: it is flagged in the returned
`deferred` map, one byte per event. A payload msgpack-python would refuse (not the five arrays of `count` values, a
string that is not UTF-8, a map key it cannot hash, an extension code below -1, trailing bytes), or one nested deeper
than MAX_DEPTH, returns None: the Python walk reads the frame and decides, as it would alone.

Why the GIL can be released: the payload, the kind codes, the escaped names and their spans are buffers held (and
locked against resizing) for the call; nothing else is touched until the output bytes are made. Numbers are written
in C: integers exactly; `ts` and `dur`, which are ns / 1000, as exact decimals (a reader parses them to the same
double as the Python walk's division); floats with the fewest of 15, 16 or 17 significant digits that read back to
the same double (orjson's shortest form may have fewer digits, never another value); non-finite floats as null, as
orjson writes them. */

#include "_json_write.h"

/* ns as microseconds, exactly: 1234567 -> 1234.567, 1000 -> 1.0 */
static void
put_micros(Out *out, i128 ns)
{
    if (ns < 0) {
        PUT_LITERAL(out, "-");
        ns = -ns;
    }
    put_u128(out, (unsigned __int128)(ns / 1000));
    int frac = (int)(ns % 1000);
    char text[4] = {'.', (char)('0' + frac / 100), (char)('0' + frac / 10 % 10), (char)('0' + frac % 10)};
    int n = 4;
    while (n > 2 && text[n - 1] == '0') {
        n--;
    }
    put(out, text, (size_t)n);
}

/* A span's flow arrow as Chrome JSON binds one to a slice (chrome.py's _bind_flow): its id as 16 hex digits, leaving
   it or else arriving. */
static void
put_bind(Out *out, uint64_t id, int leaving)
{
    static const char hex[] = "0123456789abcdef";
    char digits[16];
    for (int i = 15; i >= 0; i--, id >>= 4) {
        digits[i] = hex[id & 15];
    }
    PUT_LITERAL(out, ",\"bind_id\":\"");
    put(out, digits, 16);
    if (leaving) {
        PUT_LITERAL(out, "\",\"flow_out\":true");
    }
    else {
        PUT_LITERAL(out, "\",\"flow_in\":true");
    }
}

/* ---- one frame ---- */

typedef struct {
    /* inputs */
    const uint8_t *payload;
    size_t payload_len;
    Py_ssize_t count;
    int column_of[COLUMNS]; /* where each of kind, name, ts, dur, args is in the payload */
    i128 first_ts_ns, offset_ns, origin_ns;
    Window window;
    const uint8_t *kinds;
    Py_ssize_t kinds_len;
    const char *names;
    Py_ssize_t names_len;
    const uint8_t *spans; /* per string id: int64 start, end in names (-1: no such string), any alignment */
    Py_ssize_t spans_len;
    const char *ids;      /* ,"pid":P,"tid":T */
    Py_ssize_t ids_len;
    const char *counter_ids; /* the same, and a counter's "id" (its track, with its name) */
    Py_ssize_t counter_ids_len;
    /* outputs */
    Out out;
    uint8_t *deferred;
    Py_ssize_t deferred_count, shown, skipped, before_origin;
} Frame;

/* BAD: the payload is not what the Python walk would read as this frame's five columns. */
static int
transcode(Frame *f)
{
    Cursor column[COLUMNS];
    if (read_columns(f->payload, f->payload_len, f->count, f->column_of, column) != OK) {
        return BAD;
    }
    int first = 1;
    for (Py_ssize_t i = 0; i < f->count; i++) {
        Event e;
        if (next_event(column, f->kinds, f->kinds_len, &e) != OK) {
            return BAD;
        }
        i128 name = e.name, ts = e.ts, dur = e.dur;
        Cursor args = e.args;
        int code = e.code;
        if (code == CODE_SKIP) {
            f->skipped++;
            continue;
        }
        if (code == CODE_PYTHON) {
            f->deferred[i] = 1;
            f->deferred_count++;
            continue;
        }
        i128 wall = f->first_ts_ns + ts + f->offset_ns;
        if (!(0 <= wall && dur >= 0 && wall + dur <= MAX_WALL_NS)) {
            f->skipped++; /* times no clock gives */
            continue;
        }
        if (!in_window(&f->window, &e, wall)) {
            continue;
        }
        int64_t start = -1, end = -1;
        if (name >= 0 && name < f->spans_len / 2) {
            memcpy(&start, f->spans + 2 * sizeof(int64_t) * (size_t)name, sizeof(int64_t));
            memcpy(&end, f->spans + (2 * (size_t)name + 1) * sizeof(int64_t), sizeof(int64_t));
        }
        int has_args = args.p < args.end && *args.p != 0xc0;
        int is_map = has_args && ((*args.p & 0xf0) == 0x80 || *args.p == 0xde || *args.p == 0xdf);
        if (start < 0 || end < start || end > f->names_len || (has_args && !is_map)) {
            f->deferred[i] = 1; /* an unknown string id (named as such), or args that are not a map */
            f->deferred_count++;
            continue;
        }
        Flows flows = {0, 0, 0, 0};
        if (code == 'X' && has_args && span_flows(args, &flows) != OK) {
            f->deferred[i] = 1; /* links: the Python walk binds them */
            f->deferred_count++;
            continue;
        }
        size_t mark = f->out.len;
        if (!first) {
            PUT_LITERAL(&f->out, ",");
        }
        PUT_LITERAL(&f->out, "{\"name\":");
        put(&f->out, f->names + start, (size_t)(end - start));
        char phase[] = ",\"ph\":\"?\",\"ts\":";
        phase[7] = (char)code;
        put(&f->out, phase, sizeof(phase) - 1);
        put_micros(&f->out, wall - f->origin_ns);
        if (code == 'C') {
            put(&f->out, f->counter_ids, (size_t)f->counter_ids_len);
        }
        else {
            put(&f->out, f->ids, (size_t)f->ids_len);
        }
        if (code == 'X') {
            PUT_LITERAL(&f->out, ",\"dur\":");
            put_micros(&f->out, dur);
        }
        else if (code == 'i') {
            PUT_LITERAL(&f->out, ",\"s\":\"t\"");
        }
        if (has_args) {
            PUT_LITERAL(&f->out, ",\"args\":");
            int status = put_value(&args, &f->out, 0);
            if (status == BAD) {
                return BAD;
            }
            if (status == DEFER) {
                f->out.len = mark;
                f->deferred[i] = 1;
                f->deferred_count++;
                continue;
            }
        }
        if (flows.leaving || flows.arriving) {
            put_bind(&f->out, flows.leaving ? flows.out : flows.in, flows.leaving);
        }
        PUT_LITERAL(&f->out, "}");
        first = 0;
        f->shown++;
        if (wall < f->origin_ns) {
            f->before_origin++;
        }
    }
    return OK;
}

/* transcode() in the "C" locale (with_c_locale) */
static int
transcode_frame(void *f)
{
    return transcode((Frame *)f);
}

PyDoc_STRVAR(events_json_doc,
"events_json(payload, count, columns, first_ts_ns, offset_ns, origin_ns, since_ns, until_ns, kinds, names, spans, ids,\n"
"            counter_ids)\n"
"--\n\n"
"The Chrome JSON of a stored EVENTS frame's common events: (json, deferred, shown, skipped, before_origin), or None\n"
"when the Python walk must read the frame. json: the events' objects joined by commas; deferred: one byte per event,\n"
"1 for each left to the Python walk (None if none is); skipped: events counted as undecodable.\n"
"columns: where kind, name, ts, dur and args are among the payload's 5 columns; kinds: a code per kind id (0 not\n"
"shown, 1 the Python walk's, or the phase letter X, i, C); names: JSON strings end to end; spans: int64 start and end\n"
"in names per string id (-1 for none); ids: the ,\"pid\":P,\"tid\":T part; counter_ids: a counter's, with its \"id\".");

static PyObject *
events_json(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 13) {
        PyErr_Format(PyExc_TypeError, "events_json() takes 13 arguments (%zd given)", nargs);
        return NULL;
    }
    Frame f;
    memset(&f, 0, sizeof(f));
    if (frame_shape(args[1], args[2], &f.count, f.column_of) < 0) {
        return NULL;
    }
    if (as_i128(args[3], "first_ts_ns", &f.first_ts_ns, NULL) < 0 ||
        as_i128(args[4], "offset_ns", &f.offset_ns, NULL) < 0 ||
        as_i128(args[5], "origin_ns", &f.origin_ns, NULL) < 0 ||
        as_i128(args[6], "since_ns", &f.window.since_ns, &f.window.has_since) < 0 ||
        as_i128(args[7], "until_ns", &f.window.until_ns, &f.window.has_until) < 0) {
        return NULL;
    }
    Py_buffer views[6];
    PyObject *sources[6] = {args[0], args[8], args[9], args[10], args[11], args[12]};
    int held = 0;
    PyObject *result = NULL;
    for (; held < 6; held++) {
        if (PyObject_GetBuffer(sources[held], &views[held], PyBUF_SIMPLE) < 0) {
            goto done;
        }
    }
    f.payload = views[0].buf;
    f.payload_len = (size_t)views[0].len;
    f.kinds = views[1].buf;
    f.kinds_len = views[1].len;
    f.names = views[2].buf;
    f.names_len = views[2].len;
    f.spans = views[3].buf;
    f.spans_len = views[3].len / (Py_ssize_t)sizeof(int64_t);
    f.ids = views[4].buf;
    f.ids_len = views[4].len;
    f.counter_ids = views[5].buf;
    f.counter_ids_len = views[5].len;

    f.deferred = calloc((size_t)f.count + 1, 1);
    if (f.deferred == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    int status;
    Py_BEGIN_ALLOW_THREADS
    status = with_c_locale(transcode_frame, &f);
    Py_END_ALLOW_THREADS
    if (f.out.failed) {
        PyErr_NoMemory();
        goto done;
    }
    if (status != OK) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    PyObject *json = PyBytes_FromStringAndSize(f.out.data ? f.out.data : "", (Py_ssize_t)f.out.len);
    PyObject *deferred = f.deferred_count ? PyBytes_FromStringAndSize((const char *)f.deferred, f.count)
                                          : Py_NewRef(Py_None);
    if (json != NULL && deferred != NULL) {
        result = Py_BuildValue("(NNnnn)", json, deferred, f.shown, f.skipped, f.before_origin);
    }
    else {
        Py_XDECREF(json);
        Py_XDECREF(deferred);
    }
done:
    while (held-- > 0) {
        PyBuffer_Release(&views[held]);
    }
    free(f.out.data);
    free(f.deferred);
    return result;
}

static PyMethodDef module_methods[] = {
    {"events_json", (PyCFunction)(void (*)(void))events_json, METH_FASTCALL, events_json_doc},
    {NULL, NULL, 0, NULL},
};

/* No state at all, so each interpreter can import it, with a GIL of its own or none: events_json() touches only its
   arguments, and already runs with the GIL released. */
static PyModuleDef_Slot module_slots[] = {
#if PY_VERSION_HEX >= 0x030C0000
    {Py_mod_multiple_interpreters, Py_MOD_PER_INTERPRETER_GIL_SUPPORTED},
#endif
#if PY_VERSION_HEX >= 0x030D0000
    {Py_mod_gil, Py_MOD_GIL_NOT_USED},
#endif
    {0, NULL},
};

static struct PyModuleDef chrome_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "ringtrace.collector.export._chrome",
    .m_doc = "Chrome trace event JSON of stored EVENTS frames' common events, in C (see chrome_frames.py).",
    .m_size = 0,
    .m_methods = module_methods,
    .m_slots = module_slots,
};

PyMODINIT_FUNC
PyInit__chrome(void)
{
    return PyModuleDef_Init(&chrome_module);
}
