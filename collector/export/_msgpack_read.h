/* Reading a stored EVENTS frame's msgpack payload in C, checked as msgpack-python reads it, a growing output buffer,
and the flow arrows of spans of a trace: what the C writers of snapshots share (_chrome.c, Chrome JSON; _perfetto.c,
Perfetto protobuf). The payload comes from the network: every length is checked against the bytes left, no count is
trusted. */

#ifndef RINGTRACE_MSGPACK_READ_H
#define RINGTRACE_MSGPACK_READ_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifndef __SIZEOF_INT128__
#error "needs 128-bit integers; the collector writes every event through its Python walk"
#endif

typedef __int128 i128;

#define MAX_WALL_NS ((i128)INT64_MAX)
/* Values nested deeper than this are left to the Python walk (msgpack-python has a depth limit of its own). */
#define MAX_DEPTH 32

/* Kind codes, one byte per kind id (export's table): what the Python side decided for each kind. */
#define CODE_SKIP 0   /* never declared, or a shape no snapshot shows: counted, not shown */
#define CODE_PYTHON 1 /* a shape the Python walk shows (message, marker, source, async) */
/* 'X', 'i', 'C': a span, an instant, a counter; 'P': a sample (the samples table's alone: _tables.c) */

enum { OK = 0, DEFER = 1, BAD = -1 };

typedef struct {
    const uint8_t *p, *end;
} Cursor;

typedef struct {
    char *data;
    size_t len, cap;
    int failed; /* out of memory */
} Out;

static inline int
reserve(Out *out, size_t more)
{
    if (out->failed) {
        return -1;
    }
    if (out->len + more <= out->cap) {
        return 0;
    }
    size_t cap = out->cap ? out->cap : 4096;
    while (cap < out->len + more) {
        cap *= 2;
    }
    char *data = realloc(out->data, cap);
    if (data == NULL) {
        out->failed = 1;
        return -1;
    }
    out->data = data;
    out->cap = cap;
    return 0;
}

static inline void
put(Out *out, const char *s, size_t n)
{
    if (n > 0 && reserve(out, n) == 0) { /* n == 0: out->data may still be NULL, which memcpy must not be given */
        memcpy(out->data + out->len, s, n);
        out->len += n;
    }
}

#define PUT_LITERAL(out, s) put((out), (s), sizeof(s) - 1)

/* ---- msgpack reading ---- */

static inline int
need(const Cursor *c, size_t n)
{
    return (size_t)(c->end - c->p) >= n;
}

static inline uint64_t
be(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++) {
        v = (v << 8) | p[i];
    }
    return v;
}

/* An integer; BAD if the next value is anything else (a bool is not an integer). */
static inline int
read_int(Cursor *c, i128 *out)
{
    if (!need(c, 1)) {
        return BAD;
    }
    uint8_t b = *c->p;
    if (b <= 0x7f) {
        *out = b;
        c->p += 1;
        return OK;
    }
    if (b >= 0xe0) {
        *out = (int8_t)b;
        c->p += 1;
        return OK;
    }
    int size;
    int is_signed;
    switch (b) {
    case 0xcc: size = 1; is_signed = 0; break;
    case 0xcd: size = 2; is_signed = 0; break;
    case 0xce: size = 4; is_signed = 0; break;
    case 0xcf: size = 8; is_signed = 0; break;
    case 0xd0: size = 1; is_signed = 1; break;
    case 0xd1: size = 2; is_signed = 1; break;
    case 0xd2: size = 4; is_signed = 1; break;
    case 0xd3: size = 8; is_signed = 1; break;
    default: return BAD;
    }
    if (!need(c, 1 + (size_t)size)) {
        return BAD;
    }
    uint64_t v = be(c->p + 1, size);
    if (is_signed) {
        int shift = 64 - 8 * size;
        *out = (int64_t)(v << shift) >> shift;
    }
    else {
        *out = v;
    }
    c->p += 1 + size;
    return OK;
}

/* The length of an array (0x90-0x9f, 0xdc, 0xdd) or a map (0x80-0x8f, 0xde, 0xdf); BAD if not that container. */
static inline int
read_container(Cursor *c, int map, uint32_t *n)
{
    if (!need(c, 1)) {
        return BAD;
    }
    uint8_t b = *c->p;
    uint8_t fix = map ? 0x80 : 0x90;
    if ((b & 0xf0) == fix) {
        *n = b & 0x0f;
        c->p += 1;
        return OK;
    }
    uint8_t b16 = map ? 0xde : 0xdc;
    int size = b == b16 ? 2 : b == b16 + 1 ? 4 : 0;
    if (!size || !need(c, 1 + (size_t)size)) {
        return BAD;
    }
    *n = (uint32_t)be(c->p + 1, size);
    c->p += 1 + size;
    return OK;
}

/* The length of a str (0xa0-0xbf, 0xd9-0xdb), or -1 if the next value is not one (or is cut short). */
static inline int64_t
str_length(Cursor *c)
{
    if (!need(c, 1)) {
        return -1;
    }
    uint8_t b = *c->p;
    int size;
    uint64_t n;
    if ((b & 0xe0) == 0xa0) {
        size = 0;
        n = b & 0x1f;
    }
    else if (b >= 0xd9 && b <= 0xdb) {
        size = 1 << (b - 0xd9);
        if (!need(c, 1 + (size_t)size)) {
            return -1;
        }
        n = be(c->p + 1, size);
    }
    else {
        return -1;
    }
    if (!need(c, 1 + (size_t)size + n)) {
        return -1;
    }
    c->p += 1 + size;
    return (int64_t)n;
}

/* Whether s[0:n] is UTF-8 as Python's strict decoder takes it: no overlong forms, no surrogates, nothing past
   U+10FFFF. */
static inline int
is_utf8(const uint8_t *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        uint8_t b = s[i];
        if (b < 0x80) {
            uint64_t word;
            /* ASCII eight bytes at a time (most texts are: names, ids, hex digits) */
            while (i + 8 <= n && (memcpy(&word, s + i, 8), (word & 0x8080808080808080ULL) == 0)) {
                i += 8;
            }
            if (i < n && s[i] < 0x80) {
                i++;
            }
            continue;
        }
        size_t len;
        uint32_t min, cp;
        if ((b & 0xe0) == 0xc0) { len = 2; min = 0x80; cp = b & 0x1f; }
        else if ((b & 0xf0) == 0xe0) { len = 3; min = 0x800; cp = b & 0x0f; }
        else if ((b & 0xf8) == 0xf0) { len = 4; min = 0x10000; cp = b & 0x07; }
        else return 0;
        if (i + len > n) {
            return 0;
        }
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xc0) != 0x80) {
                return 0;
            }
            cp = (cp << 6) | (s[i + k] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
            return 0;
        }
        i += len;
    }
    return 1;
}

/* The head of the value under p, with room (>= 1) bytes left, for one whose size its head gives without a container's
   items: a number past the fixints, a bin, an ext, a str 8/16/32. OK with the head's size in *head, the size of the
   bytes after it in *n and whether it is an extension in *ext (its code: the head's last byte), the whole value checked
   to be within room; BAD for a value cut short or another first byte (0xc1, never used; the one-byte values, fixstrs
   and containers, which the callers take first). What skip() and _match.c's walk() share: one reads recursively, the
   other iteratively. */
static inline int
value_head(const uint8_t *p, size_t room, size_t *head, uint64_t *n, int *ext)
{
    *n = 0;
    *ext = 0;
    switch (*p) {
    case 0xcc: case 0xd0: *head = 2; break;
    case 0xcd: case 0xd1: *head = 3; break;
    case 0xca: case 0xce: case 0xd2: *head = 5; break;
    case 0xcb: case 0xcf: case 0xd3: *head = 9; break;
    case 0xd4: *head = 2; *n = 1; *ext = 1; break; /* fixext: type, then 1 to 16 bytes */
    case 0xd5: *head = 2; *n = 2; *ext = 1; break;
    case 0xd6: *head = 2; *n = 4; *ext = 1; break;
    case 0xd7: *head = 2; *n = 8; *ext = 1; break;
    case 0xd8: *head = 2; *n = 16; *ext = 1; break;
    case 0xc4: case 0xd9: *head = 2; if (room < 2) return BAD; *n = p[1]; break;
    case 0xc5: case 0xda: *head = 3; if (room < 3) return BAD; *n = be(p + 1, 2); break;
    case 0xc6: case 0xdb: *head = 5; if (room < 5) return BAD; *n = be(p + 1, 4); break;
    case 0xc7: *head = 3; if (room < 3) return BAD; *n = p[1]; *ext = 1; break;
    case 0xc8: *head = 4; if (room < 4) return BAD; *n = be(p + 1, 2); *ext = 1; break;
    case 0xc9: *head = 6; if (room < 6) return BAD; *n = be(p + 1, 4); *ext = 1; break;
    default: return BAD;
    }
    return room < *head || room - *head < *n ? BAD : OK;
}

static inline int skip(Cursor *c, int depth);

static inline int
skip_items(Cursor *c, int map, int depth)
{
    uint32_t items;
    if (read_container(c, map, &items) != OK) {
        return BAD;
    }
    for (uint32_t i = 0; i < items; i++) {
        /* a map key msgpack-python cannot hash (an array, a map) makes it refuse the payload */
        if (map && (!need(c, 1) || (*c->p & 0xe0) == 0x80 || (*c->p >= 0xdc && *c->p <= 0xdf))) {
            return BAD;
        }
        if (map && skip(c, depth + 1) != OK) {
            return BAD;
        }
        if (skip(c, depth + 1) != OK) {
            return BAD;
        }
    }
    return OK;
}

/* Skip one value, checked as msgpack-python would read it (strings UTF-8, hashable map keys, a timestamp extension
   of a timestamp's size); BAD if it would refuse it, or if it nests deeper than MAX_DEPTH (the Python walk decides). */
static inline int
skip(Cursor *c, int depth)
{
    if (!need(c, 1) || depth > MAX_DEPTH) {
        return BAD;
    }
    uint8_t b = *c->p;
    if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) {
        c->p += 1;
        return OK;
    }
    if ((b & 0xe0) == 0xa0 || (b >= 0xd9 && b <= 0xdb)) {
        int64_t n = str_length(c);
        if (n < 0 || !is_utf8(c->p, (size_t)n)) {
            return BAD;
        }
        c->p += n;
        return OK;
    }
    if ((b & 0xf0) == 0x80 || b == 0xde || b == 0xdf) {
        return skip_items(c, 1, depth);
    }
    if ((b & 0xf0) == 0x90 || b == 0xdc || b == 0xdd) {
        return skip_items(c, 0, depth);
    }
    size_t head;
    uint64_t n;
    int ext;
    if (value_head(c->p, (size_t)(c->end - c->p), &head, &n, &ext) != OK) {
        return BAD;
    }
    if (ext && (int8_t)c->p[head - 1] < -1) {
        return BAD; /* msgpack-python's ExtType takes codes 0 to 127, and -1 is the timestamp: it refuses the rest */
    }
    if (ext && (int8_t)c->p[head - 1] == -1) { /* a timestamp: msgpack-python checks its size and nanoseconds */
        const uint8_t *data = c->p + head;
        if ((n != 4 && n != 8 && n != 12) || (n == 8 && (be(data, 8) >> 34) > 999999999) ||
            (n == 12 && be(data, 4) > 999999999)) {
            return BAD;
        }
    }
    c->p += head + n;
    return OK;
}

/* ---- a frame's columns ---- */

enum { KIND, NAME, TS, DUR, ARGS, COLUMNS };

/* The payload as the five columns of `count` values each, every value checked by skip(); column[which] is where the
   values of kind, name, ts, dur and args start (column_of[which]: where each is in the payload). BAD: msgpack-python
   would refuse the payload, or it is not five arrays of `count` values, or bytes trail them. */
static inline int
read_columns(const uint8_t *payload, size_t payload_len, Py_ssize_t count, const int column_of[COLUMNS],
             Cursor column[COLUMNS])
{
    Cursor c = {payload, payload + payload_len};
    uint32_t columns;
    if (read_container(&c, 0, &columns) != OK || columns != COLUMNS) {
        return BAD;
    }
    for (int i = 0; i < COLUMNS; i++) {
        uint32_t n;
        if (read_container(&c, 0, &n) != OK || n != (uint64_t)count) {
            return BAD;
        }
        for (int which = 0; which < COLUMNS; which++) {
            if (column_of[which] == i) {
                column[which] = c;
            }
        }
        for (uint32_t k = 0; k < n; k++) {
            if (skip(&c, 0) != OK) {
                return BAD;
            }
        }
    }
    if (c.p != c.end) {
        return BAD; /* trailing bytes: msgpack-python refuses them */
    }
    return OK;
}

/* ---- a frame's events, as the snapshot writers read them ---- */

/* The window a snapshot asks for: each bound holds only when given. */
typedef struct {
    i128 since_ns, until_ns;
    int has_since, has_until;
} Window;

typedef struct {
    i128 kind, name, ts, dur;
    Cursor args; /* where its args' value starts (already checked by skip()) */
    int code;    /* its kind's code in the caller's table: CODE_SKIP, CODE_PYTHON, 'X', 'i', 'C' or 'P' */
} Event;

/* The next event of a frame's columns (each moved past it), its kind's code from `kinds`. BAD: the Python walk refuses
   a frame whose kind, name, ts or dur is not an integer, msgpack-python its args; or `kinds` gives a code not above (a
   table the caller got wrong: the Python side takes the frame). */
static inline int
next_event(Cursor column[COLUMNS], const uint8_t *kinds, Py_ssize_t kinds_len, Event *e)
{
    if (read_int(&column[KIND], &e->kind) != OK || read_int(&column[NAME], &e->name) != OK ||
        read_int(&column[TS], &e->ts) != OK || read_int(&column[DUR], &e->dur) != OK) {
        return BAD;
    }
    e->args = column[ARGS];
    if (skip(&column[ARGS], 0) != OK) {
        return BAD;
    }
    int code = e->kind >= 0 && e->kind < kinds_len ? kinds[(Py_ssize_t)e->kind] : CODE_SKIP;
    if (code != CODE_SKIP && code != CODE_PYTHON && code != 'X' && code != 'i' && code != 'C' && code != 'P') {
        return BAD;
    }
    e->code = code;
    return OK;
}

/* Whether an event at `wall` is in the window: it takes what overlaps it (read/selection.py, EventFilter.in_window),
   a span that ends after `since`, a point at or after it; anything that starts before `until`. */
static inline int
in_window(const Window *w, const Event *e, i128 wall)
{
    i128 lasting = e->code == 'X' ? e->dur : 0;
    return !((w->has_since && wall < w->since_ns && wall + lasting <= w->since_ns) ||
             (w->has_until && wall >= w->until_ns));
}

/* ---- arguments ---- */

/* A frame's event count and the order of its columns, as the Python side passes them (``count``, a tuple of 5 column
   indices naming each column once): 0, or -1 with an exception set. */
static inline int
frame_shape(PyObject *count_arg, PyObject *columns_arg, Py_ssize_t *count, int column_of[COLUMNS])
{
    *count = PyLong_AsSsize_t(count_arg);
    if (*count < 0) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_ValueError, "count must be at least 0");
        }
        return -1;
    }
    if (!PyTuple_Check(columns_arg) || PyTuple_GET_SIZE(columns_arg) != COLUMNS) {
        PyErr_SetString(PyExc_TypeError, "columns must be a tuple of 5 ints");
        return -1;
    }
    for (int i = 0; i < COLUMNS; i++) {
        long column = PyLong_AsLong(PyTuple_GET_ITEM(columns_arg, i));
        if (column == -1 && PyErr_Occurred()) {
            return -1;
        }
        if (column < 0 || column >= COLUMNS) {
            PyErr_Format(PyExc_ValueError, "column index %ld is not 0 to 4", column);
            return -1;
        }
        for (int j = 0; j < i; j++) {
            if (column_of[j] == (int)column) {
                PyErr_SetString(PyExc_ValueError, "columns must name each of the 5 columns once");
                return -1;
            }
        }
        column_of[i] = (int)column;
    }
    return 0;
}

static inline int
as_i128(PyObject *value, const char *what, i128 *out, int *given)
{
    if (value == Py_None && given != NULL) {
        *given = 0;
        *out = 0;
        return 0;
    }
    int overflow;
    long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (v == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (overflow) {
        PyErr_Format(PyExc_OverflowError, "%s does not fit in 64 bits", what);
        return -1;
    }
    *out = v;
    if (given != NULL) {
        *given = 1;
    }
    return 0;
}

/* ---- flow arrows (export/flows.py, which defines them) ---- */

typedef struct {
    int leaving, arriving; /* whether there is a flow leaving the span, and one arriving */
    uint64_t out, in;      /* their ids */
} Flows;

static inline int
key_is(const uint8_t *key, int64_t n, const char *name)
{
    return (size_t)n == strlen(name) && memcmp(key, name, (size_t)n) == 0;
}

/* Whether s[0:n] is n lowercase hex digits, fed as bytes (two digits each) to the FNV-1a hash h. */
static inline int
hash_hex(uint64_t *h, const uint8_t *s, int64_t n, int64_t digits)
{
    if (n != digits) {
        return 0;
    }
    for (int64_t i = 0; i < n; i += 2) {
        int v = 0;
        for (int k = 0; k < 2; k++) {
            uint8_t c = s[i + k];
            int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
            if (d < 0) {
                return 0;
            }
            v = v << 4 | d;
        }
        *h = (*h ^ (uint64_t)v) * 1099511628211ULL;
    }
    return 1;
}

/* The flow id of the arrow leaving span `span` (16 digits) of trace `trace` (32); 0: not lowercase hex ids. */
static inline uint64_t
flow_id(const uint8_t *trace, int64_t trace_len, const uint8_t *span, int64_t span_len)
{
    uint64_t h = 14695981039346656037ULL;
    if (!hash_hex(&h, trace, trace_len, 32) || !hash_hex(&h, span, span_len, 16)) {
        return 0;
    }
    return h ? h : 1;
}

/* The flows of a span whose args are the map under `args` (checked by skip() already; the cursor is a copy): OK,
   or DEFER when the Python writer decides (links, a key that is not a string). A key given twice counts with its
   last value, as msgpack-python keeps it. */
static inline int
span_flows(Cursor args, Flows *flows)
{
    memset(flows, 0, sizeof(*flows));
    uint32_t items;
    if (read_container(&args, 1, &items) != OK) {
        return DEFER;
    }
    const uint8_t *kind = NULL, *trace = NULL, *span = NULL, *parent = NULL;
    int64_t kind_len = 0, trace_len = 0, span_len = 0, parent_len = 0;
    for (uint32_t i = 0; i < items; i++) {
        int64_t n = str_length(&args);
        if (n < 0) {
            return DEFER;
        }
        const uint8_t *key = args.p;
        args.p += n;
        if (key_is(key, n, "links")) {
            return DEFER;
        }
        const uint8_t **value = key_is(key, n, "kind")             ? &kind
                                : key_is(key, n, "trace_id")       ? &trace
                                : key_is(key, n, "span_id")        ? &span
                                : key_is(key, n, "parent_span_id") ? &parent
                                                                   : NULL;
        int64_t *value_len = value == &kind ? &kind_len : value == &trace ? &trace_len : value == &span ? &span_len
                                                                                         : &parent_len;
        if (value == NULL) {
            if (skip(&args, 1) != OK) {
                return DEFER;
            }
            continue;
        }
        Cursor at = args;
        int64_t m = str_length(&at);
        if (m < 0) { /* not a string: as if absent */
            *value = NULL;
            if (skip(&args, 1) != OK) {
                return DEFER;
            }
            continue;
        }
        *value = at.p;
        *value_len = m;
        args.p = at.p + m;
    }
    if (kind == NULL) {
        return OK;
    }
    int leaving = key_is(kind, kind_len, "client") || key_is(kind, kind_len, "producer");
    int arriving = key_is(kind, kind_len, "server") || key_is(kind, kind_len, "consumer");
    if (trace != NULL && leaving && span != NULL) {
        flows->out = flow_id(trace, trace_len, span, span_len);
        flows->leaving = flows->out != 0;
    }
    if (trace != NULL && arriving && parent != NULL) {
        flows->in = flow_id(trace, trace_len, parent, parent_len);
        flows->arriving = flows->in != 0;
    }
    return OK;
}

#endif
