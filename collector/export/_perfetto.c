/* Perfetto TrackEvent packets straight from a stored EVENTS frame's msgpack payload, in C.

Optional, like _chrome.c: when this module is not built or RINGTRACE_PURE_PYTHON=1 turns it off, export/perfetto.py
writes every frame in Python. That writer defines the behaviour; tests hold this one to the same bytes.

frame_packets() takes a frame only when every event it shows is a span, an instant or a counter whose args are nil or
a map of distinct string keys whose values are nil, booleans, numbers, strings, and lists and maps of those (of string
keys) nested less than MAX_DEPTH: what nearly every frame holds. Any other frame (a message, a marker, source
activity, an async slice, a typed event, bytes, an extension type, a non-string or repeated key, a span with links)
returns None and the
Python writer writes all of it, as it would alone; so does a payload msgpack-python would refuse (read_columns).

It writes what perfetto.py's _Writer.add and chunk() write: each event's TrackEvent (a slice as a BEGIN, with its flow
arrows as export/flows.py derives them, and an END, an
instant, a counter's values), ordered by (timestamp, ends then begins then points then zero-length ends, outer slices
first, arrival), each in a TracePacket with its timestamp and the sequence's tail. The first packet is returned apart,
with its timestamp, for the writer to give it the chunk's first tail (the sequence's flags and the names interned).

Names and argument keys are interned, and counter tracks described, by the Python writer's own functions, called
back at the first use of each in the frame (in event order, as the Python writer meets them), so the interning and
the descriptors are the Python writer's, byte for byte. So the GIL is held while the events are written (a frame of a
few thousand events: well under a millisecond); it is released while the payload is checked and while the packets
are sorted and written out, which touch only buffers held for the call (the payload, the kind codes, the tail). */

#include "_msgpack_read.h"

/* Field keys and values, from Perfetto's protos (see perfetto_protos.py, which names them). */
#define PACKET 0x0a          /* Trace.packet, LEN */
#define TIMESTAMP 0x40       /* TracePacket.timestamp, VARINT */
#define TRACK_EVENT 0x5a     /* TracePacket.track_event, LEN */
#define TYPE 0x48            /* TrackEvent.type, VARINT: 1 BEGIN, 2 END, 3 INSTANT, 4 COUNTER */
#define ANNOTATION 0x22      /* TrackEvent.debug_annotations, LEN */
#define COUNTER_VALUE "\xf0\x01"        /* TrackEvent.counter_value (30), VARINT */
#define DOUBLE_COUNTER_VALUE "\xe1\x02" /* TrackEvent.double_counter_value (44), I64 */
#define FLOW_IDS "\xf9\x02"             /* TrackEvent.flow_ids (47), I64 (fixed64) */
#define TERMINATING_FLOW_IDS "\x81\x03" /* TrackEvent.terminating_flow_ids (48), I64 (fixed64) */
/* DebugAnnotation */
#define BOOL_VALUE 0x10
#define UINT_VALUE 0x18
#define INT_VALUE 0x20
#define DOUBLE_VALUE 0x29
#define STRING_VALUE 0x32
#define ANNOTATION_NAME 0x52 /* a nested entry's name, in full */
#define LEGACY_JSON_VALUE 0x4a
#define DICT_ENTRIES 0x5a
#define ARRAY_VALUES 0x62

/* How events that share a timestamp are ordered (perfetto.py's _ENDS, _BEGINS, _POINTS, _ZERO_ENDS). */
enum { ENDS = 0, BEGINS = 1, POINTS = 2, ZERO_ENDS = 3 };

/* Maps with more entries than this are left to the Python writer (keys are checked for repeats pairwise). */
#define MAX_PLAIN_ENTRIES 64

/* ---- protobuf writing ---- */

static inline void
put_byte(Out *out, uint8_t b)
{
    if (reserve(out, 1) == 0) {
        out->data[out->len++] = (char)b;
    }
}

static inline void
put_varint(Out *out, uint64_t v)
{
    char bytes[10];
    size_t n = 0;
    while (v >= 0x80) {
        bytes[n++] = (char)((v & 0x7f) | 0x80);
        v >>= 7;
    }
    bytes[n++] = (char)v;
    put(out, bytes, n);
}

static inline size_t
varint_size(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

/* A length-delimited field's contents follow: one byte is kept for their length (most are below 128). */
static inline size_t
open_length(Out *out)
{
    put_byte(out, 0);
    return out->len;
}

/* The contents since open_length() are done: their length goes before them (moved along if it takes more than the
   byte kept). */
static void
close_length(Out *out, size_t start)
{
    if (out->failed) {
        return;
    }
    size_t n = out->len - start;
    size_t size = varint_size(n);
    if (size > 1) {
        if (reserve(out, size - 1) != 0) {
            return;
        }
        memmove(out->data + start + size - 1, out->data + start, n);
        out->len += size - 1;
    }
    size_t at = start - 1;
    while (n >= 0x80) {
        out->data[at++] = (char)((n & 0x7f) | 0x80);
        n >>= 7;
    }
    out->data[at] = (char)n;
}

static inline void
put_len_field(Out *out, uint8_t key, const char *s, size_t n)
{
    put_byte(out, key);
    put_varint(out, n);
    put(out, s, n);
}

static void
put_fixed64(Out *out, uint64_t bits)
{
    char bytes[8];
    for (int i = 0; i < 8; i++) {
        bytes[i] = (char)(bits >> (8 * i) & 0xff); /* little-endian, as protobuf's fixed64 */
    }
    put(out, bytes, 8);
}

static void
put_double_bits(Out *out, double v)
{
    uint64_t bits;
    memcpy(&bits, &v, sizeof(bits));
    put_fixed64(out, bits);
}

/* A float (0xca, 0xcb) as a double (a float32 widened, as msgpack-python reads it); BAD if the next value is not
   one. */
static int
read_float(Cursor *c, double *out)
{
    if (need(c, 5) && *c->p == 0xca) {
        uint32_t bits = (uint32_t)be(c->p + 1, 4);
        float f;
        memcpy(&f, &bits, 4);
        *out = (double)f;
        c->p += 5;
        return OK;
    }
    if (need(c, 9) && *c->p == 0xcb) {
        uint64_t bits = be(c->p + 1, 8);
        memcpy(out, &bits, 8);
        c->p += 9;
        return OK;
    }
    return BAD;
}

static inline int
is_int(uint8_t b)
{
    return b <= 0x7f || b >= 0xe0 || (b >= 0xcc && b <= 0xd3);
}

static inline int
is_map(uint8_t b)
{
    return (b & 0xf0) == 0x80 || b == 0xde || b == 0xdf;
}

static inline int
is_array(uint8_t b)
{
    return (b & 0xf0) == 0x90 || b == 0xdc || b == 0xdd;
}

static inline int
is_str(uint8_t b)
{
    return (b & 0xe0) == 0xa0 || (b >= 0xd9 && b <= 0xdb);
}

/* ---- what the writer takes ---- */

/* Whether the next value (checked by read_columns) is one put_value() writes as perfetto_annotations.py's
   annotation_value does: DEFER for bytes, an extension type, a map key that is not a string or comes twice
   (msgpack-python keeps the last value, at the first one's place), a map of more than MAX_PLAIN_ENTRIES, nesting of
   MAX_DEPTH or more. Moves past it. */
static int
plain(Cursor *c, int depth)
{
    if (!need(c, 1)) {
        return BAD;
    }
    uint8_t b = *c->p;
    if (b == 0xc0 || b == 0xc2 || b == 0xc3 || b == 0xca || b == 0xcb || is_int(b) || is_str(b)) {
        return skip(c, depth);
    }
    int map = is_map(b);
    if ((!map && !is_array(b)) || depth >= MAX_DEPTH) {
        return DEFER;
    }
    uint32_t items;
    if (read_container(c, map, &items) != OK) {
        return BAD;
    }
    if (map && items > MAX_PLAIN_ENTRIES) {
        return DEFER;
    }
    const uint8_t *keys[MAX_PLAIN_ENTRIES];
    int64_t lengths[MAX_PLAIN_ENTRIES];
    for (uint32_t i = 0; i < items; i++) {
        if (map) {
            int64_t n = str_length(c);
            if (n < 0) {
                return need(c, 1) ? DEFER : BAD;
            }
            for (uint32_t k = 0; k < i; k++) {
                if (lengths[k] == n && memcmp(keys[k], c->p, (size_t)n) == 0) {
                    return DEFER;
                }
            }
            keys[i] = c->p;
            lengths[i] = n;
            c->p += n;
        }
        int status = plain(c, depth + 1);
        if (status != OK) {
            return status;
        }
    }
    return OK;
}

/* One value (plain()) as a DebugAnnotation's value fields. */
static int
put_value(Cursor *c, Out *out)
{
    if (!need(c, 1)) {
        return BAD;
    }
    uint8_t b = *c->p;
    if (b == 0xc0) {
        c->p++;
        put_len_field(out, LEGACY_JSON_VALUE, "null", 4);
        return OK;
    }
    if (b == 0xc2 || b == 0xc3) {
        c->p++;
        put_byte(out, BOOL_VALUE);
        put_byte(out, (uint8_t)(b == 0xc3));
        return OK;
    }
    if (b == 0xca || b == 0xcb) {
        double d;
        if (read_float(c, &d) != OK) {
            return BAD;
        }
        put_byte(out, DOUBLE_VALUE);
        put_double_bits(out, d);
        return OK;
    }
    if (is_int(b)) {
        i128 v;
        if (read_int(c, &v) != OK) {
            return BAD;
        }
        put_byte(out, v <= INT64_MAX ? INT_VALUE : UINT_VALUE); /* an int64 (as two's complement), else a uint64 */
        put_varint(out, (uint64_t)v);
        return OK;
    }
    if (is_str(b)) {
        int64_t n = str_length(c);
        if (n < 0) {
            return BAD;
        }
        put_len_field(out, STRING_VALUE, (const char *)c->p, (size_t)n);
        c->p += n;
        return OK;
    }
    int map = is_map(b);
    uint32_t items;
    if ((!map && !is_array(b)) || read_container(c, map, &items) != OK) {
        return BAD;
    }
    if (items == 0) {
        put_len_field(out, LEGACY_JSON_VALUE, map ? "{}" : "[]", 2);
        return OK;
    }
    for (uint32_t i = 0; i < items; i++) {
        put_byte(out, map ? DICT_ENTRIES : ARRAY_VALUES);
        size_t start = open_length(out);
        if (map) {
            int64_t n = str_length(c);
            if (n < 0) {
                return BAD;
            }
            put_len_field(out, ANNOTATION_NAME, (const char *)c->p, (size_t)n);
            c->p += n;
        }
        if (put_value(c, out) != OK) {
            return BAD;
        }
        close_length(out, start);
    }
    return OK;
}

/* ---- the Python writer's names and tracks, asked once per frame each ---- */

#define CACHED 64 /* entries of each per-frame cache (a frame names few things, again and again) */

typedef struct {
    const uint8_t *key; /* into the payload (NULL: none) */
    int64_t key_len;
    int64_t id;         /* a string id (-1: none) */
    PyObject *field;    /* bytes; NULL: an empty entry */
} Cached;

typedef struct {
    PyObject *name, *annotation, *counter; /* the writer's callables */
    Cached names[CACHED], annotations[CACHED], counters[CACHED];
} Asked;

static void
forget(Asked *asked)
{
    for (int i = 0; i < CACHED; i++) {
        Py_CLEAR(asked->names[i].field);
        Py_CLEAR(asked->annotations[i].field);
        Py_CLEAR(asked->counters[i].field);
    }
}

static size_t
slot(const uint8_t *key, int64_t key_len, int64_t id)
{
    uint64_t h = 14695981039346656037ULL ^ (uint64_t)id; /* FNV-1a */
    for (int64_t i = 0; i < key_len; i++) {
        h = (h ^ key[i]) * 1099511628211ULL;
    }
    return (size_t)((h ^ h >> 32) % CACHED);
}

/* The field the writer gives for a string id (id >= 0), a key (key != NULL, UTF-8: checked by skip()), or both, from
   the cache or by calling `ask` with them (the key as a str); a borrowed reference, NULL with an exception set. */
static PyObject *
asked_for(Cached *cache, PyObject *ask, const uint8_t *key, int64_t key_len, int64_t id)
{
    Cached *entry = &cache[slot(key, key_len, id)];
    if (entry->field != NULL && entry->id == id && entry->key_len == key_len && (key == NULL) == (entry->key == NULL) &&
        (key_len == 0 || memcmp(entry->key, key, (size_t)key_len) == 0)) {
        return entry->field;
    }
    PyObject *text = NULL, *number = NULL, *field = NULL;
    if (key != NULL && (text = PyUnicode_DecodeUTF8((const char *)key, (Py_ssize_t)key_len, "strict")) == NULL) {
        return NULL;
    }
    if (id >= 0 && (number = PyLong_FromLongLong(id)) == NULL) {
        Py_XDECREF(text);
        return NULL;
    }
    if (number != NULL && text != NULL) {
        field = PyObject_CallFunctionObjArgs(ask, number, text, NULL);
    }
    else {
        field = PyObject_CallOneArg(ask, number != NULL ? number : text);
    }
    Py_XDECREF(text);
    Py_XDECREF(number);
    if (field == NULL) {
        return NULL;
    }
    if (!PyBytes_Check(field)) {
        PyErr_Format(PyExc_TypeError, "the writer gave a field of type %s, not bytes", Py_TYPE(field)->tp_name);
        Py_DECREF(field);
        return NULL;
    }
    Py_XSETREF(entry->field, field);
    entry->key = key;
    entry->key_len = key_len;
    entry->id = id;
    return field;
}

static inline void
put_bytes(Out *out, PyObject *bytes)
{
    put(out, PyBytes_AS_STRING(bytes), (size_t)PyBytes_GET_SIZE(bytes));
}

/* ---- one frame ---- */

typedef struct {
    int64_t ts, within;
    uint64_t arrival;
    int order;
    size_t start, len; /* the TrackEvent, in the frame's events */
} Timed;

typedef struct {
    /* inputs */
    const uint8_t *payload;
    size_t payload_len;
    Py_ssize_t count;
    int column_of[COLUMNS];
    i128 first_ts_ns, offset_ns;
    Window window;
    const uint8_t *kinds;
    Py_ssize_t kinds_len;
    /* between the passes */
    Cursor column[COLUMNS];
    uint8_t *shown_at; /* per event: 1 if shown */
    /* outputs */
    Py_ssize_t shown, skipped;
    Out events;
    Timed *timed;
    size_t timed_len, timed_cap;
    int failed; /* out of memory */
} Frame;

/* Which events are shown, and whether the frame is one this writer takes (OK), the Python writer's (DEFER), or one
   msgpack-python or the Python walk would refuse (BAD: the Python writer reads it, and decides). */
static int
choose(Frame *f)
{
    if (read_columns(f->payload, f->payload_len, f->count, f->column_of, f->column) != OK) {
        return BAD;
    }
    Cursor column[COLUMNS];
    memcpy(column, f->column, sizeof(column));
    for (Py_ssize_t i = 0; i < f->count; i++) {
        Event e;
        if (next_event(column, f->kinds, f->kinds_len, &e) != OK) {
            return BAD;
        }
        i128 name = e.name, ts = e.ts, dur = e.dur;
        Cursor args = e.args;
        int code = e.code;
        if (code == CODE_PYTHON) {
            return DEFER;
        }
        i128 wall = f->first_ts_ns + ts + f->offset_ns;
        if (code == CODE_SKIP || !(0 <= wall && dur >= 0 && wall + dur <= MAX_WALL_NS)) {
            f->skipped++; /* a kind never declared or not shown, or times no clock gives */
            continue;
        }
        if (!in_window(&f->window, &e, wall)) {
            continue;
        }
        if (name < 0 || name > INT64_MAX) {
            return DEFER; /* a string id no table holds: the Python walk names it */
        }
        if (args.p < args.end && *args.p != 0xc0) {
            if (!is_map(*args.p)) {
                return DEFER; /* a typed event's values, or a value that is not a map */
            }
            Flows flows;
            if (code == 'X' && span_flows(args, &flows) != OK) {
                return DEFER; /* links: the Python writer writes their flows */
            }
            int status = plain(&args, 0);
            if (status != OK) {
                return status;
            }
        }
        f->shown_at[i] = 1;
        f->shown++;
    }
    return OK;
}

/* A TrackEvent written since `start` goes in the chunk at (ts, order, within). */
static void
add_timed(Frame *f, size_t start, int64_t ts, int order, int64_t within)
{
    if (f->events.failed || f->failed) {
        return;
    }
    if (f->timed_len == f->timed_cap) {
        size_t cap = f->timed_cap ? f->timed_cap * 2 : 256;
        Timed *timed = cap < SIZE_MAX / sizeof(Timed) ? realloc(f->timed, cap * sizeof(Timed)) : NULL;
        if (timed == NULL) {
            f->failed = 1;
            return;
        }
        f->timed = timed;
        f->timed_cap = cap;
    }
    Timed *t = &f->timed[f->timed_len];
    t->ts = ts;
    t->order = order;
    t->within = within;
    t->arrival = f->timed_len++;
    t->start = start;
    t->len = f->events.len - start;
}

static inline void
put_type(Out *out, uint8_t type)
{
    put_byte(out, TYPE);
    put_byte(out, type);
}

/* A map's entries (args, after plain()) as debug annotations, each named by the writer's interned field. */
static int
put_annotations(Frame *f, Asked *asked, Cursor *args)
{
    uint32_t items;
    if (read_container(args, 1, &items) != OK) {
        return BAD;
    }
    for (uint32_t i = 0; i < items; i++) {
        int64_t n = str_length(args);
        if (n < 0) {
            return BAD;
        }
        PyObject *named = asked_for(asked->annotations, asked->annotation, args->p, n, -1);
        if (named == NULL) {
            return BAD;
        }
        args->p += n;
        put_byte(&f->events, ANNOTATION);
        size_t start = open_length(&f->events);
        put_bytes(&f->events, named);
        if (put_value(args, &f->events) != OK) {
            return BAD;
        }
        close_length(&f->events, start);
    }
    return OK;
}

/* A counter's values, each on the counter track the writer gives for its name (and key). */
static int
put_counter(Frame *f, Asked *asked, Cursor *args, int64_t name, int64_t ts)
{
    uint32_t items;
    if (read_container(args, 1, &items) != OK) {
        return BAD;
    }
    for (uint32_t i = 0; i < items; i++) {
        int64_t n = str_length(args);
        if (n < 0) {
            return BAD;
        }
        const uint8_t *key = args->p;
        args->p += n;
        if (!need(args, 1)) {
            return BAD;
        }
        uint8_t b = *args->p;
        if (!is_int(b) && b != 0xca && b != 0xcb) {
            if (skip(args, 1) != OK) {
                return BAD;
            }
            continue; /* not a number: no value */
        }
        i128 v = 0;
        double d = 0;
        if ((is_int(b) ? read_int(args, &v) : read_float(args, &d)) != OK) {
            return BAD;
        }
        PyObject *track = asked_for(asked->counters, asked->counter, key, n, name);
        if (track == NULL) {
            return BAD;
        }
        size_t start = f->events.len;
        put_type(&f->events, 4);
        put_bytes(&f->events, track);
        if (is_int(b) && v <= INT64_MAX) {
            put(&f->events, COUNTER_VALUE, 2);
            put_varint(&f->events, (uint64_t)v);
        }
        else {
            put(&f->events, DOUBLE_COUNTER_VALUE, 2);
            put_double_bits(&f->events, is_int(b) ? (double)(uint64_t)v : d);
        }
        add_timed(f, start, ts, POINTS, 0);
    }
    return OK;
}

/* The shown events' TrackEvents (after choose()), in the order of the frame. BAD: an exception is set. */
static int
write_events(Frame *f, Asked *asked, PyObject *on_track)
{
    Cursor column[COLUMNS];
    memcpy(column, f->column, sizeof(column));
    for (Py_ssize_t i = 0; i < f->count; i++) {
        i128 kind, name, ts, dur;
        if (read_int(&column[KIND], &kind) != OK || read_int(&column[NAME], &name) != OK ||
            read_int(&column[TS], &ts) != OK || read_int(&column[DUR], &dur) != OK) {
            return BAD; /* (the payload changed since choose(): frame_packets says so) */
        }
        Cursor args = column[ARGS];
        if (skip(&column[ARGS], 0) != OK) {
            return BAD; /* (the payload changed since choose(): frame_packets says so) */
        }
        if (!f->shown_at[i]) {
            continue;
        }
        int code = f->kinds[(Py_ssize_t)kind];
        int64_t wall = (int64_t)(f->first_ts_ns + ts + f->offset_ns); /* within int64: checked by choose() */
        int has_args = *args.p != 0xc0;
        int64_t name_id = (int64_t)name; /* 0 to INT64_MAX: checked by choose() */
        if (code == 'C') {
            if (has_args && put_counter(f, asked, &args, name_id, wall) != OK) {
                return BAD;
            }
            continue;
        }
        PyObject *named = asked_for(asked->names, asked->name, NULL, 0, name_id);
        if (named == NULL) {
            return BAD;
        }
        size_t start = f->events.len;
        put_type(&f->events, (uint8_t)(code == 'X' ? 1 : 3));
        put_bytes(&f->events, on_track);
        put_bytes(&f->events, named);
        Flows flows = {0, 0, 0, 0};
        if (code == 'X' && has_args && span_flows(args, &flows) != OK) {
            return BAD; /* (the payload changed since choose(): frame_packets says so) */
        }
        if (has_args && put_annotations(f, asked, &args) != OK) {
            return BAD;
        }
        if (flows.leaving) {
            put(&f->events, FLOW_IDS, 2);
            put_fixed64(&f->events, flows.out);
        }
        if (flows.arriving) {
            put(&f->events, TERMINATING_FLOW_IDS, 2);
            put_fixed64(&f->events, flows.in);
        }
        if (code == 'i') {
            add_timed(f, start, wall, POINTS, 0);
            continue;
        }
        int64_t end = wall + (int64_t)dur;
        add_timed(f, start, wall, dur > 0 ? BEGINS : POINTS, dur > 0 ? -end : 0);
        start = f->events.len;
        put_type(&f->events, 2);
        put_bytes(&f->events, on_track);
        put_bytes(&f->events, named);
        if (dur > 0) {
            add_timed(f, start, end, ENDS, -wall);
        }
        else {
            add_timed(f, start, wall, ZERO_ENDS, 0);
        }
    }
    return OK;
}

static int
compare_timed(const void *a, const void *b)
{
    const Timed *x = a, *y = b;
    if (x->ts != y->ts) {
        return x->ts < y->ts ? -1 : 1;
    }
    if (x->order != y->order) {
        return x->order < y->order ? -1 : 1;
    }
    if (x->within != y->within) {
        return x->within < y->within ? -1 : 1;
    }
    return x->arrival < y->arrival ? -1 : x->arrival > y->arrival;
}

/* Each TrackEvent but the first (sorted) as a whole TracePacket of the Trace: timestamp, event, the sequence's tail. */
static void
put_packets(Frame *f, Out *out, const char *tail, size_t tail_len)
{
    for (size_t i = 1; i < f->timed_len; i++) {
        const Timed *t = &f->timed[i];
        uint64_t ts = (uint64_t)t->ts;
        size_t packet = 1 + varint_size(ts) + 1 + varint_size(t->len) + t->len + tail_len;
        put_byte(out, PACKET);
        put_varint(out, packet);
        put_byte(out, TIMESTAMP);
        put_varint(out, ts);
        put_byte(out, TRACK_EVENT);
        put_varint(out, t->len);
        put(out, f->events.data + t->start, t->len);
        put(out, tail, tail_len);
    }
}

PyDoc_STRVAR(frame_packets_doc,
"frame_packets(payload, count, columns, first_ts_ns, offset_ns, since_ns, until_ns, kinds, enter, name, annotation,\n"
"              counter)\n"
"--\n\n"
"The Perfetto packets of a stored EVENTS frame: (shown, skipped, first_ts_ns, first_event, rest), or None when the\n"
"Python writer must write the frame. first_event: the first TrackEvent in order (None if there is none), for the\n"
"caller to make a packet of with the chunk's first tail; rest: the others' packets, whole. skipped: events counted as\n"
"undecodable. columns: where kind, name, ts, dur and args are among the payload's 5 columns; kinds: a code per kind\n"
"id (0 not shown, 1 the Python writer's, or the phase letter X, i, C). The writer's callables, called in event order:\n"
"enter() once, if any event is shown, -> (the TrackEvent field of the frame's track, the sequence's tail);\n"
"name(string_id), annotation(key), counter(string_id, key) -> the field naming it (the counter's track field).");

static PyObject *
frame_packets(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 12) {
        PyErr_Format(PyExc_TypeError, "frame_packets() takes 12 arguments (%zd given)", nargs);
        return NULL;
    }
    Frame f;
    memset(&f, 0, sizeof(f));
    Asked asked;
    memset(&asked, 0, sizeof(asked));
    asked.name = args[9];
    asked.annotation = args[10];
    asked.counter = args[11];
    for (int i = 8; i < 12; i++) {
        if (!PyCallable_Check(args[i])) {
            PyErr_SetString(PyExc_TypeError, "enter, name, annotation and counter must be callable");
            return NULL;
        }
    }
    if (frame_shape(args[1], args[2], &f.count, f.column_of) < 0) {
        return NULL;
    }
    if (as_i128(args[3], "first_ts_ns", &f.first_ts_ns, NULL) < 0 ||
        as_i128(args[4], "offset_ns", &f.offset_ns, NULL) < 0 ||
        as_i128(args[5], "since_ns", &f.window.since_ns, &f.window.has_since) < 0 ||
        as_i128(args[6], "until_ns", &f.window.until_ns, &f.window.has_until) < 0) {
        return NULL;
    }
    Py_buffer views[2];
    PyObject *sources[2] = {args[0], args[7]};
    int held = 0;
    PyObject *result = NULL, *entered = NULL;
    Out rest = {0};
    for (; held < 2; held++) {
        if (PyObject_GetBuffer(sources[held], &views[held], PyBUF_SIMPLE) < 0) {
            goto done;
        }
    }
    f.payload = views[0].buf;
    f.payload_len = (size_t)views[0].len;
    f.kinds = views[1].buf;
    f.kinds_len = views[1].len;
    if ((size_t)f.count > f.payload_len) {
        result = Py_NewRef(Py_None); /* not `count` values a column: the Python writer reads it, and decides */
        goto done;
    }
    f.shown_at = calloc((size_t)f.count + 1, 1);
    if (f.shown_at == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    int status;
    Py_BEGIN_ALLOW_THREADS
    status = choose(&f);
    Py_END_ALLOW_THREADS
    if (status != OK) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    if (f.shown == 0) {
        result = Py_BuildValue("(nniOy#)", f.shown, f.skipped, 0, Py_None, "", (Py_ssize_t)0);
        goto done;
    }
    entered = PyObject_CallNoArgs(args[8]);
    if (entered == NULL) {
        goto done;
    }
    if (!PyTuple_Check(entered) || PyTuple_GET_SIZE(entered) != 2 || !PyBytes_Check(PyTuple_GET_ITEM(entered, 0)) ||
        !PyBytes_Check(PyTuple_GET_ITEM(entered, 1))) {
        PyErr_SetString(PyExc_TypeError, "enter() must give (track field, tail), both bytes");
        goto done;
    }
    if (write_events(&f, &asked, PyTuple_GET_ITEM(entered, 0)) != OK) {
        if (!PyErr_Occurred()) { /* the payload is no longer what choose() read: a caller's bug, not a crash */
            PyErr_SetString(PyExc_ValueError, "the frame's payload changed while it was read");
        }
        goto done;
    }
    if (f.failed || f.events.failed) {
        PyErr_NoMemory();
        goto done;
    }
    if (f.timed_len == 0) {
        result = Py_BuildValue("(nniOy#)", f.shown, f.skipped, 0, Py_None, "", (Py_ssize_t)0);
        goto done;
    }
    PyObject *tail = PyTuple_GET_ITEM(entered, 1);
    const char *tail_data = PyBytes_AS_STRING(tail);
    size_t tail_len = (size_t)PyBytes_GET_SIZE(tail);
    Py_BEGIN_ALLOW_THREADS
    qsort(f.timed, f.timed_len, sizeof(Timed), compare_timed);
    put_packets(&f, &rest, tail_data, tail_len);
    Py_END_ALLOW_THREADS
    if (rest.failed) {
        PyErr_NoMemory();
        goto done;
    }
    const Timed *first = &f.timed[0];
    result = Py_BuildValue("(nnLy#y#)", f.shown, f.skipped, (long long)first->ts, f.events.data + first->start,
                           (Py_ssize_t)first->len, rest.data ? rest.data : "", (Py_ssize_t)rest.len);
done:
    while (held-- > 0) {
        PyBuffer_Release(&views[held]);
    }
    forget(&asked);
    Py_XDECREF(entered);
    free(f.shown_at);
    free(f.events.data);
    free(f.timed);
    free(rest.data);
    return result;
}

static PyMethodDef module_methods[] = {
    {"frame_packets", (PyCFunction)(void (*)(void))frame_packets, METH_FASTCALL, frame_packets_doc},
    {NULL, NULL, 0, NULL},
};

/* No state at all, so each interpreter can import it. Not free-threaded: it calls the writer back with the GIL held
   and relies on it to keep the frame's buffers and the writer's tables unchanged. */
static PyModuleDef_Slot module_slots[] = {
#if PY_VERSION_HEX >= 0x030C0000
    {Py_mod_multiple_interpreters, Py_MOD_PER_INTERPRETER_GIL_SUPPORTED},
#endif
    {0, NULL},
};

static struct PyModuleDef perfetto_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "ringtrace.collector.export._perfetto",
    .m_doc = "Perfetto packets of stored EVENTS frames' common events, in C (see perfetto_frames.py).",
    .m_size = 0,
    .m_methods = module_methods,
    .m_slots = module_slots,
};

PyMODINIT_FUNC
PyInit__perfetto(void)
{
    return PyModuleDef_Init(&perfetto_module);
}
