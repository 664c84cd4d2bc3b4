/* The spans, instants, counters, messages and samples tables' columns (export/table_rows.py) straight from stored EVENTS
frames' msgpack payloads, in C, with the GIL released: Arrow buffers, a row group's worth, that
export/table_columns.py hands to pyarrow without a copy.

Optional: when this module is not built or RINGTRACE_PURE_PYTHON=1 is set, table_rows.py makes every row in Python
(the column reader and the event walk). Those define the rows; the tests hold both to the same tables.

A builder (a capsule from builder(table)) gathers one table's rows frame by frame (add_rows()) until take_rows() hands
them over and starts again. For the spans table, add_rows() takes each event whose kind is a span and whose args are a
map of string keys (or nil); its row: process, pid, host and track (the frame's, as given), name, start_ns,
duration_ns, end_ns, args as JSON text (written as _chrome.c writes it), and trace_id, span_id and parent_span_id
where args hold them as text (a key given twice counts with its last value, as msgpack-python keeps it): those of the
columns the caller reads (`wanted`), the others left empty. For the instants table, each plain instant (not an
incident: the Python side codes those as its own) with such args: process, pid, host, track, name, ts_ns, args,
trace_id, kind ("instant") and async_id (null). For the counters table, each counter whose args are a map of distinct
text keys (at most MAX_SERIES; or nil: no row): a row per entry, process, pid, host, track, name, ts_ns, series (the
key) and value (a double: an integer or a float as Python's float() makes it; null for anything else, a bool among
them). A message of a kind with a template is no row of these three tables, whether or not the messages table takes it
(is_message): given the templates, a frame of spans and messages needs no Python walk. For the messages table, each
message whose kind has a template (the Python side makes one for the kinds it can describe: message_row below) and
whose values are an array: process, pid, host, track, ts_ns, text (the kind's text with each placeholder's value shown
as Python's f"{value}" shows it, for None, a bool, an integer or text: a float or anything else leaves the message to
the Python walk), args (its values by name as JSON text; null for none), trace_id (its value named so, when text),
category and priority (its kind's). For the samples table, each sample (its kind coded 'P' by the Python side):
process, pid, host, track, ts_ns, task (its name; null for none), leaf (its innermost frame's function; null for an
empty stack) and stack (its frames root first, each function, file and line: as wire/stack_tree.py resolves its stack
id through the stack table given, the innermost MAX_RESOLVED_DEPTH of a deeper one; an id that is no integer or none
declared, an empty stack; a node or frame the table does not hold, the Python walk's). Events of the other fast kinds
(span, instant, counter) are no row of the table: left out. Every other event (a traced call, a marker, an async
event, a message the table does not take as above, an unknown kind or name, args that are no map or hold bytes, an
extension type or a non-string key, times no clock gives) is left to the Python walk: flagged in the returned
`deferred` map, one byte per event. A payload msgpack-python would refuse returns None, and the frame adds no row: the
Python walk reads it and decides, as it would alone.

Columns: fixed-width ones as little-endian int64 values; strings as Arrow's int32 offsets and UTF-8 data, with a
validity bitmap where a value may be null. A row group whose string data would pass 2 GiB takes no more rows from
that frame (None: the Python walk's). The payload comes from the network: every read is checked (_msgpack_read.h).

Why the GIL can be released: the payload, the kind codes, the names, the templates and their spans are buffers
held (and locked against resizing) for the call, and a builder is used by one thread at a time (a snapshot's);
nothing else is touched. */

#include "_json_write.h"

#define BUILDER_NAME "ringtrace.collector.export._tables.RowsBuilder"

/* A column of strings: offsets (int32, one more than rows), data, and validity bits (where nulls are). */
typedef struct {
    Out offsets, data, valid;
    Py_ssize_t nulls;
} Strings;

enum { PROCESS, HOST, TRACK, NAME_TEXT, ARGS_TEXT, TRACE_ID, SPAN_ID, PARENT_SPAN_ID, STRINGS };
enum { PID, START, DURATION, END, INTS };
/* The instants table's strings take the spans' last two places: its kind, then its async_id. */
enum { KIND_TEXT = SPAN_ID, ASYNC_ID = PARENT_SPAN_ID };

/* The counters table's strings: the where columns and the name, then its series in the args' place. */
enum { SERIES = ARGS_TEXT };
/* The bit of `wanted` for the counters' value column (after the ints' and the strings'). */
enum { VALUE_BIT = INTS + STRINGS };
/* A counter with more entries than this is the Python rows' (its keys are checked for repeats pairwise). */
#define MAX_SERIES 64

/* The messages table's strings: the where columns, its rendered text in the name's place, args and trace_id, then its
   category and priority in the span ids' places. */
enum { TEXT = NAME_TEXT, CATEGORY = SPAN_ID, PRIORITY = PARENT_SPAN_ID };
/* A message with more values than this is the Python rows' (its values are read into an array). */
#define MAX_VALUES 64

/* The samples table's strings: the where columns, its task in the name's place and its leaf in the args'; its stack
   (a list of frames) has buffers of its own, and the bit of `wanted` the counters' value has. */
enum { TASK = NAME_TEXT, LEAF = ARGS_TEXT };
enum { STACK_BIT = VALUE_BIT };
/* Frames of a stack resolved at most, the innermost (wire/stack_tree.py's MAX_RESOLVED_DEPTH). */
#define MAX_RESOLVED_DEPTH 1024

/* The tables a builder makes, the kind code of their rows, how many int64 columns each has (its first ones) and how
   many string columns (its first ones). A message's kind has the Python walk's code (CODE_PYTHON): those of its kinds
   that the C writer renders have a template (`templates`, below); the others stay the Python rows'. */
enum { TABLE_SPANS, TABLE_INSTANTS, TABLE_COUNTERS, TABLE_MESSAGES, TABLE_SAMPLES, TABLES };
static const int table_code[TABLES] = {'X', 'i', 'C', CODE_PYTHON, 'P'};
static const int table_ints[TABLES] = {INTS, 2, 2, 2, 2};
static const int table_strings[TABLES] = {STRINGS, STRINGS, SERIES + 1, STRINGS, LEAF + 1};
/* The string columns read from args as JSON (args, then the ids found there): each table's bits of `wanted`,
   shifted. */
static const unsigned long table_texts[TABLES] = {15u, 3u, 0u, 0u, 0u};

typedef struct {
    int table;
    Py_ssize_t rows;
    Out ints[INTS];
    Strings strings[STRINGS];
    Out values, values_valid; /* the counters' values: doubles, and where they are null */
    Py_ssize_t value_nulls;
    /* the samples' stacks: int32 offsets per row into their frames, and the frames' function, file (offsets and
       data; never null) and line (int64) */
    Out stack_offsets, lines;
    Strings functions, files;
    Py_ssize_t frames;
    int too_large; /* string data past int32 offsets */
} Builder;

/* Where a builder was before a frame: what a frame the Python walk must read is rolled back to. */
typedef struct {
    Py_ssize_t rows;
    size_t ints[INTS], offsets[STRINGS], data[STRINGS], nulls[STRINGS], values, value_nulls;
    size_t stack_offsets, lines, function_offsets, function_data, file_offsets, file_data, frames;
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
    free(b->values.data);
    free(b->values_valid.data);
    free(b->stack_offsets.data);
    free(b->lines.data);
    Strings *texts[2] = {&b->functions, &b->files};
    for (int i = 0; i < 2; i++) {
        free(texts[i]->offsets.data);
        free(texts[i]->data.data);
        free(texts[i]->valid.data);
    }
    int table = b->table;
    memset(b, 0, sizeof(*b));
    b->table = table;
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
    put_i32(&b->stack_offsets, 0);
    put_i32(&b->functions.offsets, 0);
    put_i32(&b->files.offsets, 0);
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
    failed |= b->stack_offsets.failed | b->lines.failed | b->functions.offsets.failed | b->functions.data.failed;
    failed |= b->files.offsets.failed | b->files.data.failed;
    return failed | b->values.failed | b->values_valid.failed;
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
    m->values = b->values.len;
    m->value_nulls = (size_t)b->value_nulls;
    m->stack_offsets = b->stack_offsets.len;
    m->lines = b->lines.len;
    m->function_offsets = b->functions.offsets.len;
    m->function_data = b->functions.data.len;
    m->file_offsets = b->files.offsets.len;
    m->file_data = b->files.data.len;
    m->frames = (size_t)b->frames;
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
    b->values.len = m->values;
    b->value_nulls = (Py_ssize_t)m->value_nulls;
    b->stack_offsets.len = m->stack_offsets;
    b->lines.len = m->lines;
    b->functions.offsets.len = m->function_offsets;
    b->functions.data.len = m->function_data;
    b->files.offsets.len = m->file_offsets;
    b->files.data.len = m->file_data;
    b->frames = (Py_ssize_t)m->frames;
    size_t bytes = ((size_t)m->rows + 7) / 8;
    if (b->values_valid.len > bytes) {
        b->values_valid.len = bytes;
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
    const uint8_t *templates; /* the message kinds' templates (table_columns.message_template), end to end */
    Py_ssize_t templates_len;
    const uint8_t *template_spans; /* per kind id: int64 start, end in templates (-1: none), any alignment */
    Py_ssize_t template_spans_len;
    /* the samples table's stack table: per stack id its parent's id (-1: a root) and its frame's id (int64 each);
       per frame id int64 function start, end, file start, end in frame_texts, and line (start -1: none here) */
    const uint8_t *parents, *leaves;
    Py_ssize_t stacks_len;
    const char *frame_texts;
    Py_ssize_t frame_texts_len;
    const uint8_t *frame_spans;
    Py_ssize_t frames_len;
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

/* A counter's value as Python's float() makes it of an integer or a float: 1, or 0 for anything else (null). */
static int
counter_value(Cursor value, double *out)
{
    i128 n;
    Cursor at = value;
    if (read_int(&at, &n) == OK) {
        *out = (double)n; /* (rounded to nearest, ties to even, as float() of an int) */
        return 1;
    }
    if (!need(&value, 1)) {
        return 0;
    }
    if (*value.p == 0xca && need(&value, 5)) {
        uint32_t bits = (uint32_t)be(value.p + 1, 4);
        float v;
        memcpy(&v, &bits, sizeof(v));
        *out = (double)v;
        return 1;
    }
    if (*value.p == 0xcb && need(&value, 9)) {
        uint64_t bits = be(value.p + 1, 8);
        memcpy(out, &bits, sizeof(*out));
        return 1;
    }
    return 0;
}

/* The rows of counter `e` (its args a map, or nil for none): one per entry. DEFER: the Python rows' (a key that is no
   text, a key given twice: a dict keeps one; more than MAX_SERIES entries). */
static int
counter_rows(Frame *f, const Event *e, i128 wall, int64_t name_start, int64_t name_end)
{
    Builder *b = f->b;
    Cursor args = e->args;
    if (!(args.p < args.end) || *args.p == 0xc0) {
        return OK;
    }
    uint32_t items;
    if (read_container(&args, 1, &items) != OK || items > MAX_SERIES) {
        return DEFER;
    }
    const uint8_t *keys[MAX_SERIES];
    int64_t key_len[MAX_SERIES];
    Cursor values[MAX_SERIES];
    for (uint32_t k = 0; k < items; k++) {
        int64_t n = str_length(&args);
        if (n < 0 || !is_utf8(args.p, (size_t)n)) {
            return DEFER;
        }
        keys[k] = args.p;
        key_len[k] = n;
        args.p += n;
        for (uint32_t j = 0; j < k; j++) {
            if (key_len[j] == n && memcmp(keys[j], keys[k], (size_t)n) == 0) {
                return DEFER;
            }
        }
        values[k] = args;
        if (skip(&args, 1) != OK) {
            return DEFER;
        }
    }
    for (uint32_t k = 0; k < items; k++) {
        for (int w = 0; w < 3; w++) {
            if (WANTS(f, INTS + PROCESS + w)) {
                put_text(b, PROCESS + w, f->where[w], f->where_len[w]);
            }
        }
        if (WANTS(f, INTS + NAME_TEXT)) {
            put_text(b, NAME_TEXT, f->names + name_start, (size_t)(name_end - name_start));
        }
        if (WANTS(f, INTS + SERIES)) {
            put_text(b, SERIES, (const char *)keys[k], (size_t)key_len[k]);
        }
        int64_t ints[2] = {f->pid, (int64_t)wall};
        for (int i = 0; i < 2; i++) {
            if (WANTS(f, i)) {
                put_i64(&b->ints[i], ints[i]);
            }
        }
        if (WANTS(f, VALUE_BIT)) {
            double v = 0.0;
            int is_number = counter_value(values[k], &v);
            put(&b->values, (const char *)&v, sizeof(v));
            set_valid(&b->values_valid, b->rows, is_number);
            b->value_nulls += !is_number;
        }
        if (b->too_large) {
            return BAD;
        }
        b->rows++;
    }
    return OK;
}

/* ---- messages ---- */

/* A message kind's template, as table_columns.message_template writes it (lengths and numbers little-endian u32):
   category, priority (each a length and UTF-8), trace_id's index among the values (u32; 0xffffffff: none), the
   fields' names (a count, then a length and UTF-8 each), then the parts of its text (a count, then each: a type, 0
   text as written (a length and UTF-8), 1 a ${name}, shown as the value alone, or 2 a $name, shown name(value): each
   with the value's index and the placeholder as written (a length and UTF-8), which stands when there is no such
   value). Built by the Python side from a stored SCHEMA frame, and read here as if from the network: every read is
   checked, a template that does not read leaves the message to the Python rows. */
typedef struct {
    const uint8_t *p, *end;
} Reader;

static int
read_u32(Reader *r, uint32_t *v)
{
    if (r->end - r->p < 4) {
        return 0;
    }
    *v = (uint32_t)r->p[0] | (uint32_t)r->p[1] << 8 | (uint32_t)r->p[2] << 16 | (uint32_t)r->p[3] << 24;
    r->p += 4;
    return 1;
}

/* A length, then as many bytes: where they start. */
static int
read_text(Reader *r, const uint8_t **text, uint32_t *len)
{
    if (!read_u32(r, len) || (size_t)(r->end - r->p) < *len) {
        return 0;
    }
    *text = r->p;
    r->p += *len;
    return 1;
}

typedef struct {
    const uint8_t *category, *priority;
    uint32_t category_len, priority_len, trace_index, fields;
    const uint8_t *field[MAX_VALUES];
    uint32_t field_len[MAX_VALUES];
    Reader parts; /* the count of parts, then the parts */
} Template;

/* Kind `kind`'s template: 1, or 0 if it has none (not a message the C writer renders) or it does not read. */
static int
template_of(const Frame *f, i128 kind, Template *t)
{
    if (kind < 0 || kind >= f->template_spans_len / 2) {
        return 0;
    }
    int64_t start, end;
    memcpy(&start, f->template_spans + 2 * sizeof(int64_t) * (size_t)kind, sizeof(int64_t));
    memcpy(&end, f->template_spans + (2 * (size_t)kind + 1) * sizeof(int64_t), sizeof(int64_t));
    if (start < 0 || end < start || end > f->templates_len) {
        return 0;
    }
    Reader r = {f->templates + start, f->templates + end};
    if (!read_text(&r, &t->category, &t->category_len) || !read_text(&r, &t->priority, &t->priority_len) ||
        !read_u32(&r, &t->trace_index) || !read_u32(&r, &t->fields) || t->fields > MAX_VALUES) {
        return 0;
    }
    for (uint32_t k = 0; k < t->fields; k++) {
        if (!read_text(&r, &t->field[k], &t->field_len[k])) {
            return 0;
        }
    }
    t->parts = r;
    return 1;
}

/* A value as Python's f"{value}" shows it, of those the C writer renders: None, a bool, an integer, text. DEFER:
   any other (a float, whose repr is Python's; bytes, a list, a map, an extension type). */
static int
put_shown(Cursor value, Out *out)
{
    if (!need(&value, 1)) {
        return BAD;
    }
    uint8_t b = *value.p;
    switch (b) {
    case 0xc0: PUT_LITERAL(out, "None"); return OK;
    case 0xc2: PUT_LITERAL(out, "False"); return OK;
    case 0xc3: PUT_LITERAL(out, "True"); return OK;
    }
    if (b <= 0x7f || b >= 0xe0 || (b >= 0xcc && b <= 0xd3)) {
        i128 v;
        if (read_int(&value, &v) != OK) {
            return BAD;
        }
        put_int(out, v);
        return OK;
    }
    int64_t n = str_length(&value);
    if (n < 0) {
        return DEFER;
    }
    put(out, (const char *)value.p, (size_t)n); /* (UTF-8: checked by skip()) */
    return OK;
}

/* The text of a message: its template's parts, each placeholder's value shown (or the placeholder as written, when
   the message has no such value). */
static int
put_message_text(const Template *t, const Cursor *values, uint32_t count, Out *out)
{
    Reader r = t->parts;
    uint32_t parts;
    if (!read_u32(&r, &parts)) {
        return DEFER;
    }
    for (uint32_t k = 0; k < parts; k++) {
        uint32_t type, index = 0, len;
        const uint8_t *text;
        if (!read_u32(&r, &type) || type > 2 || (type && !read_u32(&r, &index)) || !read_text(&r, &text, &len)) {
            return DEFER;
        }
        if (type == 0 || index >= count) {
            put(out, (const char *)text, len);
            continue;
        }
        if (type == 2) { /* $name: name(value) */
            if (len < 1) {
                return DEFER;
            }
            put(out, (const char *)text + 1, len - 1);
            PUT_LITERAL(out, "(");
        }
        int status = put_shown(values[index], out);
        if (status != OK) {
            return status;
        }
        if (type == 2) {
            PUT_LITERAL(out, ")");
        }
    }
    return OK;
}

/* A message's values as a JSON map, by its fields' names (values past them named value5, value6, ...), as the Python
   rows write them. */
static int
put_message_args(const Template *t, const Cursor *values, uint32_t count, Out *out)
{
    PUT_LITERAL(out, "{");
    for (uint32_t i = 0; i < count; i++) {
        if (i) {
            PUT_LITERAL(out, ",");
        }
        if (i < t->fields) {
            put_string(out, t->field[i], t->field_len[i]);
        }
        else {
            PUT_LITERAL(out, "\"value");
            put_int(out, (i128)i + 1);
            PUT_LITERAL(out, "\"");
        }
        PUT_LITERAL(out, ":");
        Cursor value = values[i];
        int status = put_value(&value, out, 1);
        if (status != OK) {
            return status;
        }
    }
    PUT_LITERAL(out, "}");
    return OK;
}

/* The row of message `e` (its kind's template found). DEFER: the Python rows' (values that are no array, or more
   than MAX_VALUES; a value shown in the text that is not rendered here; args JSON does not hold as written here). */
static int
message_row(Frame *f, const Event *e, const Template *t, i128 wall)
{
    Builder *b = f->b;
    Cursor args = e->args;
    uint32_t count;
    if (!need(&args, 1) || !((*args.p & 0xf0) == 0x90 || *args.p == 0xdc || *args.p == 0xdd) ||
        read_container(&args, 0, &count) != OK || count > MAX_VALUES) {
        return DEFER;
    }
    Cursor values[MAX_VALUES];
    for (uint32_t i = 0; i < count; i++) {
        values[i] = args;
        if (skip(&args, 1) != OK) {
            return DEFER;
        }
    }
    Out *text = &b->strings[TEXT].data, *json = &b->strings[ARGS_TEXT].data;
    size_t text_mark = text->len, json_mark = json->len;
    int status = OK;
    if (WANTS(f, INTS + TEXT)) {
        status = put_message_text(t, values, count, text);
    }
    if (status == OK && WANTS(f, INTS + ARGS_TEXT) && count) {
        status = put_message_args(t, values, count, json);
    }
    if (status != OK) {
        text->len = text_mark;
        json->len = json_mark;
        return status;
    }
    if (WANTS(f, INTS + TEXT)) {
        end_value(b, &b->strings[TEXT], 1);
    }
    if (WANTS(f, INTS + ARGS_TEXT)) {
        end_value(b, &b->strings[ARGS_TEXT], count != 0);
    }
    if (WANTS(f, INTS + TRACE_ID)) {
        Cursor at = t->trace_index < count ? values[t->trace_index] : (Cursor){NULL, NULL};
        int64_t n = at.p != NULL ? str_length(&at) : -1;
        if (n >= 0) {
            put_text(b, TRACE_ID, (const char *)at.p, (size_t)n);
        }
        else {
            put_null(b, TRACE_ID);
        }
    }
    for (int k = 0; k < 3; k++) {
        if (WANTS(f, INTS + PROCESS + k)) {
            put_text(b, PROCESS + k, f->where[k], f->where_len[k]);
        }
    }
    if (WANTS(f, INTS + CATEGORY)) {
        put_text(b, CATEGORY, (const char *)t->category, t->category_len);
    }
    if (WANTS(f, INTS + PRIORITY)) {
        put_text(b, PRIORITY, (const char *)t->priority, t->priority_len);
    }
    int64_t ints[2] = {f->pid, (int64_t)wall};
    for (int k = 0; k < 2; k++) {
        if (WANTS(f, k)) {
            put_i64(&b->ints[k], ints[k]);
        }
    }
    if (b->too_large) {
        return BAD;
    }
    b->rows++;
    return OK;
}

/* ---- samples ---- */

static int64_t
int64_at(const uint8_t *p, Py_ssize_t i)
{
    int64_t v;
    memcpy(&v, p + (size_t)i * sizeof(int64_t), sizeof(v));
    return v;
}

/* A frame's text (function or file) written: its offset (never null). */
static void
put_frame_text(Builder *b, Strings *s, const char *text, size_t n)
{
    put(&s->data, text, n);
    if (s->data.len > INT32_MAX) {
        b->too_large = 1;
        return;
    }
    put_i32(&s->offsets, (int32_t)s->data.len);
}

/* The row of sample `e` (its task the name `task`): its stack id (args) resolved through the stack table, root first,
   as wire/stack_tree.py resolves it (an id that is no integer, or none declared: an empty stack). DEFER: the Python
   rows' (a node or frame the table does not hold here: a text no UTF-8, a line past int64). */
static int
sample_row(Frame *f, const Event *e, i128 wall, const char *task, size_t task_len)
{
    Builder *b = f->b;
    Py_ssize_t path[MAX_RESOLVED_DEPTH]; /* frame ids, innermost first */
    int depth = 0;
    Cursor args = e->args;
    i128 id;
    if (read_int(&args, &id) == OK && id >= 0 && id < f->stacks_len) {
        for (i128 node = id; node >= 0 && depth < MAX_RESOLVED_DEPTH;) {
            if (node >= f->stacks_len) {
                return DEFER;
            }
            int64_t leaf = int64_at(f->leaves, (Py_ssize_t)node);
            if (leaf < 0 || leaf >= f->frames_len) {
                return DEFER;
            }
            const uint8_t *at = f->frame_spans + 5 * sizeof(int64_t) * (size_t)leaf;
            int64_t fn_start = int64_at(at, 0), fn_end = int64_at(at, 1), file_start = int64_at(at, 2),
                    file_end = int64_at(at, 3);
            if (fn_start < 0 || fn_end < fn_start || fn_end > f->frame_texts_len || file_start < 0 ||
                file_end < file_start || file_end > f->frame_texts_len) {
                return DEFER;
            }
            path[depth++] = (Py_ssize_t)leaf;
            node = int64_at(f->parents, (Py_ssize_t)node);
        }
    }
    for (int k = 0; k < 3; k++) {
        if (WANTS(f, INTS + PROCESS + k)) {
            put_text(b, PROCESS + k, f->where[k], f->where_len[k]);
        }
    }
    if (WANTS(f, INTS + TASK)) {
        if (task_len) {
            put_text(b, TASK, task, task_len);
        }
        else {
            put_null(b, TASK);
        }
    }
    if (WANTS(f, INTS + LEAF)) {
        if (depth) {
            const uint8_t *at = f->frame_spans + 5 * sizeof(int64_t) * (size_t)path[0];
            int64_t start = int64_at(at, 0), end = int64_at(at, 1);
            put_text(b, LEAF, f->frame_texts + start, (size_t)(end - start));
        }
        else {
            put_null(b, LEAF);
        }
    }
    if (WANTS(f, STACK_BIT)) {
        for (int k = depth - 1; k >= 0; k--) {
            const uint8_t *at = f->frame_spans + 5 * sizeof(int64_t) * (size_t)path[k];
            int64_t fn_start = int64_at(at, 0), fn_end = int64_at(at, 1), file_start = int64_at(at, 2),
                    file_end = int64_at(at, 3);
            put_frame_text(b, &b->functions, f->frame_texts + fn_start, (size_t)(fn_end - fn_start));
            put_frame_text(b, &b->files, f->frame_texts + file_start, (size_t)(file_end - file_start));
            put_i64(&b->lines, int64_at(at, 4));
            b->frames++;
        }
        if (b->frames > INT32_MAX) {
            b->too_large = 1;
        }
        else {
            put_i32(&b->stack_offsets, (int32_t)b->frames);
        }
    }
    int64_t ints[2] = {f->pid, (int64_t)wall};
    for (int k = 0; k < 2; k++) {
        if (WANTS(f, k)) {
            put_i64(&b->ints[k], ints[k]);
        }
    }
    if (b->too_large) {
        return BAD;
    }
    b->rows++;
    return OK;
}

/* Whether `e` is a message that the messages table's C writer takes whole or leaves to the Python rows for its values
alone (so no row of any other table, and nothing the walk would count): a kind with a template, times a clock gives, a
name declared, values in an array. */
static int
is_message(const Frame *f, const Event *e)
{
    Template t;
    i128 wall = f->first_ts_ns + e->ts + f->offset_ns;
    int64_t start = -1, end = -1;
    if (e->name >= 0 && e->name < f->spans_len / 2) {
        memcpy(&start, f->spans + 2 * sizeof(int64_t) * (size_t)e->name, sizeof(int64_t));
        memcpy(&end, f->spans + (2 * (size_t)e->name + 1) * sizeof(int64_t), sizeof(int64_t));
    }
    Cursor args = e->args;
    return template_of(f, e->kind, &t) && 0 <= wall && e->dur >= 0 && wall + e->dur <= MAX_WALL_NS && start >= 0 &&
           end >= start && end <= f->names_len && need(&args, 1) &&
           ((*args.p & 0xf0) == 0x90 || *args.p == 0xdc || *args.p == 0xdd);
}

/* BAD: the payload is not what the Python walk would read as this frame's five columns (or the row group is full). */
static int
frame_rows(Frame *f)
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
        if (e.code != table_code[b->table]) {
            if (e.code == 'X' || e.code == 'i' || e.code == 'C' || (e.code == CODE_PYTHON && is_message(f, &e))) {
                continue; /* a row of another table */
            }
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
        if (b->table == TABLE_SAMPLES) {
            int status = start < 0 || end < start || end > f->names_len
                             ? DEFER
                             : sample_row(f, &e, wall, f->names + start, (size_t)(end - start));
            if (status == BAD) {
                return BAD;
            }
            if (status == DEFER) {
                defer(f, i); /* an unknown string id (named as such), or the Python rows' */
            }
            continue;
        }
        if (b->table == TABLE_MESSAGES) {
            Template t;
            int status = start < 0 || end < start || end > f->names_len || !template_of(f, e.kind, &t)
                             ? DEFER
                             : message_row(f, &e, &t, wall);
            if (status == BAD) {
                return BAD;
            }
            if (status == DEFER) {
                defer(f, i); /* no message the C writer renders (a marker, a source, an async event...), or the Python
                                rows' */
            }
            continue;
        }
        if (start < 0 || end < start || end > f->names_len || (has_args && !is_map)) {
            defer(f, i); /* an unknown string id (named as such), or args that are not a map */
            continue;
        }
        if (b->table == TABLE_COUNTERS) {
            int status = counter_rows(f, &e, wall, start, end);
            if (status == BAD) {
                return BAD;
            }
            if (status == DEFER) {
                defer(f, i);
            }
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
        int is_span = b->table == TABLE_SPANS;
        for (int k = 0; k < (is_span ? 3 : 1); k++) {
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
        if (!is_span && WANTS(f, INTS + KIND_TEXT)) {
            PUT_LITERAL(&b->strings[KIND_TEXT].data, "instant");
            end_value(b, &b->strings[KIND_TEXT], 1);
        }
        if (!is_span && WANTS(f, INTS + ASYNC_ID)) {
            put_null(b, ASYNC_ID);
        }
        int64_t ints[INTS] = {f->pid, (int64_t)wall, (int64_t)e.dur, (int64_t)(wall + e.dur)};
        for (int k = 0; k < table_ints[b->table]; k++) {
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
    return frame_rows((Frame *)f);
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

PyDoc_STRVAR(builder_doc,
"builder(table)\n"
"--\n\n"
"A new, empty builder of a table's columns (for add_rows and take_rows; one thread at a time): table 0 the spans',\n"
"1 the instants', 2 the counters', 3 the messages', 4 the samples'.");

static PyObject *
builder(PyObject *module, PyObject *table_arg)
{
    (void)module;
    long table = PyLong_AsLong(table_arg);
    if (table == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (table < 0 || table >= TABLES) {
        PyErr_Format(PyExc_ValueError, "table must be 0 to %d, got %ld", TABLES - 1, table);
        return NULL;
    }
    Builder *b = calloc(1, sizeof(Builder));
    if (b == NULL) {
        return PyErr_NoMemory();
    }
    b->table = (int)table;
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

PyDoc_STRVAR(add_rows_doc,
"add_rows(builder, payload, count, columns, first_ts_ns, offset_ns, since_ns, until_ns, kinds, names, spans,\n"
"         process, pid, host, track, wanted[, templates, template_spans])\n"
"--\n\n"
"Add a stored EVENTS frame's rows of the builder's table to its rows: (rows, size, deferred), or None (no row added) when the Python\n"
"walk must read the frame. rows: the builder's rows now; size: the bytes it holds; deferred: one byte per event, 1\n"
"for each left to the Python walk (None if none is). columns: where kind, name, ts, dur and args are among the\n"
"payload's 5 columns; kinds: a code per kind id (as _chrome.events_json's); names: UTF-8 strings end to end; spans:\n"
"int64 start and end in names per string id (-1 for none); process, host, track: the rows' UTF-8 text; wanted:\n"
"the columns to write, bit i for take_rows' ints[i], bit 4 + k for its strings[k], bit 12 for its values or\n"
"stacks (the others\n"
"are left empty). templates, template_spans: the messages table's (its kinds' templates end to end, as\n"
"table_columns.message_template writes them, and int64 start and end in them per kind id, -1 for none); without\n"
"them, no message is the C writer's. parents, leaves, frame_texts, frame_spans: the samples table's stack table (per\n"
"stack id int64 parent and frame ids; per frame id int64 function start, end, file start, end in frame_texts, and\n"
"line; start -1: the Python rows').");

static PyObject *
add_rows(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 16 && nargs != 18 && nargs != 22) {
        PyErr_Format(PyExc_TypeError, "add_rows() takes 16, 18 or 22 arguments (%zd given)", nargs);
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
    f.texts = (f.wanted >> (INTS + ARGS_TEXT) & table_texts[f.b->table]) != 0; /* args, or an id found in them */
    Py_buffer views[13];
    PyObject *sources[13] = {args[1], args[8], args[9], args[10], args[11], args[13], args[14]};
    int viewed = (int)nargs - 9; /* (the buffers among the arguments) */
    for (int k = 7; k < viewed; k++) {
        sources[k] = args[k + 9];
    }
    int held = 0;
    PyObject *result = NULL;
    for (; held < viewed; held++) {
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
    if (viewed == 13) {
        f.parents = views[9].buf;
        f.leaves = views[10].buf;
        f.stacks_len = Py_MIN(views[9].len, views[10].len) / (Py_ssize_t)sizeof(int64_t);
        f.frame_texts = views[11].buf;
        f.frame_texts_len = views[11].len;
        f.frame_spans = views[12].buf;
        f.frames_len = views[12].len / (Py_ssize_t)(5 * sizeof(int64_t));
    }
    if (viewed >= 9) {
        f.templates = views[7].buf;
        f.templates_len = views[7].len;
        f.template_spans = views[8].buf;
        f.template_spans_len = views[8].len / (Py_ssize_t)sizeof(int64_t);
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
    size += f.b->values.len + f.b->stack_offsets.len + f.b->lines.len + f.b->functions.offsets.len;
    size += f.b->functions.data.len + f.b->files.offsets.len + f.b->files.data.len;
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

PyDoc_STRVAR(take_rows_doc,
"take_rows(builder)\n"
"--\n\n"
"The builder's rows as Arrow buffers, and the builder empty again: (rows, ints, strings, values). ints:\n"
"little-endian int64 values of pid, start_ns, duration_ns and end_ns (spans) or pid and ts_ns (the others);\n"
"strings: (validity, offsets, data) of process, host, track, then name, args, trace_id, span_id and parent_span_id\n"
"(spans), name, args, trace_id, kind and async_id (instants), name and series (counters) or text, args, trace_id,\n"
"category and priority (messages) or task and leaf (samples) (validity None: no null); values: the counters'\n"
"(validity, little-endian doubles), the samples' stacks (int32 offsets into their frames per row, then the frames'\n"
"function and file (offsets, data) and line (int64)), None for the other tables.");

static PyObject *
take_rows(PyObject *module, PyObject *capsule)
{
    (void)module;
    Builder *b = builder_of(capsule);
    if (b == NULL) {
        return NULL;
    }
    PyObject *ints = PyTuple_New(table_ints[b->table]);
    PyObject *strings = PyTuple_New(table_strings[b->table]);
    PyObject *values = NULL;
    PyObject *result = NULL;
    if (ints == NULL || strings == NULL) {
        goto done;
    }
    if (b->table == TABLE_COUNTERS) {
        PyObject *valid = b->value_nulls ? bytes_of(&b->values_valid, ((size_t)b->rows + 7) / 8) : Py_NewRef(Py_None);
        values = Py_BuildValue("(NN)", valid, bytes_of(&b->values, b->values.len));
    }
    else if (b->table == TABLE_SAMPLES) {
        values = Py_BuildValue("(N(NN)(NN)N)", bytes_of(&b->stack_offsets, b->stack_offsets.len),
                               bytes_of(&b->functions.offsets, b->functions.offsets.len),
                               bytes_of(&b->functions.data, b->functions.data.len),
                               bytes_of(&b->files.offsets, b->files.offsets.len),
                               bytes_of(&b->files.data, b->files.data.len), bytes_of(&b->lines, b->lines.len));
    }
    else {
        values = Py_NewRef(Py_None);
    }
    if (values == NULL) {
        goto done;
    }
    for (int i = 0; i < table_ints[b->table]; i++) {
        PyObject *column = bytes_of(&b->ints[i], b->ints[i].len);
        if (column == NULL) {
            goto done;
        }
        PyTuple_SET_ITEM(ints, i, column);
    }
    for (int i = 0; i < table_strings[b->table]; i++) {
        Strings *s = &b->strings[i];
        PyObject *valid = s->nulls ? bytes_of(&s->valid, ((size_t)b->rows + 7) / 8) : Py_NewRef(Py_None);
        PyObject *column = Py_BuildValue("(NNN)", valid, bytes_of(&s->offsets, s->offsets.len),
                                         bytes_of(&s->data, s->data.len));
        if (column == NULL) {
            goto done;
        }
        PyTuple_SET_ITEM(strings, i, column);
    }
    result = Py_BuildValue("(nOOO)", b->rows, ints, strings, values);
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
    Py_XDECREF(values);
    return result;
}

static PyMethodDef module_methods[] = {
    {"builder", builder, METH_O, builder_doc},
    {"add_rows", (PyCFunction)(void (*)(void))add_rows, METH_FASTCALL, add_rows_doc},
    {"take_rows", take_rows, METH_O, take_rows_doc},
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
   arguments (a builder, one thread at a time), and add_rows runs with the GIL released. */
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
    .m_doc = "The spans, instants and counters tables' columns of stored EVENTS frames as Arrow buffers, in C (see "
             "table_columns.py).",
    .m_size = 0,
    .m_methods = module_methods,
    .m_slots = module_slots,
};

PyMODINIT_FUNC
PyInit__tables(void)
{
    return PyModuleDef_Init(&tables_module);
}
