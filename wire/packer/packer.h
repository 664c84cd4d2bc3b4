/* The stream encoder's inner loop, in C (ringtrace.wire._packer): what its files share.

Optional: when this module is not built, or is turned off with RINGTRACE_PURE_PYTHON=1, the stream encoder packs in
Python (event_packing.py). That defines the behaviour; the tests hold both to the same bytes.

- pack_columns() (pack_columns.c) writes the four integer columns of an EVENTS payload as msgpack, as msgpack-python
  would.
- pack_args() (pack_args.c) writes the args column the same way for the common shapes (no arguments, a map of text
  keys and flat values, an instant's Keywords, a message's flat values: pack_values.c), exactly as the Python path
  would normalise and pack them, and hands every other event's arguments to a Python function that does what the
  Python path does: the bytes agree either way.
- pack_events() (pack_events.c) writes a whole EVENTS frame (headers, columns, arguments) in one pass for a run whose
  events all have those common shapes and text labels, the same bytes as pack_columns() and pack_args() behind
  frames.py's headers, and gives up (None) at the first event of another shape, for those two to pack the run.
- pack_calls() (pack_calls.c) writes a whole EVENTS frame for a run of traced calls (call_records.py), from the
  records' bytes and each location's string and stack ids (call_packing.py interns them): no Python object a call.
- Keywords (keywords.c, keywords.h) is the type of an instant's arguments as the client's C recorder keeps them: this
  module defines it, and the recorder takes it from here at its import, so that the packers know it for theirs.
- tracked() (module.c) hands a list the recorder's take_runs() untracked back to the cyclic collector.
- wire_constants.h holds the protocol's numbers the C code relies on (a test holds them to the Python ones). */
#ifndef RINGTRACE_PACKER_H
#define RINGTRACE_PACKER_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef Py_GIL_DISABLED
#error "the packers read lists and dicts as the GIL keeps them; ringtrace packs in Python on free-threaded builds"
#endif

#include "wire_constants.h"
#include "keywords.h"
#include "msgpack_put.h"

/* An EVENTS frame's framing and header (PROTOCOL.md, "EVENTS"), then its payload's column-array header: what every
   packer of a whole frame writes first. Returns where the kind column begins. */
static inline unsigned char *
put_events_head(unsigned char *p, Py_ssize_t body_size, long long track_id, Py_ssize_t n, long long first_ns,
                long long last_ns)
{
    p = put_le(p, (uint64_t)body_size, 4);
    PUT1(p, FRAME_TYPE_EVENTS);
    p = put_le(p, EVENTS_HEADER_SIZE, 2);
    p = put_le(p, 0, 2); /* flags */
    p = put_le(p, (uint64_t)track_id, 4);
    p = put_le(p, (uint64_t)n, 4);
    p = put_le(p, (uint64_t)first_ns, 8);
    p = put_le(p, (uint64_t)last_ns, 8);
    return put_array_header(p, EVENT_COLUMN_COUNT);
}

/* Per module object, so per interpreter. */
typedef struct {
    PyTypeObject *keywords_type;
} PackerState;

/* A growing buffer of msgpack bytes. */
typedef struct {
    unsigned char *data;
    Py_ssize_t size, capacity;
} Packed;

/* The keys of the last Keywords a run packed, packed: consecutive instants mostly come from one call site, whose
   calls all pass the same names tuple. */
#define CACHED_KEYS 8
typedef struct {
    PyObject *names;               /* the names tuple `keys` holds, a reference; NULL: none */
    Packed keys;                   /* its keys as pack_text writes them, back to back */
    Py_ssize_t ends[CACHED_KEYS];  /* where each ends in keys.data */
} KeyCache;

/* The value of an int (of any int type) of at most two digits, so within 60 bits: every kind, string id and timestamp
   the encoder reads, most argument values. 1 when read, 0 for PyLong_AsLongLongAndOverflow to read. A call less for
   each such int, four an event: read as CPython up to 3.11 lays an int out (digits of PyLong_SHIFT bits, their count
   signed in ob_size); later versions, whose layout changed, through their own reader of one-digit ints. */
static inline int
small_int64(PyObject *value, int64_t *out)
{
#if PY_VERSION_HEX < 0x030C0000
    const digit *digits = ((PyLongObject *)value)->ob_digit;
    switch (Py_SIZE(value)) {
    case 0: *out = 0; return 1;
    case 1: *out = (int64_t)digits[0]; return 1;
    case -1: *out = -(int64_t)digits[0]; return 1;
    case 2: *out = (int64_t)digits[0] | ((int64_t)digits[1] << PyLong_SHIFT); return 1;
    case -2: *out = -((int64_t)digits[0] | ((int64_t)digits[1] << PyLong_SHIFT)); return 1;
    default: return 0;
    }
#else
    if (!PyUnstable_Long_IsCompact((PyLongObject *)value)) return 0;
    *out = (int64_t)PyUnstable_Long_CompactValue((PyLongObject *)value);
    return 1;
#endif
}

/* Inline, as they were when the packers were one file: called for every value of every event, in the loops that
   spend about what the recording call did. */

/* Room for `more` bytes past the end; -1 (MemoryError set) when there is none to be had. Never runs Python code. */
static inline int
packed_reserve(Packed *out, Py_ssize_t more)
{
    Py_ssize_t capacity;
    unsigned char *data;
    if (out->capacity - out->size >= more) return 0;
    if (more > PY_SSIZE_T_MAX / 2 - out->size) {
        PyErr_NoMemory();
        return -1;
    }
    capacity = 2 * (out->size + more);
    data = PyMem_Realloc(out->data, (size_t)capacity);
    if (data == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    out->data = data;
    out->capacity = capacity;
    return 0;
}

/* Event i's value in column c of `records`, re-read each time: a string-table miss runs Python code. */
static inline PyObject *
record_value(PyObject *records, Py_ssize_t i, int c)
{
    Py_ssize_t index = i * RECORD_FIELDS + c;
    if (index >= PyList_GET_SIZE(records)) {
        PyErr_SetString(PyExc_RuntimeError, "pack_columns: the records changed while being packed");
        return NULL;
    }
    return PyList_GET_ITEM(records, index);
}

static inline int
as_int64(PyObject *value, const char *column, int64_t *out)
{
    if (!PyLong_Check(value) || PyBool_Check(value)) { /* msgpack packs a bool as true or false, not as an int */
        PyErr_Format(PyExc_TypeError, "pack_columns: %s must be an int, got %.100s", column, Py_TYPE(value)->tp_name);
        return -1;
    }
    if (small_int64(value, out)) return 0;
    /* Not PyLong_AsLongLong: it converts values past 2**30 (every timestamp) byte by byte. */
    int overflow;
    long long result = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (overflow) {
        PyErr_Format(PyExc_OverflowError, "pack_columns: %s does not fit 64 bits", column);
        return -1;
    }
    *out = result;
    return (result == -1 && PyErr_Occurred()) ? -1 : 0;
}

/* The indexes of a run (labels of records, locations of calls) whose string id is still unknown (< 0) in `names`,
   each once, in the order first met: what pack_records() and pack_calls() hand back for the Python side to intern.
   Each listed is marked MISSING_ID in `names` so that it is listed once; on failure the marks are undone (the indexes
   are still not interned) and NULL returned with the exception set. `next` gives the run's indexes one by one (1 with
   *index set, 0 at the end, -1 with an exception set), each already checked to be within `names`. Inline: each
   packer passes its own static `next`, which the compiler inlines into its copy of the loop. */
#define MISSING_ID (-3)
typedef int (*next_index_fn)(void *cursor, uint32_t *index);
static inline PyObject *
missing_indexes(int64_t *names, next_index_fn next, void *cursor)
{
    PyObject *missing = PyList_New(0);
    Py_ssize_t i;
    uint32_t index;
    int status;
    if (missing == NULL) return NULL;
    while ((status = next(cursor, &index)) > 0) {
        if (names[index] >= 0 || names[index] == MISSING_ID) continue;
        PyObject *item = PyLong_FromUnsignedLong(index);
        if (item == NULL || PyList_Append(missing, item) < 0) {
            Py_XDECREF(item);
            status = -1;
            break;
        }
        Py_DECREF(item);
        names[index] = MISSING_ID;
    }
    if (status == 0) return missing;
    for (i = 0; i < PyList_GET_SIZE(missing); i++) names[PyLong_AsSsize_t(PyList_GET_ITEM(missing, i))] = -1;
    Py_DECREF(missing);
    return NULL;
}

#pragma GCC visibility push(hidden)

/* keywords.c */
extern PyType_Spec keywords_spec;

/* pack_columns.c, pack_args.c, pack_events.c, pack_calls.c: the module's functions. */
PyObject *pack_columns(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
PyObject *pack_args(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
PyObject *pack_events(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
PyObject *pack_calls(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
PyObject *pack_records(PyObject *module, PyObject *const *args, Py_ssize_t nargs);

/* pack_values.c */
int pack_text(Packed *out, PyObject *text);
int pack_flat(Packed *out, PyObject *value);
int pack_flat_map(Packed *out, PyObject *map);
int pack_keywords(Packed *out, Keywords *keywords);
int pack_keywords_cached(Packed *out, Keywords *keywords, KeyCache *cache);
int pack_flat_values(Packed *out, PyObject *values);

/* pack_columns.c */
int string_id(PyObject *table, PyObject *label, int64_t *out);

#pragma GCC visibility pop

#endif
