/* Chrome trace event JSON straight from a stored EVENTS frame's msgpack payload, in C, with the GIL released.

Optional: when this module is not built (no compiler at install time) or is turned off with RINGTRACE_PURE_PYTHON=1,
the collector writes every event through its pure-Python event walk (read/event_walk.py, export/chrome.py). That walk defines the
behaviour; this module takes only the common events, and the tests hold both to the same JSON, event for event.

events_json() reads a payload of the five columns (kind, name, ts, dur, args) and writes each event whose kind is a
span, an instant or a counter, and whose args are a map of string keys (or nil), as one JSON object, in the key order
export/chrome.py writes. Every other event (a message, a marker, source activity, an async slice, a typed event's values,
args holding bytes, an extension type or a non-string key) is left to the Python walk: it is flagged in the returned
`deferred` map, one byte per event. A payload msgpack-python would refuse (not the five arrays of `count` values, a
string that is not UTF-8, a map key it cannot hash, an extension code below -1, trailing bytes), or one nested deeper
than MAX_DEPTH, returns None: the Python walk reads the frame and decides, as it would alone.

Why the GIL can be released: the payload, the kind codes, the escaped names and their spans are buffers held (and
locked against resizing) for the call; nothing else is touched until the output bytes are made. Numbers are written
in C: integers exactly; `ts` and `dur`, which are ns / 1000, as exact decimals (a reader parses them to the same
double as the Python walk's division); floats with the fewest of 15, 16 or 17 significant digits that read back to
the same double (orjson's shortest form may have fewer digits, never another value); non-finite floats as null, as
orjson writes them. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <locale.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
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
/* 'X', 'i', 'C': a span, an instant, a counter */

enum { OK = 0, DEFER = 1, BAD = -1 };

typedef struct {
    const uint8_t *p, *end;
} Cursor;

typedef struct {
    char *data;
    size_t len, cap;
    int failed; /* out of memory */
} Out;

static int
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

static void
put_u128(Out *out, unsigned __int128 v)
{
    char digits[40];
    int n = 0;
    do {
        digits[sizeof(digits) - 1 - n++] = (char)('0' + (int)(v % 10));
        v /= 10;
    } while (v);
    put(out, digits + sizeof(digits) - n, (size_t)n);
}

static void
put_int(Out *out, i128 v)
{
    if (v < 0) {
        PUT_LITERAL(out, "-");
        put_u128(out, (unsigned __int128)(-v));
    }
    else {
        put_u128(out, (unsigned __int128)v);
    }
}

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

/* snprintf and strtod follow the thread's locale, which transcode() sets to "C" (see events_json): a decimal point,
   whatever the program's locale, and no read of the global locale that another thread may be changing. */
static void
put_double(Out *out, double v)
{
    if (!isfinite(v)) {
        PUT_LITERAL(out, "null");
        return;
    }
    char text[40];
    int n = 0;
    for (int digits = 15; digits <= 17; digits++) {
        n = snprintf(text, sizeof(text), "%.*g", digits, v);
        if (digits == 17 || strtod(text, NULL) == v) {
            break;
        }
    }
    put(out, text, (size_t)n);
    if (strpbrk(text, ".e") == NULL) {
        PUT_LITERAL(out, ".0");
    }
}

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
static int
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
static int
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
static int64_t
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
static int
is_utf8(const uint8_t *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        uint8_t b = s[i];
        if (b < 0x80) {
            i++;
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

static int skip(Cursor *c, int depth);

static int
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
static int
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
    uint64_t n = 0;
    int ext = 0;
    switch (b) {
    case 0xcc: case 0xd0: head = 2; break;
    case 0xcd: case 0xd1: head = 3; break;
    case 0xca: case 0xce: case 0xd2: head = 5; break;
    case 0xcb: case 0xcf: case 0xd3: head = 9; break;
    case 0xd4: head = 2; n = 1; ext = 1; break; /* fixext: type, then 1 to 16 bytes */
    case 0xd5: head = 2; n = 2; ext = 1; break;
    case 0xd6: head = 2; n = 4; ext = 1; break;
    case 0xd7: head = 2; n = 8; ext = 1; break;
    case 0xd8: head = 2; n = 16; ext = 1; break;
    case 0xc4: head = 2; if (!need(c, 2)) return BAD; n = c->p[1]; break;
    case 0xc5: head = 3; if (!need(c, 3)) return BAD; n = be(c->p + 1, 2); break;
    case 0xc6: head = 5; if (!need(c, 5)) return BAD; n = be(c->p + 1, 4); break;
    case 0xc7: head = 3; if (!need(c, 3)) return BAD; n = c->p[1]; ext = 1; break;
    case 0xc8: head = 4; if (!need(c, 4)) return BAD; n = be(c->p + 1, 2); ext = 1; break;
    case 0xc9: head = 6; if (!need(c, 6)) return BAD; n = be(c->p + 1, 4); ext = 1; break;
    default: return BAD; /* 0xc1, never used */
    }
    if (!need(c, head + n)) {
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

/* ---- JSON writing ---- */

/* A msgpack str (UTF-8, checked by skip()) as a JSON string, escaped as orjson escapes: the quote, the backslash
   and control characters. */
static void
put_string(Out *out, const uint8_t *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    PUT_LITERAL(out, "\"");
    size_t run = 0; /* the start of the bytes not written yet */
    for (size_t i = 0; i < n; i++) {
        uint8_t b = s[i];
        if (b >= 0x20 && b != '"' && b != '\\') {
            continue;
        }
        put(out, (const char *)s + run, i - run);
        char esc[6] = {'\\', 0, 0, 0, 0, 0};
        size_t len = 2;
        switch (b) {
        case '"': esc[1] = '"'; break;
        case '\\': esc[1] = '\\'; break;
        case '\b': esc[1] = 'b'; break;
        case '\f': esc[1] = 'f'; break;
        case '\n': esc[1] = 'n'; break;
        case '\r': esc[1] = 'r'; break;
        case '\t': esc[1] = 't'; break;
        default:
            esc[1] = 'u'; esc[2] = '0'; esc[3] = '0'; esc[4] = hex[b >> 4]; esc[5] = hex[b & 15];
            len = 6;
        }
        put(out, esc, len);
        run = i + 1;
    }
    put(out, (const char *)s + run, n - run);
    PUT_LITERAL(out, "\"");
}

/* One msgpack value as JSON. DEFER: a value JSON does not hold as the Python walk writes it (bytes, an extension
   type, a map key that is not a string, too deep); the cursor is then anywhere. */
static int
put_value(Cursor *c, Out *out, int depth)
{
    if (!need(c, 1)) {
        return BAD;
    }
    uint8_t b = *c->p;
    switch (b) {
    case 0xc0: c->p++; PUT_LITERAL(out, "null"); return OK;
    case 0xc2: c->p++; PUT_LITERAL(out, "false"); return OK;
    case 0xc3: c->p++; PUT_LITERAL(out, "true"); return OK;
    case 0xca: {
        if (!need(c, 5)) return BAD;
        uint32_t bits = (uint32_t)be(c->p + 1, 4);
        float f;
        memcpy(&f, &bits, 4);
        c->p += 5;
        put_double(out, (double)f);
        return OK;
    }
    case 0xcb: {
        if (!need(c, 9)) return BAD;
        uint64_t bits = be(c->p + 1, 8);
        double d;
        memcpy(&d, &bits, 8);
        c->p += 9;
        put_double(out, d);
        return OK;
    }
    }
    if (b <= 0x7f || b >= 0xe0 || (b >= 0xcc && b <= 0xd3)) {
        i128 v;
        if (read_int(c, &v) != OK) {
            return BAD;
        }
        put_int(out, v);
        return OK;
    }
    if ((b & 0xe0) == 0xa0 || (b >= 0xd9 && b <= 0xdb)) {
        int64_t n = str_length(c);
        if (n < 0) {
            return BAD;
        }
        put_string(out, c->p, (size_t)n);
        c->p += n;
        return OK;
    }
    int map = (b & 0xf0) == 0x80 || b == 0xde || b == 0xdf;
    int array = (b & 0xf0) == 0x90 || b == 0xdc || b == 0xdd;
    if (!map && !array) {
        return DEFER; /* bin, ext (or 0xc1, which the Python walk refuses) */
    }
    if (depth >= MAX_DEPTH) {
        return DEFER;
    }
    uint32_t items;
    if (read_container(c, map, &items) != OK) {
        return BAD;
    }
    put(out, map ? "{" : "[", 1);
    for (uint32_t i = 0; i < items; i++) {
        if (i) {
            PUT_LITERAL(out, ",");
        }
        if (map) {
            int64_t n = str_length(c);
            if (n < 0) {
                return need(c, 1) ? DEFER : BAD;
            }
            put_string(out, c->p, (size_t)n);
            c->p += n;
            PUT_LITERAL(out, ":");
        }
        int status = put_value(c, out, depth + 1);
        if (status != OK) {
            return status;
        }
    }
    put(out, map ? "}" : "]", 1);
    return OK;
}

/* ---- one frame ---- */

enum { KIND, NAME, TS, DUR, ARGS, COLUMNS };

typedef struct {
    /* inputs */
    const uint8_t *payload;
    size_t payload_len;
    Py_ssize_t count;
    int column_of[COLUMNS]; /* where each of kind, name, ts, dur, args is in the payload */
    i128 first_ts_ns, offset_ns, origin_ns, since_ns, until_ns;
    int has_since, has_until;
    const uint8_t *kinds;
    Py_ssize_t kinds_len;
    const char *names;
    Py_ssize_t names_len;
    const uint8_t *spans; /* per string id: int64 start, end in names (-1: no such string), any alignment */
    Py_ssize_t spans_len;
    const char *ids;      /* ,"pid":P,"tid":T */
    Py_ssize_t ids_len;
    /* outputs */
    Out out;
    uint8_t *deferred;
    Py_ssize_t deferred_count, shown, skipped, before_origin;
} Frame;

/* BAD: the payload is not what the Python walk would read as this frame's five columns. */
static int
transcode(Frame *f)
{
    Cursor c = {f->payload, f->payload + f->payload_len};
    uint32_t columns;
    if (read_container(&c, 0, &columns) != OK || columns != COLUMNS) {
        return BAD;
    }
    Cursor column[COLUMNS];
    for (int i = 0; i < COLUMNS; i++) {
        uint32_t n;
        if (read_container(&c, 0, &n) != OK || n != (uint64_t)f->count) {
            return BAD;
        }
        for (int which = 0; which < COLUMNS; which++) {
            if (f->column_of[which] == i) {
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
    int first = 1;
    for (Py_ssize_t i = 0; i < f->count; i++) {
        i128 kind, name, ts, dur;
        if (read_int(&column[KIND], &kind) != OK || read_int(&column[NAME], &name) != OK ||
            read_int(&column[TS], &ts) != OK || read_int(&column[DUR], &dur) != OK) {
            return BAD; /* the Python walk refuses a frame whose kind, name, ts or dur is not an integer */
        }
        Cursor args = column[ARGS];
        if (skip(&column[ARGS], 0) != OK) {
            return BAD;
        }
        int code = kind >= 0 && kind < f->kinds_len ? f->kinds[(Py_ssize_t)kind] : CODE_SKIP;
        if (code != CODE_SKIP && code != CODE_PYTHON && code != 'X' && code != 'i' && code != 'C') {
            return BAD; /* a table the caller got wrong: the Python walk takes the frame */
        }
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
        if ((f->has_since && wall < f->since_ns) || (f->has_until && wall >= f->until_ns)) {
            continue; /* outside the window asked for */
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
        put(&f->out, f->ids, (size_t)f->ids_len);
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
        PUT_LITERAL(&f->out, "}");
        first = 0;
        f->shown++;
        if (wall < f->origin_ns) {
            f->before_origin++;
        }
    }
    return OK;
}

/* transcode() with this thread's locale set to "C" for snprintf and strtod (the program's own is left as it is);
   BAD, for the Python walk to decide, when no locale object can be had. */
static int
transcode_in_c_locale(Frame *f)
{
    locale_t c_locale = newlocale(LC_ALL_MASK, "C", (locale_t)0);
    if (c_locale == (locale_t)0) {
        return BAD;
    }
    locale_t previous = uselocale(c_locale);
    int status = transcode(f);
    uselocale(previous);
    freelocale(c_locale);
    return status;
}

static int
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

PyDoc_STRVAR(events_json_doc,
"events_json(payload, count, columns, first_ts_ns, offset_ns, origin_ns, since_ns, until_ns, kinds, names, spans, ids)\n"
"--\n\n"
"The Chrome JSON of a stored EVENTS frame's common events: (json, deferred, shown, skipped, before_origin), or None\n"
"when the Python walk must read the frame. json: the events' objects joined by commas; deferred: one byte per event,\n"
"1 for each left to the Python walk (None if none is); skipped: events counted as undecodable.\n"
"columns: where kind, name, ts, dur and args are among the payload's 5 columns; kinds: a code per kind id (0 not\n"
"shown, 1 the Python walk's, or the phase letter X, i, C); names: JSON strings end to end; spans: int64 start and end\n"
"in names per string id (-1 for none); ids: the ,\"pid\":P,\"tid\":T part.");

static PyObject *
events_json(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 12) {
        PyErr_Format(PyExc_TypeError, "events_json() takes 12 arguments (%zd given)", nargs);
        return NULL;
    }
    Frame f;
    memset(&f, 0, sizeof(f));
    f.count = PyLong_AsSsize_t(args[1]);
    if (f.count < 0) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_ValueError, "count must be at least 0");
        }
        return NULL;
    }
    if (!PyTuple_Check(args[2]) || PyTuple_GET_SIZE(args[2]) != COLUMNS) {
        PyErr_SetString(PyExc_TypeError, "columns must be a tuple of 5 ints");
        return NULL;
    }
    for (int i = 0; i < COLUMNS; i++) {
        long column = PyLong_AsLong(PyTuple_GET_ITEM(args[2], i));
        if (column == -1 && PyErr_Occurred()) {
            return NULL;
        }
        if (column < 0 || column >= COLUMNS) {
            PyErr_Format(PyExc_ValueError, "column index %ld is not 0 to 4", column);
            return NULL;
        }
        f.column_of[i] = (int)column;
    }
    for (int i = 0; i < COLUMNS; i++) {
        for (int j = 0; j < i; j++) {
            if (f.column_of[i] == f.column_of[j]) {
                PyErr_SetString(PyExc_ValueError, "columns must name each of the 5 columns once");
                return NULL;
            }
        }
    }
    if (as_i128(args[3], "first_ts_ns", &f.first_ts_ns, NULL) < 0 ||
        as_i128(args[4], "offset_ns", &f.offset_ns, NULL) < 0 ||
        as_i128(args[5], "origin_ns", &f.origin_ns, NULL) < 0 ||
        as_i128(args[6], "since_ns", &f.since_ns, &f.has_since) < 0 ||
        as_i128(args[7], "until_ns", &f.until_ns, &f.has_until) < 0) {
        return NULL;
    }
    Py_buffer views[5];
    PyObject *sources[5] = {args[0], args[8], args[9], args[10], args[11]};
    int held = 0;
    PyObject *result = NULL;
    for (; held < 5; held++) {
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

    f.deferred = calloc((size_t)f.count + 1, 1);
    if (f.deferred == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    int status;
    Py_BEGIN_ALLOW_THREADS
    status = transcode_in_c_locale(&f);
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
