/* The spans table's columns (export/table_rows.py) straight from stored EVENTS frames' msgpack payloads, in C, with
the GIL released: Arrow buffers, a row group's worth, that export/table_columns.py hands to pyarrow without a copy.

Optional: when this module is not built or RINGTRACE_PURE_PYTHON=1 is set, table_rows.py makes every row in Python
(the column reader and the event walk). Those define the rows; the tests hold both to the same tables.

A builder (a capsule from spans_builder()) gathers rows frame by frame (add_spans()) until take_spans() hands them
over and starts again. add_spans() takes each event whose kind is a span and whose args are a map of string keys (or
nil); its row: process, pid, host and track (the frame's, as given), name, start_ns, duration_ns, end_ns, args as
JSON text (written as _chrome.c writes it), and trace_id, span_id and parent_span_id where args hold them as text
(a key given twice counts with its last value, as msgpack-python keeps it): those of the columns the caller reads
(`wanted`), the others left empty. Instants and counters are no span: left out. Every other event (a traced call, a
marker, an unknown kind or name, args that are no map or hold bytes, an extension type or a non-string key, times no
clock gives) is left to the Python walk: flagged in the returned `deferred` map, one byte per event. A payload msgpack-python would refuse returns None, and the frame adds no row:
the Python walk reads it and decides, as it would alone.

Columns: fixed-width ones as little-endian int64 values; strings as Arrow's int32 offsets and UTF-8 data, with a
validity bitmap where a value may be null. A row group whose string data would pass 2 GiB takes no more rows from
that frame (None: the Python walk's). The payload comes from the network: every read is checked (_msgpack_read.h).

Why the GIL can be released: the payload, the kind codes, the names and their spans are buffers held (and locked
against resizing) for the call, and a builder is used by one thread at a time (a snapshot's); nothing else is
touched. */

#include "_json_write.h"

#define BUILDER_NAME "ringtrace.collector.export._tables.SpansBuilder"

/* A column of strings: offsets (int32, one more than rows), data, and validity bits (where nulls are). */
typedef struct {
    Out offsets, data, valid;
    Py_ssize_t nulls;
} Strings;

enum { PROCESS, HOST, TRACK, NAME_TEXT, ARGS_TEXT, TRACE_ID, SPAN_ID, PARENT_SPAN_ID, STRINGS };
enum { PID, START, DURATION, END, INTS };

typedef struct {
    Py_ssize_t rows;
    Out ints[INTS];
    Strings strings[STRINGS];
    int too_large; /* string data past int32 offsets */
} Builder;

/* Where a builder was before a frame: what a frame the Python walk must read is rolled back to. */
typedef struct {
    Py_ssize_t rows;
    size_t ints[INTS], offsets[STRINGS], data[STRINGS], nulls[STRINGS];
} Mark;

static void
builder_free(Builder *b)
{
    for (int i = 0; i < INTS; i++) {
        free(b->ints[i].data);
    }
    for (int i = 0; i < STRINGS; i++) {
        free(b->strings[i].offsets.data);
        free(b->strings[i].data.data);
        free(b->strings[i].valid.data);
    }
    memset(b, 0, sizeof(*b));
}

static void
put_i32(Out *out, int32_t v)
{
    put(out, (const char *)&v, sizeof(v)); /* little-endian hosts only: see module exec */
}

static void
put_i64(Out *out, int64_t v)
{
    put(out, (const char *)&v, sizeof(v));
}

/* An empty builder: each string column's first offset, 0. */
static void
builder_start(Builder *b)
{
    for (int i = 0; i < STRINGS; i++) {
        put_i32(&b->strings[i].offsets, 0);
    }
}

static int
builder_failed(const Builder *b)
{
    int failed = 0;
    for (int i = 0; i < INTS; i++) {
        failed |= b->ints[i].failed;
    }
    for (int i = 0; i < STRINGS; i++) {
        failed |= b->strings[i].offsets.failed | b->strings[i].data.failed | b->strings[i].valid.failed;
    }
    return failed;
}

static void
mark_of(const Builder *b, Mark *m)
{
    m->rows = b->rows;
    for (int i = 0; i < INTS; i++) {
        m->ints[i] = b->ints[i].len;
    }
    for (int i = 0; i < STRINGS; i++) {
        m->offsets[i] = b->strings[i].offsets.len;
        m->data[i] = b->strings[i].data.len;
        m->nulls[i] = (size_t)b->strings[i].nulls;
    }
}

static void
back_to(Builder *b, const Mark *m)
{
    b->rows = m->rows;
    for (int i = 0; i < INTS; i++) {
        b->ints[i].len = m->ints[i];
    }
    for (int i = 0; i < STRINGS; i++) {
        Strings *s = &b->strings[i];
        s->offsets.len = m->offsets[i];
        s->data.len = m->data[i];
        s->nulls = (Py_ssize_t)m->nulls[i];
        size_t bytes = ((size_t)m->rows + 7) / 8;
        if (s->valid.len > bytes) {
            s->valid.len = bytes;
        }
    }
}

/* Row `row`'s validity bit (the bytes grow as rows come; a bit is set or cleared for every row). */
static void
set_valid(Out *valid, Py_ssize_t row, int is_valid)
{
    size_t byte = (size_t)row / 8;
    if (valid->len <= byte) {
        if (reserve(valid, byte + 1 - valid->len) != 0) {
            return;
        }
        memset(valid->data + valid->len, 0, byte + 1 - valid->len);
        valid->len = byte + 1;
    }
    uint8_t bit = (uint8_t)(1u << (row % 8));
    if (is_valid) {
        valid->data[byte] = (char)((uint8_t)valid->data[byte] | bit);
    }
    else {
        valid->data[byte] = (char)((uint8_t)valid->data[byte] & (uint8_t)~bit);
    }
}

/* The end of a value whose data is written: its offset (and validity). */
static void
end_value(Builder *b, Strings *s, int is_valid)
{
    if (s->data.len > INT32_MAX) {
        b->too_large = 1;
        return;
    }
    put_i32(&s->offsets, (int32_t)s->data.len);
    set_valid(&s->valid, b->rows, is_valid);
    if (!is_valid) {
        s->nulls++;
    }
}

#define WANTS(f, bit) (((f)->wanted >> (bit)) & 1u)

static void
put_text(Builder *b, int column, const char *s, size_t n)
{
    put(&b->strings[column].data, s, n);
    end_value(b, &b->strings[column], 1);
}

static void
put_null(Builder *b, int column)
{
    end_value(b, &b->strings[column], 0);
}

/* The text values of trace_id, span_id and parent_span_id in a map of string keys (already written as JSON, so
   well formed): the last of each key; NULL where absent or not text. */
static void
text_ids(Cursor args, const uint8_t *id[3], int64_t id_len[3])
{
    static const char *const keys[3] = {"trace_id", "span_id", "parent_span_id"};
    id[0] = id[1] = id[2] = NULL;
    uint32_t items;
    if (read_container(&args, 1, &items) != OK) {
        return;
    }
    for (uint32_t i = 0; i < items; i++) {
        int64_t n = str_length(&args);
        if (n < 0) {
            return;
        }
        const uint8_t *key = args.p;
        args.p += n;
        int which = -1;
        for (int k = 0; k < 3; k++) {
            if (key_is(key, n, keys[k])) {
                which = k;
            }
        }
        Cursor at = args;
        int64_t m = which >= 0 ? str_length(&at) : -1;
        if (which >= 0) {
            id[which] = m >= 0 ? at.p : NULL;
            id_len[which] = m;
        }
        if (skip(&args, 1) != OK) {
            return;
        }
    }
}

typedef struct {
    Builder *b;
    /* inputs */
    const uint8_t *payload;
    size_t payload_len;
    Py_ssize_t count;
    int column_of[COLUMNS];
    i128 first_ts_ns, offset_ns;
    Window window;
    const uint8_t *kinds;
    Py_ssize_t kinds_len;
    const char *names; /* each string's UTF-8, end to end */
    Py_ssize_t names_len;
    const uint8_t *spans; /* per string id: int64 start, end in names (-1: no such string), any alignment */
    Py_ssize_t spans_len;
    const char *where[3]; /* process, host, track */
    size_t where_len[3];
    int64_t pid;
    unsigned long wanted; /* the columns written: bit i for ints[i], bit INTS + k for strings[k] */
    int texts;            /* whether args are read (for themselves or the ids) */
    /* outputs */
    uint8_t *deferred;
    Py_ssize_t deferred_count;
} Frame;

static void
defer(Frame *f, Py_ssize_t i)
{
    f->deferred[i] = 1;
    f->deferred_count++;
}

/* BAD: the payload is not what the Python walk would read as this frame's five columns (or the row group is full). */
static int
add_rows(Frame *f)
{
    Builder *b = f->b;
    Cursor column[COLUMNS];
    if (read_columns(f->payload, f->payload_len, f->count, f->column_of, column) != OK) {
        return BAD;
    }
    for (Py_ssize_t i = 0; i < f->count; i++) {
        Event e;
        if (next_event(column, f->kinds, f->kinds_len, &e) != OK) {
            return BAD;
        }
        if (e.code == 'i' || e.code == 'C') {
            continue; /* no span */
        }
        if (e.code != 'X') {
            defer(f, i); /* the walk's to show, or to count as undecodable */
            continue;
        }
        i128 wall = f->first_ts_ns + e.ts + f->offset_ns;
        if (!(0 <= wall && e.dur >= 0 && wall + e.dur <= MAX_WALL_NS)) {
            defer(f, i); /* times no clock gives: the walk counts them */
            continue;
        }
        if (!in_window(&f->window, &e, wall)) {
            continue;
        }
        int64_t start = -1, end = -1;
        if (e.name >= 0 && e.name < f->spans_len / 2) {
            memcpy(&start, f->spans + 2 * sizeof(int64_t) * (size_t)e.name, sizeof(int64_t));
            memcpy(&end, f->spans + (2 * (size_t)e.name + 1) * sizeof(int64_t), sizeof(int64_t));
        }
        Cursor args = e.args;
        int has_args = args.p < args.end && *args.p != 0xc0;
        int write_args = has_args && f->texts;
        int is_map = has_args && ((*args.p & 0xf0) == 0x80 || *args.p == 0xde || *args.p == 0xdf);
        if (start < 0 || end < start || end > f->names_len || (has_args && !is_map)) {
            defer(f, i); /* an unknown string id (named as such), or args that are not a map */
            continue;
        }
        Strings *text = &b->strings[ARGS_TEXT];
        size_t mark = text->data.len;
        if (write_args) {
            int status = put_value(&args, &text->data, 0);
            if (status == BAD) {
                return BAD;
            }
            if (status == DEFER) {
                text->data.len = mark;
                defer(f, i);
                continue;
            }
        }
        if (WANTS(f, INTS + ARGS_TEXT)) {
            end_value(b, text, write_args);
        }
        else {
            text->data.len = mark; /* written only to find the events the walk must show */
        }
        const uint8_t *id[3];
        int64_t id_len[3];
        if (write_args) {
            text_ids(e.args, id, id_len);
        }
        for (int k = 0; k < 3; k++) {
            if (!WANTS(f, INTS + TRACE_ID + k)) {
                continue;
            }
            if (write_args && id[k] != NULL) {
                put_text(b, TRACE_ID + k, (const char *)id[k], (size_t)id_len[k]);
            }
            else {
                put_null(b, TRACE_ID + k);
            }
        }
        for (int k = 0; k < 3; k++) {
            if (WANTS(f, INTS + PROCESS + k)) {
                put_text(b, PROCESS + k, f->where[k], f->where_len[k]);
            }
        }
        if (WANTS(f, INTS + NAME_TEXT)) {
            put_text(b, NAME_TEXT, f->names + start, (size_t)(end - start));
        }
        int64_t ints[INTS] = {f->pid, (int64_t)wall, (int64_t)e.dur, (int64_t)(wall + e.dur)};
        for (int k = 0; k < INTS; k++) {
            if (WANTS(f, k)) {
                put_i64(&b->ints[k], ints[k]);
            }
        }
        if (b->too_large) {
            return BAD;
        }
        b->rows++;
    }
    return OK;
}

static int
add_rows_of(void *f)
{
    return add_rows((Frame *)f);
}

static Builder *
builder_of(PyObject *capsule)
{
    return PyCapsule_GetPointer(capsule, BUILDER_NAME);
}

static void
builder_destroy(PyObject *capsule)
{
    Builder *b = PyCapsule_GetPointer(capsule, BUILDER_NAME);
    if (b != NULL) {
        builder_free(b);
        free(b);
    }
}

PyDoc_STRVAR(spans_builder_doc,
"spans_builder()\n"
"--\n\n"
"A new, empty builder of the spans table's columns (for add_spans and take_spans; one thread at a time).");

static PyObject *
spans_builder(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    Builder *b = calloc(1, sizeof(Builder));
    if (b == NULL) {
        return PyErr_NoMemory();
    }
    builder_start(b);
    if (builder_failed(b)) {
        builder_free(b);
        free(b);
        return PyErr_NoMemory();
    }
    PyObject *capsule = PyCapsule_New(b, BUILDER_NAME, builder_destroy);
    if (capsule == NULL) {
        builder_free(b);
        free(b);
    }
    return capsule;
}

PyDoc_STRVAR(add_spans_doc,
"add_spans(builder, payload, count, columns, first_ts_ns, offset_ns, since_ns, until_ns, kinds, names, spans,\n"
"          process, pid, host, track, wanted)\n"
"--\n\n"
"Add a stored EVENTS frame's spans to builder's rows: (rows, size, deferred), or None (no row added) when the Python\n"
"walk must read the frame. rows: the builder's rows now; size: the bytes it holds; deferred: one byte per event, 1\n"
"for each left to the Python walk (None if none is). columns: where kind, name, ts, dur and args are among the\n"
"payload's 5 columns; kinds: a code per kind id (as _chrome.events_json's); names: UTF-8 strings end to end; spans:\n"
"int64 start and end in names per string id (-1 for none); process, host, track: the rows' UTF-8 text; wanted:\n"
"the columns to write, bit i for take_spans' ints[i], bit 4 + k for its strings[k] (the others are left empty).");

static PyObject *
add_spans(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 16) {
        PyErr_Format(PyExc_TypeError, "add_spans() takes 16 arguments (%zd given)", nargs);
        return NULL;
    }
    Frame f;
    memset(&f, 0, sizeof(f));
    f.b = builder_of(args[0]);
    if (f.b == NULL) {
        return NULL;
    }
    if (frame_shape(args[2], args[3], &f.count, f.column_of) < 0) {
        return NULL;
    }
    i128 pid;
    if (as_i128(args[4], "first_ts_ns", &f.first_ts_ns, NULL) < 0 ||
        as_i128(args[5], "offset_ns", &f.offset_ns, NULL) < 0 ||
        as_i128(args[6], "since_ns", &f.window.since_ns, &f.window.has_since) < 0 ||
        as_i128(args[7], "until_ns", &f.window.until_ns, &f.window.has_until) < 0 ||
        as_i128(args[12], "pid", &pid, NULL) < 0) {
        return NULL;
    }
    f.pid = (int64_t)pid;
    f.wanted = PyLong_AsUnsignedLongMask(args[15]);
    if (f.wanted == (unsigned long)-1 && PyErr_Occurred()) {
        return NULL;
    }
    f.texts = (f.wanted >> (INTS + ARGS_TEXT) & 15u) != 0; /* args, or an id found in them */
    Py_buffer views[7];
    PyObject *sources[7] = {args[1], args[8], args[9], args[10], args[11], args[13], args[14]};
    int held = 0;
    PyObject *result = NULL;
    for (; held < 7; held++) {
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
    for (int k = 0; k < 3; k++) {
        f.where[k] = views[4 + k].buf;
        f.where_len[k] = (size_t)views[4 + k].len;
    }
    f.deferred = calloc((size_t)f.count + 1, 1);
    if (f.deferred == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Mark mark;
    mark_of(f.b, &mark);
    int status;
    Py_BEGIN_ALLOW_THREADS
    status = with_c_locale(add_rows_of, &f);
    Py_END_ALLOW_THREADS
    if (builder_failed(f.b)) {
        builder_free(f.b); /* out of memory: the rows gathered are gone, the builder empty again */
        builder_start(f.b);
        PyErr_NoMemory();
        goto done;
    }
    if (status != OK) {
        f.b->too_large = 0;
        back_to(f.b, &mark);
        result = Py_NewRef(Py_None);
        goto done;
    }
    size_t size = 0;
    for (int i = 0; i < INTS; i++) {
        size += f.b->ints[i].len;
    }
    for (int i = 0; i < STRINGS; i++) {
        size += f.b->strings[i].offsets.len + f.b->strings[i].data.len;
    }
    PyObject *deferred = f.deferred_count ? PyBytes_FromStringAndSize((const char *)f.deferred, f.count)
                                          : Py_NewRef(Py_None);
    if (deferred != NULL) {
        result = Py_BuildValue("(nnN)", f.b->rows, (Py_ssize_t)size, deferred);
    }
done:
    while (held-- > 0) {
        PyBuffer_Release(&views[held]);
    }
    free(f.deferred);
    return result;
}

static PyObject *
bytes_of(const Out *out, size_t len)
{
    return PyBytes_FromStringAndSize(out->data ? out->data : "", (Py_ssize_t)len);
}

PyDoc_STRVAR(take_spans_doc,
"take_spans(builder)\n"
"--\n\n"
"The builder's rows as Arrow buffers, and the builder empty again: (rows, ints, strings). ints: pid, start_ns,\n"
"duration_ns and end_ns as little-endian int64 values; strings: (validity, offsets, data) of process, host, track,\n"
"name, args, trace_id, span_id and parent_span_id (validity None: no null).");

static PyObject *
take_spans(PyObject *module, PyObject *capsule)
{
    (void)module;
    Builder *b = builder_of(capsule);
    if (b == NULL) {
        return NULL;
    }
    PyObject *ints = PyTuple_New(INTS);
    PyObject *strings = PyTuple_New(STRINGS);
    PyObject *result = NULL;
    if (ints == NULL || strings == NULL) {
        goto done;
    }
    for (int i = 0; i < INTS; i++) {
        PyObject *column = bytes_of(&b->ints[i], b->ints[i].len);
        if (column == NULL) {
            goto done;
        }
        PyTuple_SET_ITEM(ints, i, column);
    }
    for (int i = 0; i < STRINGS; i++) {
        Strings *s = &b->strings[i];
        PyObject *valid = s->nulls ? bytes_of(&s->valid, ((size_t)b->rows + 7) / 8) : Py_NewRef(Py_None);
        PyObject *column = Py_BuildValue("(NNN)", valid, bytes_of(&s->offsets, s->offsets.len),
                                         bytes_of(&s->data, s->data.len));
        if (column == NULL) {
            goto done;
        }
        PyTuple_SET_ITEM(strings, i, column);
    }
    result = Py_BuildValue("(nOO)", b->rows, ints, strings);
    if (result != NULL) {
        builder_free(b);
        builder_start(b);
        if (builder_failed(b)) {
            Py_CLEAR(result);
            PyErr_NoMemory();
        }
    }
done:
    Py_XDECREF(ints);
    Py_XDECREF(strings);
    return result;
}

static PyMethodDef module_methods[] = {
    {"spans_builder", spans_builder, METH_NOARGS, spans_builder_doc},
    {"add_spans", (PyCFunction)(void (*)(void))add_spans, METH_FASTCALL, add_spans_doc},
    {"take_spans", take_spans, METH_O, take_spans_doc},
    {NULL, NULL, 0, NULL},
};

/* Arrow's buffers are little-endian here: on another host the module refuses to load, and the Python rows serve. */
static int
module_exec(PyObject *module)
{
    (void)module;
    const uint16_t one = 1;
    uint8_t first;
    memcpy(&first, &one, 1);
    if (first != 1) {
        PyErr_SetString(PyExc_ImportError, "the tables' C writer needs a little-endian host");
        return -1;
    }
    return 0;
}

/* No state at all, so each interpreter can import it, with a GIL of its own or none: each function touches only its
   arguments (a builder, one thread at a time), and add_spans runs with the GIL released. */
static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, module_exec},
#if PY_VERSION_HEX >= 0x030C0000
    {Py_mod_multiple_interpreters, Py_MOD_PER_INTERPRETER_GIL_SUPPORTED},
#endif
#if PY_VERSION_HEX >= 0x030D0000
    {Py_mod_gil, Py_MOD_GIL_NOT_USED},
#endif
    {0, NULL},
};

static struct PyModuleDef tables_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "ringtrace.collector.export._tables",
    .m_doc = "The spans table's columns of stored EVENTS frames as Arrow buffers, in C (see table_columns.py).",
    .m_size = 0,
    .m_methods = module_methods,
    .m_slots = module_slots,
};

PyMODINIT_FUNC
PyInit__tables(void)
{
    return PyModuleDef_Init(&tables_module);
}
