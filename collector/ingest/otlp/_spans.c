/* OTLP spans as native records, in C: read straight from the protobuf bytes of an ExportTraceServiceRequest, each span
becomes the records spans.py's _add_span makes of it (its slice and its events' instants), with its attributes, ids and
parent (fast_spans.py; the pure-Python way, protobuf's decoding and spans.py, defines the behaviour, and the tests hold
both to the same records).

Only the common shapes are read here: a request with anything else (an attribute's value that is an array, a map; a
span the Python way refuses; a field seen twice where protobuf would merge the two; bytes that are not protobuf) gives
None, and the Python way takes the whole request. The body is untrusted: every length is checked against what is left.

Optional: when this module is not built, or RINGTRACE_PURE_PYTHON=1 is set, the collector runs the Python way. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define SPAN_KIND 0    /* ringtrace.wire.model.SPAN */
#define INSTANT_KIND 1 /* ringtrace.wire.model.INSTANT */

/* Returned by a reader: FALLBACK (not a shape read here: the Python way decides, no Python error set) or ERROR (a
   Python error set: memory). */
#define OK 0
#define FALLBACK 1
#define ERROR 2

typedef struct {
    const uint8_t *p;
    const uint8_t *end;
} Reader;

typedef struct {
    uint32_t field;
    uint32_t wire;
    uint64_t number;         /* a varint's, fixed64's or fixed32's value */
    const uint8_t *bytes;    /* a length-delimited field's bytes */
    Py_ssize_t size;
} Field;

static PyObject *kind_names[6]; /* Span.SpanKind's names, lower case, without SPAN_KIND_ */
static PyObject *status_names[3];
static PyObject *key_trace_id, *key_span_id, *key_kind, *key_parent, *key_status, *key_status_message, *key_scope,
    *key_links, *key_link_attributes, *empty_text, *span_kind, *instant_kind;

static int
read_varint(Reader *r, uint64_t *out)
{
    uint64_t value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (r->p >= r->end) return FALLBACK;
        uint8_t byte = *r->p++;
        value |= (uint64_t)(byte & 0x7f) << shift;
        if (!(byte & 0x80)) {
            *out = value;
            return OK;
        }
    }
    return FALLBACK;
}

/* The next field of the message in `r`: 1 read, 0 at its end, -1 not protobuf (or a group: not read here). */
static int
next_field(Reader *r, Field *f)
{
    uint64_t tag, size;
    if (r->p >= r->end) return 0;
    if (read_varint(r, &tag) != OK || tag >> 32 || (tag >> 3) == 0) return -1;
    f->field = (uint32_t)(tag >> 3);
    f->wire = (uint32_t)(tag & 7);
    switch (f->wire) {
    case 0:
        return read_varint(r, &f->number) == OK ? 1 : -1;
    case 1:
        if (r->end - r->p < 8) return -1;
        f->number = 0;
        for (int i = 7; i >= 0; i--) f->number = f->number << 8 | r->p[i];
        r->p += 8;
        return 1;
    case 5:
        if (r->end - r->p < 4) return -1;
        f->number = (uint64_t)r->p[0] | (uint64_t)r->p[1] << 8 | (uint64_t)r->p[2] << 16 | (uint64_t)r->p[3] << 24;
        r->p += 4;
        return 1;
    case 2:
        if (read_varint(r, &size) != OK || size > (uint64_t)(r->end - r->p)) return -1;
        f->bytes = r->p;
        f->size = (Py_ssize_t)size;
        r->p += size;
        return 1;
    default:
        return -1;
    }
}

/* The field's UTF-8 text, or NULL: FALLBACK (not UTF-8) or ERROR in *status. */
static PyObject *
text_of(const Field *f, int *status)
{
    PyObject *text = PyUnicode_DecodeUTF8((const char *)f->bytes, f->size, "strict");
    if (text == NULL) {
        if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
            PyErr_Clear();
            *status = FALLBACK;
        } else {
            *status = ERROR;
        }
    }
    return text;
}

static PyObject *
hex_of(const uint8_t *bytes, Py_ssize_t size)
{
    static const char digits[] = "0123456789abcdef";
    PyObject *text = PyUnicode_New(size * 2, 127);
    if (text == NULL) return NULL;
    Py_UCS1 *out = PyUnicode_1BYTE_DATA(text);
    for (Py_ssize_t i = 0; i < size; i++) {
        out[2 * i] = (Py_UCS1)digits[bytes[i] >> 4];
        out[2 * i + 1] = (Py_UCS1)digits[bytes[i] & 15];
    }
    return text;
}

static int array_value(const uint8_t *bytes, Py_ssize_t size, PyObject **out);

/* An AnyValue's value (resources.py's _value) into *out: string, bool, int, double, bytes or None, or a list of those
   where `lists` (an array of arrays, or a map, is left to the Python way). */
static int
any_value(const uint8_t *bytes, Py_ssize_t size, PyObject **out, int lists)
{
    Reader r = {bytes, bytes + size};
    Field f;
    int got, status = OK, seen = 0;
    PyObject *value = NULL;
    while ((got = next_field(&r, &f)) == 1) {
        if (f.field < 1 || f.field > 7) continue;
        if (seen++ || f.field == 6 || (f.field == 5 && !lists)) {  /* (one of the oneof: protobuf keeps the last) */
            Py_XDECREF(value);
            return FALLBACK;
        }
        if (f.field == 1 && f.wire == 2) {
            value = text_of(&f, &status);
        } else if (f.field == 2 && f.wire == 0) {
            value = PyBool_FromLong(f.number != 0);
        } else if (f.field == 3 && f.wire == 0) {
            value = PyLong_FromLongLong((long long)f.number);
        } else if (f.field == 4 && f.wire == 1) {
            double number;
            memcpy(&number, &f.number, sizeof number);
            value = PyFloat_FromDouble(number);
        } else if (f.field == 7 && f.wire == 2) {
            value = PyBytes_FromStringAndSize((const char *)f.bytes, f.size);
        } else if (f.field == 5 && f.wire == 2) {
            if ((status = array_value(f.bytes, f.size, &value)) != OK) return status;
        } else {
            return FALLBACK;
        }
        if (value == NULL) return status == FALLBACK ? FALLBACK : ERROR;
    }
    if (got < 0) {
        Py_XDECREF(value);
        return FALLBACK;
    }
    if (value == NULL) value = Py_NewRef(Py_None);
    *out = value;
    return OK;
}

/* An ArrayValue's values as a list, each one of the plain values. */
static int
array_value(const uint8_t *bytes, Py_ssize_t size, PyObject **out)
{
    Reader r = {bytes, bytes + size};
    Field f;
    int got, status = OK;
    PyObject *list = PyList_New(0), *item = NULL;
    if (list == NULL) return ERROR;
    while ((got = next_field(&r, &f)) == 1) {
        if (f.field != 1) continue;
        if (f.wire != 2) {
            status = FALLBACK;
            break;
        }
        if ((status = any_value(f.bytes, f.size, &item, 0)) != OK) break;
        int appended = PyList_Append(list, item);
        Py_DECREF(item);
        if (appended < 0) {
            status = ERROR;
            break;
        }
    }
    if (status == OK && got < 0) status = FALLBACK;
    if (status != OK) {
        Py_DECREF(list);
        return status == ERROR ? ERROR : FALLBACK;
    }
    *out = list;
    return OK;
}

/* A KeyValue into `into` (resources.py's attributes_of: the last of a key wins, where the first was). */
static int
add_attribute(PyObject *into, const uint8_t *bytes, Py_ssize_t size)
{
    Reader r = {bytes, bytes + size};
    Field f;
    int got, status = OK;
    PyObject *key = NULL, *value = NULL;
    while ((got = next_field(&r, &f)) == 1) {
        if (f.field == 1 && f.wire == 2) {
            Py_XSETREF(key, text_of(&f, &status));
            if (key == NULL) goto done;
        } else if (f.field == 2 && f.wire == 2) {
            if (value != NULL) {
                status = FALLBACK;
                goto done;
            }
            if ((status = any_value(f.bytes, f.size, &value, 1)) != OK) goto done;
        } else if (f.field == 1 || f.field == 2) {
            status = FALLBACK;
            goto done;
        }
    }
    if (got < 0) {
        status = FALLBACK;
        goto done;
    }
    if (key == NULL) key = Py_NewRef(empty_text);
    if (value == NULL) value = Py_NewRef(Py_None);
    status = PyDict_SetItem(into, key, value) < 0 ? ERROR : OK;
done:
    Py_XDECREF(key);
    Py_XDECREF(value);
    return status;
}

/* A string field skipped, checked as protobuf checks it (UTF-8): OK or FALLBACK. */
static int
check_text(const Field *f)
{
    int status = OK;
    PyObject *text;
    if (f->wire != 2) return FALLBACK;
    if ((text = text_of(f, &status)) == NULL) return status;
    Py_DECREF(text);
    return OK;
}

/* A repeated KeyValue field skipped, checked as protobuf checks it (and read only if of the shapes read here). */
static int
check_attribute(const Field *f)
{
    int status;
    PyObject *scratch;
    if (f->wire != 2) return FALLBACK;
    if ((scratch = PyDict_New()) == NULL) return ERROR;
    status = add_attribute(scratch, f->bytes, f->size);
    Py_DECREF(scratch);
    return status;
}

/* Field `f` of a message repeated where protobuf would merge two (a singular message): FALLBACK. */
#define ONCE(seen) do { if ((seen)++) { status = FALLBACK; goto done; } } while (0)

/* "trace id hex/span id hex" of a Link; its attributes into `attributes` (with `*attributed` set if it has any). */
static PyObject *
link_text(const uint8_t *bytes, Py_ssize_t size, int *status, PyObject *attributes, int *attributed)
{
    Reader r = {bytes, bytes + size};
    Field f, ids[2] = {{0}, {0}};
    int got;
    while ((got = next_field(&r, &f)) == 1) {
        if ((f.field == 1 || f.field == 2) && f.wire != 2) break;
        if (f.field == 1 || f.field == 2) ids[f.field - 1] = f;
        int checked = f.field == 3 ? check_text(&f) : OK;
        if (f.field == 4) {
            *attributed = 1;
            checked = f.wire == 2 ? add_attribute(attributes, f.bytes, f.size) : FALLBACK;
        }
        if (checked != OK) {
            *status = checked;
            return NULL;
        }
    }
    if (got != 0) {
        *status = FALLBACK;
        return NULL;
    }
    PyObject *text = PyUnicode_New((ids[0].size + ids[1].size) * 2 + 1, 127);
    if (text == NULL) {
        *status = ERROR;
        return NULL;
    }
    static const char digits[] = "0123456789abcdef";
    Py_UCS1 *out = PyUnicode_1BYTE_DATA(text);
    for (int which = 0; which < 2; which++) {
        for (Py_ssize_t i = 0; i < ids[which].size; i++) {
            *out++ = (Py_UCS1)digits[ids[which].bytes[i] >> 4];
            *out++ = (Py_UCS1)digits[ids[which].bytes[i] & 15];
        }
        if (which == 0) *out++ = '/';
    }
    return text;
}

/* The latest time taken (resources.py's MAX_TIME_NS): what the store's reads show as wall-clock ns. */
#define MAX_TIME_NS ((uint64_t)INT64_MAX)

/* An Event's instant (INSTANT, name, time, time, its attributes with the span's ids) appended to `records`. */
static int
add_event(PyObject *records, const uint8_t *bytes, Py_ssize_t size, PyObject *span_id, PyObject *trace_id)
{
    Reader r = {bytes, bytes + size};
    Field f;
    int got, status = OK;
    uint64_t time = 0;
    PyObject *name = NULL, *args = PyDict_New(), *at = NULL;
    if (args == NULL) return ERROR;
    while ((got = next_field(&r, &f)) == 1) {
        if (f.field == 1 && f.wire == 1) {
            time = f.number;
        } else if (f.field == 2 && f.wire == 2) {
            Py_XSETREF(name, text_of(&f, &status));
            if (name == NULL) goto done;
        } else if (f.field == 3 && f.wire == 2) {
            if ((status = add_attribute(args, f.bytes, f.size)) != OK) goto done;
        } else if (f.field >= 1 && f.field <= 3) {
            status = FALLBACK;
            goto done;
        }
    }
    if (got < 0 || time > MAX_TIME_NS) {  /* (the Python way refuses the span of a time past what is stored) */
        status = FALLBACK;
        goto done;
    }
    if (name == NULL) name = Py_NewRef(empty_text);
    status = ERROR;
    if (PyDict_SetItem(args, key_span_id, span_id) < 0 || PyDict_SetItem(args, key_trace_id, trace_id) < 0) goto done;
    if ((at = PyLong_FromUnsignedLongLong(time)) == NULL) goto done;
    if (PyList_Append(records, instant_kind) < 0 || PyList_Append(records, name) < 0 ||
        PyList_Append(records, at) < 0 || PyList_Append(records, at) < 0 || PyList_Append(records, args) < 0)
        goto done;
    status = OK;
done:
    Py_XDECREF(name);
    Py_XDECREF(args);
    Py_XDECREF(at);
    return status;
}

/* An Event past the span's limit, not kept but checked as protobuf checks it (and as add_event reads it): OK or
   FALLBACK (its time is not checked: the Python way does not check what it drops either). */
static int
check_event(const uint8_t *bytes, Py_ssize_t size)
{
    Reader r = {bytes, bytes + size};
    Field f;
    int got, status = OK;
    while ((got = next_field(&r, &f)) == 1) {
        if (f.field == 2) {
            status = check_text(&f);
        } else if (f.field == 3) {
            status = check_attribute(&f);
        } else if (f.field == 1 && f.wire != 1) {
            status = FALLBACK;
        }
        if (status != OK) return status;
    }
    return got < 0 ? FALLBACK : OK;
}

static uint64_t
big_endian(const Field *f)
{
    uint64_t value = 0;
    for (Py_ssize_t i = 0; i < f->size && i < 8; i++) value = value << 8 | f->bytes[i];
    return value;
}

static int
all_zeros(const Field *f)
{
    for (Py_ssize_t i = 0; i < f->size; i++)
        if (f->bytes[i]) return 0;
    return 1;
}

/* A Span as (records, trace id, span id, parent id) appended to `spans` (spans.py's _add_span). Its attributes are
   its slice's args but the span's own keys (which none of thread.id, thread.name is): the args name its thread. Its
   first `limit` events and links are kept; those past it are checked, not kept, and counted in *dropped. */
static int
add_span(PyObject *spans, const uint8_t *bytes, Py_ssize_t size, PyObject *scope, Py_ssize_t limit,
         Py_ssize_t *dropped)
{
    Reader r = {bytes, bytes + size};
    Field f, trace = {0}, span = {0}, parent = {0};
    int got, status = OK, status_seen = 0;
    int32_t kind = 0, code = 0;
    uint64_t start = 0, end = 0;
    Py_ssize_t links = 0, events = 0, attributes = 0, kept = 0;
    PyObject *name = NULL, *message = NULL, *args = NULL, *records = NULL, *value = NULL, *span_hex = NULL, *entry = NULL,
             *link_attributes = NULL;
    while ((got = next_field(&r, &f)) == 1) {
        uint32_t wire = f.field == 6 ? 0 : (f.field == 7 || f.field == 8) ? 1 : 2;
        if (f.field == 3) {  /* trace_state: not kept, but checked as protobuf checks it */
            if ((status = check_text(&f)) != OK) goto done;
            continue;
        }
        if (f.field > 15 || f.field == 10 || f.field == 12 || f.field == 14) continue;
        if (f.wire != wire) {
            status = FALLBACK;
            goto done;
        }
        switch (f.field) {
        case 1: trace = f; break;
        case 2: span = f; break;
        case 4: parent = f; break;
        case 5:
            Py_XSETREF(name, text_of(&f, &status));
            if (name == NULL) goto done;
            break;
        case 6: kind = (int32_t)(uint32_t)f.number; break;
        case 7: start = f.number; break;
        case 8: end = f.number; break;
        case 9: attributes++; break;  /* (into the args after the span's own keys, as spans.py updates them) */
        case 11: events++; break;
        case 13: links++; break;
        case 15: {
            ONCE(status_seen);
            Reader sr = {f.bytes, f.bytes + f.size};
            Field g;
            int sgot;
            while ((sgot = next_field(&sr, &g)) == 1) {
                if (g.field == 2 && g.wire == 2) {
                    Py_XSETREF(message, text_of(&g, &status));
                    if (message == NULL) goto done;
                } else if (g.field == 3 && g.wire == 0) {
                    code = (int32_t)(uint32_t)g.number;
                } else if (g.field == 2 || g.field == 3) {
                    sgot = -1;
                    break;
                }
            }
            if (sgot < 0) {
                status = FALLBACK;
                goto done;
            }
            break;
        }
        }
    }
    /* What the Python way refuses, it refuses saying why: it takes the request. */
    if (got < 0 || !start || end < start || end > MAX_TIME_NS || span.size != 8 || trace.size != 16 || all_zeros(&span) ||
        all_zeros(&trace)) {
        status = FALLBACK;
        goto done;
    }
    status = ERROR;
    if (name == NULL) name = Py_NewRef(empty_text);
    if ((args = PyDict_New()) == NULL || (value = hex_of(trace.bytes, 16)) == NULL ||
        PyDict_SetItem(args, key_trace_id, value) < 0 || (span_hex = hex_of(span.bytes, 8)) == NULL ||
        PyDict_SetItem(args, key_span_id, span_hex) < 0 ||
        PyDict_SetItem(args, key_kind, kind >= 0 && kind < 6 ? kind_names[kind] : empty_text) < 0)
        goto done;
    Py_CLEAR(value);
    if (parent.size && ((value = hex_of(parent.bytes, parent.size)) == NULL || PyDict_SetItem(args, key_parent, value) < 0))
        goto done;
    Py_CLEAR(value);
    if (code) {
        value = code >= 0 && code < 3 ? Py_NewRef(status_names[code]) : PyUnicode_FromFormat("%d", (int)code);
        if (value == NULL || PyDict_SetItem(args, key_status, value) < 0) goto done;
        Py_CLEAR(value);
        if (message != NULL && PyUnicode_GET_LENGTH(message) && PyDict_SetItem(args, key_status_message, message) < 0)
            goto done;
    }
    if (scope != NULL && PyUnicode_GET_LENGTH(scope) && PyDict_SetItem(args, key_scope, scope) < 0) goto done;
    if (links) {
        int attributed = 0;
        if ((value = PyList_New(0)) == NULL || (link_attributes = PyList_New(0)) == NULL) goto done;
        r.p = bytes;
        while (next_field(&r, &f) == 1) {
            if (f.field != 13) continue;
            PyObject *attributes_of_link = PyDict_New();
            if (attributes_of_link == NULL) goto done;
            int past = kept++ >= limit, ignored = 0;  /* (past the limit: checked, not kept) */
            PyObject *text = link_text(f.bytes, f.size, &status, attributes_of_link, past ? &ignored : &attributed);
            int appended = text != NULL && (past || (PyList_Append(value, text) == 0 &&
                                                     PyList_Append(link_attributes, attributes_of_link) == 0));
            Py_XDECREF(text);
            Py_DECREF(attributes_of_link);
            if (!appended) {
                if (text != NULL) status = ERROR;
                goto done;
            }
        }
        if (links > limit) *dropped += links - limit;
        status = ERROR;
        if (PyDict_SetItem(args, key_links, value) < 0) goto done;
        if (attributed && PyDict_SetItem(args, key_link_attributes, link_attributes) < 0) goto done;
        Py_CLEAR(value);
    }
    if (attributes) {
        r.p = bytes;
        while (next_field(&r, &f) == 1) {
            if (f.field == 9 && (status = add_attribute(args, f.bytes, f.size)) != OK) goto done;
        }
        status = ERROR;
    }
    if ((records = PyList_New(5)) == NULL) goto done;
    PyList_SET_ITEM(records, 0, Py_NewRef(span_kind));
    PyList_SET_ITEM(records, 1, Py_NewRef(name));
    PyList_SET_ITEM(records, 2, PyLong_FromUnsignedLongLong(start));
    PyList_SET_ITEM(records, 3, PyLong_FromUnsignedLongLong(end));
    PyList_SET_ITEM(records, 4, Py_NewRef(args));
    if (PyList_GET_ITEM(records, 2) == NULL || PyList_GET_ITEM(records, 3) == NULL) goto done;
    if (events) {
        PyObject *trace_id = PyDict_GetItemWithError(args, key_trace_id);  /* (an attribute may have replaced it) */
        if (trace_id == NULL) goto done;
        r.p = bytes;
        kept = 0;
        while (next_field(&r, &f) == 1) {
            if (f.field != 11) continue;
            status = kept++ < limit ? add_event(records, f.bytes, f.size, span_hex, trace_id) : check_event(f.bytes, f.size);
            if (status != OK) goto done;
        }
        if (events > limit) *dropped += events - limit;
        status = ERROR;
    }
    entry = Py_BuildValue("(Oy#KK)", records, (const char *)trace.bytes, (Py_ssize_t)16, big_endian(&span),
                          big_endian(&parent));
    if (entry == NULL || PyList_Append(spans, entry) < 0) goto done;
    status = OK;
done:
    Py_XDECREF(name);
    Py_XDECREF(message);
    Py_XDECREF(args);
    Py_XDECREF(records);
    Py_XDECREF(value);
    Py_XDECREF(span_hex);
    Py_XDECREF(entry);
    Py_XDECREF(link_attributes);
    return status;
}

/* A ScopeSpans's spans appended to `spans`, its scope's name in their args. */
static int
scope_spans(PyObject *spans, const uint8_t *bytes, Py_ssize_t size, Py_ssize_t limit, Py_ssize_t *dropped)
{
    Reader r = {bytes, bytes + size};
    Field f;
    int got, status = OK, scope_seen = 0;
    PyObject *scope = NULL;
    while ((got = next_field(&r, &f)) == 1) {
        if (f.field == 1 && f.wire == 2) {
            ONCE(scope_seen);
            Reader sr = {f.bytes, f.bytes + f.size};
            Field g;
            int sgot;
            while ((sgot = next_field(&sr, &g)) == 1) {
                if (g.field == 1 && g.wire == 2) {
                    Py_XSETREF(scope, text_of(&g, &status));
                    if (scope == NULL) goto done;
                } else if (g.field == 1) {
                    sgot = -1;
                    break;
                } else if ((g.field == 2 && (status = check_text(&g)) != OK) ||
                           (g.field == 3 && (status = check_attribute(&g)) != OK)) {
                    goto done;
                }
            }
            if (sgot < 0) {
                status = FALLBACK;
                goto done;
            }
        } else if ((f.field == 1 || f.field == 2) && f.wire != 2) {
            status = FALLBACK;
            goto done;
        } else if (f.field == 3 && (status = check_text(&f)) != OK) {  /* schema_url */
            goto done;
        }
    }
    if (got < 0) {
        status = FALLBACK;
        goto done;
    }
    r.p = bytes;
    while (next_field(&r, &f) == 1) {
        if (f.field == 2 && (status = add_span(spans, f.bytes, f.size, scope, limit, dropped)) != OK) goto done;
    }
done:
    Py_XDECREF(scope);
    return status;
}

/* A ResourceSpans: (its resource's bytes, [its spans as span_of makes them], events and links dropped) appended to
   `out`. */
static int
resource_spans(PyObject *out, const uint8_t *bytes, Py_ssize_t size, Py_ssize_t limit)
{
    Reader r = {bytes, bytes + size};
    Field f;
    int got, status = OK, has_resource = 0;
    Py_ssize_t dropped = 0;
    Field resource = {0};
    PyObject *spans = PyList_New(0), *entry;
    if (spans == NULL) return ERROR;
    while (status == OK && (got = next_field(&r, &f)) == 1) {
        if (f.field == 1 && f.wire == 2 && !has_resource) {
            resource = f;
            has_resource = 1;
        } else if (f.field == 2 && f.wire == 2) {
            status = scope_spans(spans, f.bytes, f.size, limit, &dropped);
        } else if (f.field == 1 || f.field == 2) {
            status = FALLBACK;
        } else if (f.field == 3) {  /* schema_url */
            status = check_text(&f);
        }
    }
    if (status == OK && got < 0) status = FALLBACK;
    if (status == OK) {
        entry = Py_BuildValue("(y#Nn)", has_resource ? (const char *)resource.bytes : "", resource.size, spans, dropped);
        spans = NULL;
        if (entry == NULL) return ERROR;
        status = PyList_Append(out, entry) < 0 ? ERROR : OK;
        Py_DECREF(entry);
    }
    Py_XDECREF(spans);
    return status;
}

static PyObject *
spans_of(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer view;
    Py_ssize_t limit;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "spans_of(body, limit) takes 2 arguments");
        return NULL;
    }
    if ((limit = PyLong_AsSsize_t(args[1])) == -1 && PyErr_Occurred()) return NULL;
    if (limit < 0) {
        PyErr_SetString(PyExc_ValueError, "spans_of: limit must be >= 0");
        return NULL;
    }
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    Reader r = {view.buf, (const uint8_t *)view.buf + view.len};
    Field f;
    int got, status = OK;
    PyObject *out = PyList_New(0);
    if (out == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    while (status == OK && (got = next_field(&r, &f)) == 1) {
        if (f.field == 1 && f.wire == 2) {
            status = resource_spans(out, f.bytes, f.size, limit);
        } else if (f.field == 1) {
            status = FALLBACK;
        }
    }
    if (status == OK && got < 0) status = FALLBACK;
    PyBuffer_Release(&view);
    if (status == OK) return out;
    Py_DECREF(out);
    if (status == ERROR) return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"spans_of", (PyCFunction)(void (*)(void))spans_of, METH_FASTCALL,
     "spans_of(body, limit, /)\n--\n\nThe spans of an ExportTraceServiceRequest's protobuf bytes as records, per "
     "resource: [(resource bytes, [(records, trace id, span id, parent id)], events and links dropped)], each span's "
     "first `limit` events and links kept; None where the Python way must read it (see fast_spans.py)."},
    {NULL, NULL, 0, NULL},
};

static int
module_exec(PyObject *module)
{
    static const char *kinds[6] = {"unspecified", "internal", "server", "client", "producer", "consumer"};
    static const char *statuses[3] = {"unset", "ok", "error"};
    for (int i = 0; i < 6; i++)
        if ((kind_names[i] = PyUnicode_InternFromString(kinds[i])) == NULL) return -1;
    for (int i = 0; i < 3; i++)
        if ((status_names[i] = PyUnicode_InternFromString(statuses[i])) == NULL) return -1;
    if ((key_trace_id = PyUnicode_InternFromString("trace_id")) == NULL ||
        (key_span_id = PyUnicode_InternFromString("span_id")) == NULL ||
        (key_kind = PyUnicode_InternFromString("kind")) == NULL ||
        (key_parent = PyUnicode_InternFromString("parent_span_id")) == NULL ||
        (key_status = PyUnicode_InternFromString("status")) == NULL ||
        (key_status_message = PyUnicode_InternFromString("status_message")) == NULL ||
        (key_scope = PyUnicode_InternFromString("scope")) == NULL ||
        (key_links = PyUnicode_InternFromString("links")) == NULL ||
        (key_link_attributes = PyUnicode_InternFromString("link_attributes")) == NULL ||
        (empty_text = PyUnicode_InternFromString("")) == NULL || (span_kind = PyLong_FromLong(SPAN_KIND)) == NULL ||
        (instant_kind = PyLong_FromLong(INSTANT_KIND)) == NULL)
        return -1;
    return 0;
}

static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, module_exec},
#if PY_VERSION_HEX >= 0x030D0000
    {Py_mod_gil, Py_MOD_GIL_USED},
#endif
    {0, NULL},
};

static struct PyModuleDef spans_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "ringtrace.collector.ingest.otlp._spans",
    .m_doc = "OTLP spans as native records straight from the protobuf bytes, in C (see fast_spans.py).",
    .m_size = 0,
    .m_methods = module_methods,
    .m_slots = module_slots,
};

PyMODINIT_FUNC
PyInit__spans(void)
{
    return PyModuleDef_Init(&spans_module);
}
